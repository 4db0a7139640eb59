// What running a matrix cell by cell (matrix/runner.cpp) and planning one for another
// scheduler (matrix/plan.cpp) share: the cells chosen and checked, each cell's `parity train` command,
// and what a finished cell left behind.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "harness/process.h"
#include "matrix/runner.h"
#include "reports/matrix.h"
#include "reports/results.h"

namespace parity::matrix::detail {

std::string self_binary();  // this parity binary's path
std::string now_iso();      // the time, ISO 8601 UTC

// The cells to run (all, or --only and their references, with --steps, --device and --inject
// applied), each checked as `parity train` would check it, and the report steps cut to the
// cells' last step. Throws harness::UsageError naming the cell.
reports::MatrixResult prepare_cells(const reports::Matrix& m, const MatrixRunOptions& o);

// The order to start the cells in: the longest first, by a rough measure of the work per core
// (steps x tokens per step, weighted by dtype, shared among a cell's processes and threads),
// ties in file order. Started so, the short cells fill the end, where the cores would otherwise
// idle behind one long cell.
std::vector<size_t> launch_order(const std::vector<reports::CellResult>& cells);

// The cell's `parity train` command: its arguments, the seed checkpoint, and its metrics,
// summary and step-1 dump (with the ledger where it is read) under `dir`.
std::vector<std::string> cell_command(const reports::Cell& cell, const std::string& self,
                                      const std::string& seed, const std::filesystem::path& dir,
                                      const std::string& tokens);

// Runs `parity init` (or any short command) to its end, output into `log`; its exit code (128
// + the signal when one ended it). A stop that `stop` records stops it.
int run_seed_init(const std::vector<std::string>& args, const std::filesystem::path& log,
                  const harness::StopFlag* stop = nullptr);

// A finished cell's logged steps and run figures (metrics.jsonl, summary.json under `dir`).
void collect(reports::CellResult& c, const std::filesystem::path& dir);
// The line of a cell's log that says why it failed, and its "parity: warning:" lines.
std::string last_error(const std::filesystem::path& log);
std::vector<std::string> warnings(const std::filesystem::path& log);

// How a cell's process ended, as the runner saw it.
struct CellEnding {
  harness::ExitStatus exit;  // meaningless when timed out
  bool timed_out = false;    // stopped by the runner after --cell-timeout-s
  bool stopped = false;      // the matrix run was stopped (Ctrl-C, SIGTERM)
  double seconds = 0;        // how long it ran
  std::string last_error;    // its log's last error line (last_error())
};

// The cell's status ("ok" or "failed") and error from how it ended and the steps it logged
// (collect() first): ok only when it exited 0 having logged every step.
void settle(reports::CellResult& c, const CellEnding& e);

}  // namespace parity::matrix::detail
