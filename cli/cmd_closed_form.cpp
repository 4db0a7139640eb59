// parity closed-form: the exact flavor through a trainer, checked bitwise against its closed
// form (harness/closed_form.h). Exit 0 when every value is exact, 1 when any differs.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "harness/closed_form.h"

namespace parity::cli {

Command add_closed_form_command(CLI::App& app) {
  auto opts = std::make_shared<harness::ClosedFormJob>();
  opts->run.steps = 3;
  auto* cmd = app.add_subcommand(
      "closed-form",
      "Run the integer-valued `exact` flavor through a trainer and check every loss, gradient "
      "and parameter bitwise against its closed form (exit 0 pass, 1 fail)");
  auto& o = *opts;
  add_choice(*cmd, o.trainer, spec::trainers(),
             "the trainer (default: pipelined when a pipeline shape is given)");
  cmd->add_option("--pp", o.run.pp, "pipeline ranks")->check(integer_in(1, spec::kMaxRanks));
  cmd->add_option("--vp", o.run.vp, "stages per rank")
      ->check(integer_in(1, spec::kMaxVirtualStages));
  add_choice(*cmd, o.run.schedule, spec::schedules(), "pipeline schedule");
  cmd->add_option("--split", o.run.split, "explicit split, e.g. \"0-1|2-4|5|6-9|10|11-13|14|15,head\"")
      ->check(non_empty_path());
  add_choice(*cmd, o.run.cache, spec::caches(), "block-stack transport: on (cached), off (naive)");
  add_choice(*cmd, o.run.dtype, spec::precisions(), "precision mode");
  cmd->add_option("--steps", o.run.steps, "SGD steps")->capture_default_str()
      ->check(integer_in(1, spec::kMaxClosedFormSteps));
  cmd->add_flag("--wide", o.wide, "values beyond 2^24 (needs --dtype fp64)");
  cmd->add_option("--inject", o.run.inject, "inject a routing fault, KIND:block=B,stage=S[,mb=M]");
  add_choice(*cmd, o.run.device, spec::devices(), "where the run computes");
  cmd->add_option("--threads", o.run.threads, "intra-op threads")->capture_default_str()
      ->check(threads());
  return {cmd, [opts] { return harness::closed_form_command(*opts); }};
}

}  // namespace parity::cli
