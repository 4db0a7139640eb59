// Renderers of a matrix result: plain text and Markdown (the drift tables as the seed prints
// them, footnotes, the summary and an OK/FAILED footer), CSV, JSON (the same numbers), and a
// self-contained HTML page with SVG plots. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reports/history.h"
#include "reports/results.h"

namespace parity::reports {

// `trend`, when given and holding runs, adds the history section.
std::string render_text(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_markdown(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_csv(const MatrixResult& r);
nlohmann::json render_json(const MatrixResult& r, const Trend* trend = nullptr);
std::string render_html(const MatrixResult& r, const Trend* trend = nullptr);

// The footer line: "OK: 17 cells run, 14 gates passed" or "FAILED: ..." naming what failed.
std::string footer(const MatrixResult& r);

}  // namespace parity::reports
