// parity train --trainer reference|pipelined ...: a training run with per-step metrics.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "harness/train.h"

namespace parity::cli {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model and report every step");
  auto o = std::make_shared<harness::TrainJob>();
  add_choice(*cmd, o->run.trainer, spec::trainers(), "the trainer");
  add_run_options(*cmd, o->run);
  cmd->add_option("--metrics", o->metrics, "write per-step metrics as JSONL to this file")
      ->check(non_empty_path());
  cmd->add_option("--summary", o->summary, "write the run's step times and transport bytes "
                                          "as JSON to this file")
      ->check(non_empty_path());
  cmd->add_flag("--quiet", o->quiet, "no per-step console lines");
  cmd->add_option("--dump", o->dump_dir, "write an HDF5 dump (rank<R>.h5) to this directory")
      ->check(non_empty_path());
  cmd->add_flag("--overwrite", o->overwrite,
                "replace the rank*.h5 files of an earlier run in the --dump directory");
  cmd->add_option("--dump-steps", o->dump_steps, "steps whose gradients and parameters are "
                                                  "dumped, e.g. 1,2,10")
      ->delimiter(',')->capture_default_str()->check(integer_in(1, spec::kMaxSteps));
  return {cmd, [o] {
            harness::run_train(*o);
            return 0;
          }};
}

}  // namespace parity::cli
