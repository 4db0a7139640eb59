// Hand-made report results for the tests of parity_reports: step points with their hex
// bits, a MatrixResult built from a matrix file's text, and the four-cell result that the
// renderer and results.json tests share. Every value is chosen here, never read off the
// library's output.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reports/matrix.h"
#include "reports/results.h"

namespace parity::testing {

namespace rp = parity::reports;


inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// C99 hex float, as the metrics JSONL writes it.
inline std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

inline rp::StepPoint point(int64_t step, double loss, double grad_norm, double seconds = 0.25) {
  rp::StepPoint p;
  p.step = step;
  p.loss = loss;
  p.grad_norm = grad_norm;
  p.loss_hex = hex(loss);
  p.grad_norm_hex = hex(grad_norm);
  p.seconds = seconds;
  return p;
}

// A result with one ok cell per cell of the matrix text (named "r.toml"), no steps yet.
inline rp::MatrixResult result_of(const std::string& matrix_text, std::vector<int64_t> report_steps) {
  const auto m = rp::parse_matrix(matrix_text, "r.toml");
  rp::MatrixResult r;
  r.matrix = m.name;
  r.source = m.source;
  r.git_sha = "0123456789abcdef";
  r.started = "2026-11-30T12:00:00Z";
  r.wall_seconds = 12.5;
  r.report_steps = std::move(report_steps);
  for (const auto& c : m.cells) {
    rp::CellResult cr;
    cr.cell = c;
    cr.status = "ok";
    cr.gate.gate = c.gate;
    r.cells.push_back(cr);
  }
  return r;
}

inline rp::CellResult& cell_of(rp::MatrixResult& r, const std::string& name) {
  for (auto& c : r.cells)
    if (c.cell.name == name) return c;
  throw std::runtime_error("no cell " + name);
}

// The seed's four report steps; ref, a naive cell identical to it on every step, a cached
// cell that drifts, and a cached cell that failed after two steps.
constexpr const char* kRender = R"(name = "render"
report_steps = [1, 10, 50, 100]
[defaults]
steps = 100
[[cell]]
name = "ref"
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "order-only"
[[cell]]
name = "broken"
reference = "ref"
trainer = "pipelined"
pp = 4
vp = 2
gate = "order-only"
)";

constexpr const char* kBrokenError = "exit 1: parity: deposit count for block 2 at stage 7";

// The steps of the four cells of kRender: a reference loss of 9 - step/64 (exact in binary).
inline rp::MatrixResult rendered() {
  auto r = result_of(kRender, {1, 10, 50, 100});
  for (int s = 1; s <= 100; ++s) {
    const double loss = 9.0 - s / 64.0;  // step 1: 8.984375; 10: 8.84375; 50: 8.21875; 100: 7.4375
    cell_of(r, "ref").steps.push_back(point(s, loss, 1.5));
    cell_of(r, "naive").steps.push_back(point(s, loss, 1.5));
    // The cached cell: equal at step 1, then loss + 1/16 and grad norm 1.53 (+2%).
    cell_of(r, "cached").steps.push_back(
        point(s, s == 1 ? loss : loss + 0.0625, s == 1 ? 1.5 : 1.53));
  }
  auto& broken = cell_of(r, "broken");
  broken.steps = {point(1, 8.984375, 1.5), point(2, 8.96875, 1.5)};
  broken.status = "failed";
  broken.error = kBrokenError;
  broken.gate.passed = false;
  broken.gate.why = "the cell did not run to the end";
  cell_of(r, "naive").step1.have = true;
  cell_of(r, "naive").step1.tensors = 5;
  cell_of(r, "cached").verdicts.have = true;
  cell_of(r, "cached").verdicts.order_only = 5;
  return r;
}

}  // namespace parity::testing
