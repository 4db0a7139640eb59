// parity drift REF CELL...: the seed's drift table from training logs (harness/drift.h).
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/drift.h"
#include "spec/limits.h"

namespace parity::cli {

Command add_drift_command(CLI::App& app) {
  auto o = std::make_shared<harness::DriftJob>();
  auto* cmd = app.add_subcommand(
      "drift",
      "the seed's drift table from training logs: torchtitan or Megatron-LM console logs, "
      "loss_compare loss files, Megatron-Core golden values or parity metrics");
  cmd->add_option("reference", o->reference, "the reference run's log")->required()
      ->check(non_empty_path());
  cmd->add_option("cells", o->cells, "the logs of the runs compared against it")->required()
      ->check(non_empty_path());
  cmd->add_option("--steps", o->steps, "report steps, e.g. 1,10,50,100 (default: those of them "
                                       "the reference logs, and its last)")
      ->delimiter(',')->check(integer_in(1, spec::kMaxSteps));
  cmd->add_option("--labels", o->labels, "row names, one per log, the reference's first (a "
                                         "label may hold commas and footnote marks)");
  cmd->add_option("--footnote", o->footnotes, "a footnote, printed as [1], [2], ... in order "
                                              "(repeat the option)");
  add_choice(*cmd, o->format, spec::report_formats(), "the format");
  cmd->add_option("--out", o->out, "write to this file instead of standard output")
      ->check(non_empty_path());
  cmd->add_option("--junit", o->junit, "write JUnit XML: one testcase per cell")
      ->check(non_empty_path());
  return {cmd, [o] { return harness::drift_command(*o); }};
}

}  // namespace parity::cli
