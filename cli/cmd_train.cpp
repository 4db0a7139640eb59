// parity train --trainer reference ...: a training run with per-step metrics.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <set>
#include <vector>

#include "cli/commands.h"
#include "cli/metrics.h"
#include "cli/setup.h"
#include "cli/version.h"
#include "compare/dump.h"
#include "reference/trainer.h"

namespace parity::cli {

namespace {
struct TrainOptions {
  RunOptions run;
  std::string trainer = "reference";
  std::string metrics;
  std::string summary;
  std::string dump_dir;
  std::vector<int64_t> dump_steps{1};
  bool quiet = false;
};

int run_train(const TrainOptions& o) {
  ConsoleObserver console(o.quiet);
  std::unique_ptr<JsonlObserver> jsonl;
  ObserverList observers;
  observers.add(&console);
  if (!o.metrics.empty()) {
    jsonl = std::make_unique<JsonlObserver>(o.metrics);
    observers.add(jsonl.get());
  }
  std::unique_ptr<SummaryObserver> summary;
  if (!o.summary.empty()) {
    summary = std::make_unique<SummaryObserver>(o.summary);
    observers.add(summary.get());
  }
  std::unique_ptr<compare::DumpWriter> dump;
  RunOptions run = o.run;
  const std::set<int64_t> steps(o.dump_steps.begin(), o.dump_steps.end());
  // The ledger is only ever read from a dump: record it on the dumped steps alone.
  if (run.ledger && !o.dump_dir.empty()) run.ledger_steps = o.dump_steps;
  const bool multi = run.nproc > 0 || (std::getenv("RANK") && !run.backend.empty());
  if (!o.dump_dir.empty() && multi) {
    // Each rank writes rank<R>.h5 with the parameters it owns.
    const std::string dir = o.dump_dir;
    run.rank_observer = [dir, steps](int rank, std::set<std::string> fqns) {
      return std::unique_ptr<kernels::StepObserver>(
          new compare::DumpWriter(dir, steps, git_sha(), rank, std::move(fqns)));
    };
  } else if (!o.dump_dir.empty()) {
    dump = std::make_unique<compare::DumpWriter>(o.dump_dir, steps, git_sha());
    observers.add(dump.get());
  }
  RunReport report;
  if (summary)
    report = [&summary, &o](const pipelined::PipelineStats& st) {
      const bool pipe = o.trainer == "pipelined";
      summary->write(st.bytes_forward, st.bytes_backward, pipe ? &st.bytes_forward_per_mb : nullptr,
                     pipe ? &st.bytes_backward_per_mb : nullptr);
    };
  run_trainer(o.trainer, run, observers, report);
  return 0;
}
}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model and report every step");
  auto o = std::make_shared<TrainOptions>();
  cmd->add_option("--trainer", o->trainer, "reference or pipelined")->capture_default_str();
  add_run_options(*cmd, o->run);
  cmd->add_option("--metrics", o->metrics, "write per-step metrics as JSONL to this file");
  cmd->add_option("--summary", o->summary, "write the run's step times and transport bytes "
                                          "as JSON to this file");
  cmd->add_flag("--quiet", o->quiet, "no per-step console lines");
  cmd->add_option("--dump", o->dump_dir, "write an HDF5 dump (rank<R>.h5) to this directory");
  cmd->add_option("--dump-steps", o->dump_steps, "steps whose gradients and parameters are "
                                                  "dumped, e.g. 1,2,10")
      ->delimiter(',')->capture_default_str();
  return {cmd, [o] { return run_train(*o); }};
}

}  // namespace parity::cli
