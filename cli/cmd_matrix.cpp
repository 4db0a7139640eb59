// parity matrix run FILE --out DIR: every cell of a matrix, then the drift tables and the
// verdict summary. parity report DIR: the same result rendered again, in any format
// (matrix/reports.h). Exit codes: 0 every cell ran and every gate passed, 1
// otherwise, 2 bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "matrix/plan.h"
#include "matrix/reports.h"

namespace parity::cli {

namespace {

void add_run_matrix_options(CLI::App& cmd, matrix::MatrixRunOptions& o) {
  cmd.add_option("--jobs", o.jobs, "cores to keep busy (default: all)")->check(threads());
  cmd.add_option("--cell-timeout-s", o.cell_timeout_s, "stop a cell that runs longer (0: never)")
      ->capture_default_str()->check(real_in(0, spec::kMaxTimeoutS, /*lo_open=*/false));
  cmd.add_flag("--quiet", o.quiet, "no progress lines");
}

void add_side_report_options(CLI::App& cmd, std::string& junit, std::string& markdown) {
  cmd.add_option("--junit", junit, "write JUnit XML: one testcase per cell")
      ->check(non_empty_path());
  cmd.add_option("--markdown", markdown, "write the Markdown report (for a PR comment)")
      ->check(non_empty_path());
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("matrix", "run a matrix of cells against their references");
  cmd->require_subcommand(1);
  auto* run = cmd->add_subcommand("run", "run every cell, compare step 1, print the report");
  auto o = std::make_shared<matrix::MatrixJob>();
  o->run.jobs = 0;
  run->add_option("file", o->file, "matrix file (TOML), or a shipped one: quick, seed")->required()
      ->check(non_empty_path());
  run->add_option("--out", o->run.out_dir, "directory for the cells' runs and the reports")
      ->required()->check(non_empty_path());
  add_run_matrix_options(*run, o->run);
  run->add_option("--only", o->run.only, "run only these cells (and their references)")
      ->delimiter(',');
  run->add_option("--steps", o->run.steps, "override every cell's step count")
      ->check(integer_in(1, spec::kMaxSteps));
  add_choice(*run, o->run.device, spec::devices(), "run every cell on this device");
  run->add_option("--tokens", o->run.tokens, "every cell reads this token file (train --tokens)")
      ->check(non_empty_path());
  run->add_option("--inject", o->inject, "CELL=KIND:block=B,stage=S: a routing fault in a cell");
  run->add_option("--history", o->history, "append the result to this JSONL history and show "
                                           "the trend")
      ->check(non_empty_path());
  run->add_option("--last", o->last, "runs of history to show")->capture_default_str()
      ->check(integer_in(1, 100000));
  add_side_report_options(*run, o->junit, o->markdown);

  auto* plan = cmd->add_subcommand(
      "plan", "check a matrix, write its seed checkpoints and one command line per cell for any "
              "scheduler (then: matrix judge)");
  auto p = std::make_shared<matrix::PlanJob>();
  plan->add_option("file", p->file, "matrix file (TOML), or a shipped one: quick, seed")
      ->required()->check(non_empty_path());
  plan->add_option("--out", p->run.out_dir, "directory for the plan and the cells' runs")
      ->required()->check(non_empty_path());
  plan->add_option("--only", p->run.only, "plan only these cells (and their references)")
      ->delimiter(',');
  plan->add_option("--steps", p->run.steps, "override every cell's step count")
      ->check(integer_in(1, spec::kMaxSteps));
  add_choice(*plan, p->run.device, spec::devices(), "run every cell on this device");
  plan->add_option("--tokens", p->run.tokens, "every cell reads this token file (train --tokens)")
      ->check(non_empty_path());
  plan->add_option("--inject", p->inject, "CELL=KIND:block=B,stage=S: a routing fault in a cell");

  auto* judge = cmd->add_subcommand(
      "judge", "judge and report the cells of a plan that finished, as matrix run does");
  auto j = std::make_shared<matrix::JudgeJob>();
  judge->add_option("dir", j->dir, "the --out directory of `parity matrix plan`")->required()
      ->check(non_empty_path());
  judge->add_option("--matrix", j->matrix, "refuse a plan of any other matrix than this one")
      ->check(non_empty_path());
  add_side_report_options(*judge, j->junit, j->markdown);
  judge->add_flag("--quiet", j->quiet, "no note on cells that have not run");

  return {cmd, [o, run, plan, p, j] {
            if (plan->parsed()) return matrix::matrix_plan_command(*p);
            if (run->parsed()) return matrix::matrix_run_command(*o);
            return matrix::matrix_judge_command(*j);
          }};
}

Command add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "render a matrix run's result");
  auto o = std::make_shared<matrix::ReportJob>();
  cmd->add_option("dir", o->dir, "the --out directory of `parity matrix run`")->required()
      ->check(non_empty_path());
  add_choice(*cmd, o->format, spec::report_formats(), "the format");
  cmd->add_option("--out", o->out, "write to this file instead of standard output")
      ->check(non_empty_path());
  cmd->add_option("--history", o->history, "a history file: add the trend of its last runs")
      ->check(non_empty_path());
  cmd->add_option("--last", o->last, "runs of history to show")->capture_default_str()
      ->check(integer_in(1, 100000));
  return {cmd, [o] { return matrix::report_command(*o); }};
}

}  // namespace parity::cli
