// Running a matrix: one `parity train` child process per cell, a few at a time, then each cell
// against its reference at step 1 (docs/design.md section 7).
//
// DIR/
//   results.json               the MatrixResult, rewritten after every cell (reports/results.h)
//   seeds/<batch shape>.h5     one seed checkpoint per batch shape, shared by its cells
//   cells/<name>/log.txt       the cell's console output
//   cells/<name>/metrics.jsonl every step's loss and grad norm (hex exact)
//   cells/<name>/summary.json  step times and transport bytes
//   cells/<name>/dump/         step 1's gradients and parameters (and ledger, in-process)
//
// A cell that fails (non-zero exit, a crash, a timeout) is marked failed with its last error
// line and the others go on. Cells run as separate processes, so one cell's crash cannot take
// the matrix down, and each cell's numbers are those `parity train` gives on its own.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reports/matrix.h"
#include "reports/results.h"
#include "spec/options.h"

namespace parity::matrix {

struct MatrixRunOptions {
  std::string out_dir;
  int jobs = 1;               // cores to keep busy (a cell takes Cell::cores() of them)
  int64_t steps = 0;          // > 0: every cell runs this many steps (the gate: 1)
  std::optional<spec::Device> device;  // set: every cell runs on this device
  std::string tokens;         // non-empty: every cell reads this token file (train --tokens)
  std::vector<std::string> only;  // cell names to run (their references are added); empty: all
  std::vector<std::pair<std::string, std::string>> inject;  // (cell, fault spec) added
  double cell_timeout_s = 0;  // > 0: a cell running longer is killed and marked failed
  bool quiet = false;         // no progress lines
  // Called once the matrix is checked, before the first cell starts (the cells to run).
  std::function<void(const reports::MatrixResult&)> on_start;
};

// A cell's error when its batch shape's seed checkpoint could not be made (a configuration
// problem: the gate cannot run).
constexpr const char* kNoSeed = "its seed checkpoint could not be made";

// A run stopped by SIGINT or SIGTERM: results.json holds what finished.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(const std::string& what, int signal) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }  // the signal that stopped it: the exit is 128 + it

 private:
  int signal_;
};

// Runs the cells and the step-1 comparisons, writes DIR/results.json. Throws harness::UsageError for a
// bad --out or --only, Interrupted when stopped; a cell's failure is recorded, not thrown.
reports::MatrixResult run_matrix(const reports::Matrix& m, const MatrixRunOptions& o);

}  // namespace parity::matrix
