// Renderers of a matrix result: plain text and Markdown (the drift tables as the seed prints
// them, footnotes, the summary and an OK/FAILED footer), CSV, JSON (the same numbers), and a
// self-contained HTML page with SVG plots. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reports/drift.h"
#include "reports/history.h"
#include "reports/results.h"

namespace parity::reports {

// `trend`, when given and holding runs, adds the history section.
std::string render_text(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_markdown(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_csv(const MatrixResult& r);
nlohmann::json render_json(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_html(const MatrixResult& r, const Trend* trend = nullptr);

// One drift table on its own (`parity drift`, and each table of the reports above): the rows,
// each cell's identical-steps line and the footnotes. The CSV has a line per row, metric and
// report step.
std::string drift_table_text(const DriftTable& t);
std::string drift_table_markdown(const DriftTable& t);
nlohmann::json drift_table_json(const DriftTable& t);
std::string drift_table_csv(const DriftTable& t);
// A page of one drift table and the loss and grad-norm curves of its runs (`runs` holds them as
// cells, the reference first).
std::string render_drift_html(const DriftTable& t, const MatrixResult& runs);

// The footer line: "OK: 17 cells run, 14 gates passed" or "FAILED: ..." naming what failed.
std::string footer(const MatrixResult& r);

}  // namespace parity::reports
