// The sections of the HTML report (render_html, html.cpp), one function each, so that the page
// is assembled from parts of a few hundred lines. Internal to parity_reports. Every function
// returns escaped HTML; none throws on a failed cell, a cell without steps or a malformed
// layout.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/results.h"

namespace parity::reports::html {

// Per drift table (reference group): (a) the loss of every cell with logged steps, linear y;
// (b) |loss - reference loss| per step shared with the reference, log y; (c) the same for the
// grad norm. (b) and (c) are drawn when the reference logged steps and another cell did; their
// captions say, per cell, how many steps are exactly zero (bitwise equal: not drawable on a
// log axis). Three <svg> per table at most.
std::string plots_section(const MatrixResult& r, const std::vector<DriftTable>& tables);

// Per-tensor gradient ulp histograms at step 1 (svg::ulp_buckets): one <svg> per cell with a
// step-1 comparison and a nonzero grad_ulps entry; the bitwise-equal cells in one sentence,
// and the compared cells without a comparison with the reason.
std::string ulp_section(const MatrixResult& r);

// One layout diagram (layout_svg) per cell whose CellResult::layout is not null.
std::string layout_section(const MatrixResult& r);

// A pipelined cell's stages, as `parity layout --json` prints them: one lane per rank, the
// rank's stages left to right in stage order, each box "S<stage> <units>", the blocks it
// commits and the blocks it deposits to their owner; an arc per (depositing stage, owner) pair
// above the lane, arrow at the owner (none in a lane with more than 8 pairs: the boxes list
// them). Throws nlohmann::json::exception on a malformed layout, std::invalid_argument on a
// rank outside 0..stages-1. cached = false (the naive transport): no deposits are drawn.
std::string layout_svg(const nlohmann::json& layout, bool cached = true);

}  // namespace parity::reports::html
