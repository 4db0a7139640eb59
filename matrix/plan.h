// A matrix on any scheduler (a Slurm array, a CI matrix, xargs -P, GNU parallel):
//
//   parity matrix plan FILE --out DIR   checks the matrix, writes the seed checkpoints and one
//                                       self-contained command per cell, then stops;
//   (the scheduler runs the lines of DIR/commands.txt, in any order, anywhere DIR is visible)
//   parity matrix judge DIR             judges and reports what finished, as `matrix run` does.
//
// DIR/
//   plan.json                 the matrix, its cells as they will run, and the commands
//   commands.txt              one line per cell: sh 'DIR/cells/<name>/run.sh'
//   seeds/<batch shape>.h5    the seed checkpoints
//   cells/<name>/run.sh       runs the cell's `parity train` into cells/<name>/ and records its
//                             exit status in cells/<name>/exit_status when it ends
//   results.json, report.*    written by judge
//
// A cell whose command has not run (or not ended) is "not run" in the report, and judge exits
// 1, as it does when a cell failed or a gate did not pass; 0 when every cell ran and every gate
// passed; 2 on bad input (no plan in DIR, a plan of another matrix).
#pragma once

#include <string>

#include "matrix/runner.h"

namespace parity::matrix {

struct PlanJob {
  std::string file;          // a matrix file, or a shipped one (quick, seed)
  MatrixRunOptions run;      // out_dir, only, steps, device, tokens, inject
  std::vector<std::string> inject;  // CELL=KIND:block=B,stage=S
};

struct JudgeJob {
  std::string dir;
  std::string matrix;    // when given, the plan must be of this matrix
  std::string junit;     // JUnit XML: one testcase per cell
  std::string markdown;  // the Markdown report, for a PR comment
  bool quiet = false;
};

int matrix_plan_command(PlanJob& job);
int matrix_judge_command(const JudgeJob& job);

}  // namespace parity::matrix
