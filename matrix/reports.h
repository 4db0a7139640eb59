// `parity matrix run` and `parity report` (docs/design.md section 7): a matrix run with its
// history and every rendering beside results.json, and a run directory rendered again.
//
// Exit codes of both: 0 every cell ran and every gate passed, 1 otherwise.
#pragma once

#include <string>
#include <vector>

#include "dumps/junit.h"
#include "matrix/runner.h"
#include "reports/history.h"
#include "reports/results.h"

namespace parity::matrix {

struct MatrixJob {
  std::string file;                 // a matrix file, or a shipped one (quick, seed)
  MatrixRunOptions run;             // jobs <= 0: every core
  std::vector<std::string> inject;  // CELL=KIND:block=B,stage=S
  std::string history;              // a JSONL history to append to and show the trend of
  int last = 10;                    // runs of history to show
  std::string junit;                // JUnit XML: one testcase per cell
  std::string markdown;             // the Markdown report, for a PR comment
};

struct ReportJob {
  std::string dir;             // the --out directory of a matrix run
  spec::ReportFormat format = spec::ReportFormat::Txt;
  std::string out;             // "" = standard output
  std::string history;
  int last = 10;
};

// report.txt, .md, .json, .csv and .html in `dir`, beside results.json, so that a run
// directory is a report on its own. Throws harness::UsageError when a file cannot be written.
void write_reports(const std::string& dir, const reports::MatrixResult& r,
                   const reports::Trend* trend);

// --inject CELL=KIND:block=B,stage=S specs into the run's (cell, fault) pairs; harness::UsageError on
// a spec without a cell.
void add_injections(const std::vector<std::string>& specs, MatrixRunOptions& run);

// One JUnit testcase per cell (a failure when the cell did not run cleanly or its gate failed,
// with the reason; skipped when it did not run).
std::vector<dumps::JunitCase> junit_cases(const reports::MatrixResult& r);

// The --junit and --markdown files of a matrix result, when asked for ("" = not).
void write_side_reports(const reports::MatrixResult& r, const std::string& junit,
                        const std::string& markdown);

// Runs the matrix (matrix/runner.h), appends to the history, writes the reports and
// prints the text report. Throws harness::UsageError for bad input, Interrupted when stopped.
int matrix_run_command(MatrixJob& job);

// Renders DIR/results.json in the chosen format.
int report_command(const ReportJob& job);

}  // namespace parity::matrix
