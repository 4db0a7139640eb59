// What a matrix run leaves behind (DIR/results.json) and every report reads. Torch-free.
//
// `parity matrix run` fills it cell by cell; `parity report` renders it. A cell that failed
// keeps its status, error and whatever steps it logged, so the other cells still render.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reports/matrix.h"

namespace parity::reports {

constexpr uint64_t kUlpInfinite = std::numeric_limits<uint64_t>::max();

// One logged step (the metrics JSONL); hex fields are C99 hex floats of the exact values.
struct StepPoint {
  int64_t step = 0;
  double loss = 0, grad_norm = 0;
  std::string loss_hex, grad_norm_hex;
  double seconds = 0;  // wall time of the step (NaN-free; 0 when unknown)
};

// The cell against its reference at step 1, tensor by tensor (grads and params).
struct Step1Diff {
  bool have = false;
  std::string why_not;  // when !have: "reference failed", "no dump", ...
  int tensors = 0;      // compared tensors
  int wrong_tensors = 0;  // tensors whose bits differ
  uint64_t max_ulp = 0;   // over all tensors; kUlpInfinite for a NaN/Inf mismatch
  // Per gradient tensor, its largest ulp distance (0 when bitwise), FQN order.
  std::vector<uint64_t> grad_ulps;
  bool scalars_equal = true;  // loss, grad norm and micro-batch losses bitwise at step 1
};

// The ledger's verdicts at step 1 (compare/localise.h), per dumped tensor.
struct Verdicts {
  bool have = false;
  std::string why_not;  // e.g. "multi-process runs record no ledger"
  int exact = 0, order_only = 0, wrong = 0;
  std::string first_wrong;   // the first WRONG tensor and its reason
  std::string divergence;    // the first divergence, in words ("" when none)
};

struct GateResult {
  Gate gate = Gate::None;
  bool passed = true;
  std::string why;  // why it failed
};

struct CellResult {
  Cell cell;
  std::string status = "not run";  // "ok" | "failed" | "not run"
  std::string error;               // failed: the cell's last error line, or the exit status
  std::string log;                 // the cell's console log, relative to the run directory
  std::vector<std::string> warnings;  // the cell's "parity: warning:" lines (a fault that never fired)
  double wall_seconds = 0;
  double seconds_per_step = 0;  // median over the logged steps
  int64_t tokens_per_step = 0;
  int64_t bytes_forward_per_mb = -1, bytes_backward_per_mb = -1;  // pipelined; -1 otherwise
  std::vector<StepPoint> steps;  // ascending in step (sort_steps), so at() can bisect
  Step1Diff step1;
  Verdicts verdicts;
  GateResult gate;
  // The pipelined cell's layout, as `parity layout --json` prints it (null otherwise).
  nlohmann::json layout;

  bool ok() const { return status == "ok"; }
  const StepPoint* at(int64_t step) const;  // null when not logged
};

// Orders a cell's steps by step number, keeping equal steps in their order.
void sort_steps(std::vector<StepPoint>& steps);

struct MatrixResult {
  std::string matrix;      // its name
  std::string source;      // the matrix file
  std::string git_sha;
  std::string started;     // ISO 8601, UTC
  double wall_seconds = 0;
  std::vector<int64_t> report_steps;
  std::vector<CellResult> cells;  // the matrix's order

  const CellResult* find(const std::string& name) const;
  bool complete() const;  // every cell ok
  bool gates_ok() const;  // every cell's gate passed
};

nlohmann::json to_json(const MatrixResult& r);
MatrixResult from_json(const nlohmann::json& j);  // MatrixError on a malformed file

// DIR/results.json. read_results throws MatrixError naming the directory when there is no
// result (an empty directory, a run that never started) or the file is malformed.
void write_results(const std::string& dir, const MatrixResult& r);
MatrixResult read_results(const std::string& dir);

}  // namespace parity::reports
