// parity train --trainer reference ...: a training run with per-step metrics.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/metrics.h"
#include "cli/setup.h"
#include "reference/trainer.h"

namespace parity::cli {

namespace {
struct TrainOptions {
  RunOptions run;
  std::string trainer = "reference";
  std::string metrics;
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
  run_trainer(o.trainer, o.run, observers);
  return 0;
}
}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model and report every step");
  auto o = std::make_shared<TrainOptions>();
  cmd->add_option("--trainer", o->trainer, "reference or pipelined")->capture_default_str();
  add_run_options(*cmd, o->run);
  cmd->add_option("--metrics", o->metrics, "write per-step metrics as JSONL to this file");
  cmd->add_flag("--quiet", o->quiet, "no per-step console lines");
  return {cmd, [o] { return run_train(*o); }};
}

}  // namespace parity::cli
