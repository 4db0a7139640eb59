// parity matrix run FILE --out DIR: every cell of a matrix, then the drift tables and the
// verdict summary. parity report DIR: the same result rendered again, in any format
// (harness/matrix_reports.h). Exit codes: 0 every cell ran and every gate passed, 1
// otherwise, 2 bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/limits.h"
#include "harness/matrix_reports.h"

namespace parity::cli {

namespace {

void add_run_matrix_options(CLI::App& cmd, harness::MatrixRunOptions& o) {
  cmd.add_option("--jobs", o.jobs, "cores to keep busy (default: all)")->check(threads());
  cmd.add_option("--cell-timeout-s", o.cell_timeout_s, "stop a cell that runs longer (0: never)")
      ->capture_default_str()->check(real_in(0, harness::kMaxTimeoutS, /*lo_open=*/false));
  cmd.add_flag("--quiet", o.quiet, "no progress lines");
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("matrix", "run a matrix of cells against their references");
  cmd->require_subcommand(1);
  auto* run = cmd->add_subcommand("run", "run every cell, compare step 1, print the report");
  auto o = std::make_shared<harness::MatrixJob>();
  o->run.jobs = 0;
  run->add_option("file", o->file, "matrix file (TOML), or a shipped one: quick, seed")->required()
      ->check(non_empty_path());
  run->add_option("--out", o->run.out_dir, "directory for the cells' runs and the reports")
      ->required()->check(non_empty_path());
  add_run_matrix_options(*run, o->run);
  run->add_option("--only", o->run.only, "run only these cells (and their references)")
      ->delimiter(',');
  run->add_option("--steps", o->run.steps, "override every cell's step count")
      ->check(integer_in(1, harness::kMaxSteps));
  run->add_option("--device", o->run.device, "run every cell on this device (cpu, cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--tokens", o->run.tokens, "every cell reads this token file (train --tokens)")
      ->check(non_empty_path());
  run->add_option("--inject", o->inject, "CELL=KIND:block=B,stage=S: a routing fault in a cell");
  run->add_option("--history", o->history, "append the result to this JSONL history and show "
                                           "the trend")
      ->check(non_empty_path());
  run->add_option("--last", o->last, "runs of history to show")->capture_default_str()
      ->check(integer_in(1, 100000));
  return {cmd, [o] { return harness::matrix_run_command(*o); }};
}

Command add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "render a matrix run's result");
  auto o = std::make_shared<harness::ReportJob>();
  cmd->add_option("dir", o->dir, "the --out directory of `parity matrix run`")->required()
      ->check(non_empty_path());
  cmd->add_option("--format", o->format, "txt, md, json, csv or html")
      ->check(CLI::IsMember({"txt", "md", "json", "csv", "html"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "write to this file instead of standard output")
      ->check(non_empty_path());
  cmd->add_option("--history", o->history, "a history file: add the trend of its last runs")
      ->check(non_empty_path());
  cmd->add_option("--last", o->last, "runs of history to show")->capture_default_str()
      ->check(integer_in(1, 100000));
  return {cmd, [o] { return harness::report_command(*o); }};
}

}  // namespace parity::cli
