// The drift table, as the seed prints it, and the per-cell summary (docs/design.md section 7).
// Torch-free; every renderer (text, Markdown, CSV, JSON, HTML) draws from these.
//
// Per table (a reference cell and the cells compared against it), per row and report step:
// the raw value (loss with 6 decimals, grad norm with 4), then `identical` when the printed
// value equals the reference's, else the signed change in percent with 2 decimals (a change
// that rounds to zero prints +0.00% or -0.00%: the values differ in the printed digits).
// Beside them, per metric, how many logged steps are bitwise identical to the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reports/results.h"

namespace parity::reports {

struct DriftValue {
  std::string value;   // "8.003520"; "" when the step was not logged
  std::string change;  // "" (reference row), "identical", "-0.09%", "n/a" (missing)
};

// How many steps a metric shares bit for bit with the reference, in words:
//   "all 100 steps identical"
//   "99 of 100 steps identical; step 37 differs by one unit in the last printed digit
//    (1.2084 vs 1.2085)"
//   "1 of 100 steps identical; first differs at step 2 (3.484850 vs 3.488880)"
struct IdenticalSteps {
  int64_t compared = 0;   // steps logged by both
  int64_t identical = 0;  // of them, bitwise equal
  std::string text;
};

struct DriftRow {
  std::string cell;   // the cell's name
  std::string label;  // with its footnote marks, e.g. "pp2 x vp2, naive [2]"
  bool reference = false;
  std::string status;  // the cell's status; "failed: <error>" rows carry no values
  std::vector<DriftValue> loss, grad_norm;  // one per report step
  IdenticalSteps loss_same, grad_norm_same;
};

struct Footnote {
  int number = 0;
  std::string text;
};

struct DriftTable {
  std::string reference;  // the reference cell's name
  std::string title;      // e.g. "tiny, bf16, 1 x 4 x 1 x 64 tokens per step, 20 steps"
  std::vector<int64_t> steps;
  std::vector<DriftRow> rows;  // the reference first
  std::vector<Footnote> footnotes;  // the marks used in this table
};

std::vector<DriftTable> drift_tables(const MatrixResult& r);

// One row: a cell against its reference (null for the reference's own row) at `steps`, with
// the cell's label as it is (drift_tables adds the footnote marks).
DriftRow drift_row(const CellResult& c, const CellResult* reference,
                   const std::vector<int64_t>& steps);

// The row kinds a footnote explains, decided from the cell and its reference:
// "reference", "naive", "split", "stock", "reversed", "repeat", "per-rank", "multi-process",
// "fault". Footnote numbers follow this order over the whole report.
std::vector<std::string> row_kinds(const Cell& cell, const Cell* reference);
std::string footnote_text(const std::string& kind);

// One word for a cell at step 1: REFERENCE, EXACT, ORDER-ONLY, WRONG (the ledger's verdicts),
// BITWISE or DIFFERS (no ledger: the comparison only), FAILED, NOT RUN, or n/a.
std::string step1_verdict(const CellResult& c);

// The nccl-tests style summary, one row per cell.
struct SummaryRow {
  std::string cell;
  std::string verdict;  // step1_verdict
  std::string wrong;    // "#wrong" tensors at step 1, or "-"
  std::string max_ulp;  // "0", "37", "inf", or "-"
  int exact = -1, order_only = -1, wrong_verdicts = -1;  // -1: no ledger
  double seconds_per_step = 0;
  int64_t bytes_forward_per_mb = -1, bytes_backward_per_mb = -1;
  std::string gate;     // "-", "pass", "FAIL"
  std::string note;     // the gate's or the run's failure, else ""
};
std::vector<SummaryRow> summary_rows(const MatrixResult& r);

// The signed relative change (value - reference) / |reference| in percent; none when the
// reference is 0 or either value is not finite.
std::optional<double> relative_change_pct(double value, double reference);
// The same as the table prints it: "+0.21%", or "n/a" when there is none.
std::string percent_change(double value, double reference);

}  // namespace parity::reports
