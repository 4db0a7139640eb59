// `parity gate [--matrix FILE]`: the step-1 checks, for CI and `git bisect run`.
//
//   contract 1  each gated cell of the matrix (the shipped quick one by default) run for one
//               step: `bitwise` cells equal to their reference bit for bit (loss, grad norm,
//               every gradient and updated parameter);
//   contract 2  `order-only` cells: no WRONG verdict from the ledger;
//   contract 3  the exact flavor against its closed form (3 steps, a forward-only pass
//               between) for the reference and every pipelined shape the gated cells use,
//               cache on and off, in bf16.
//
// Exit codes: 0 pass, 1 a check failed, 125 the gate cannot run (a bad matrix, a cell that
// refuses its configuration, no seed checkpoint): what `git bisect run` reads as "skip";
// 128 + the signal when stopped by SIGINT, SIGTERM or SIGHUP (bisect stops too).
#pragma once

#include <string>

#include "matrix/runner.h"

namespace parity::matrix {

constexpr int kGateCannotRun = 125;

struct GateOptions {
  std::string matrix = "quick";  // a matrix file, or a shipped one
  std::string out;               // "" = a temporary directory, removed when the gate passes
  MatrixRunOptions run;          // jobs, device, tokens, quiet (the cells and steps are the gate's)
  bool keep = false;             // keep the temporary directory even when the gate passes
  bool closed_forms = true;
  std::string junit;     // JUnit XML: one testcase per gated cell and per closed form
  std::string markdown;  // the Markdown summary, for a PR comment
};

// Runs the gate and returns its exit code (0, 1, kGateCannotRun or 128 + a signal); prints
// the summary and the verdict on stdout, why it cannot run on stderr.
int run_gate(GateOptions& o);

}  // namespace parity::matrix
