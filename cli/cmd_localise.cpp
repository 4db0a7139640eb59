// parity localise A B: a verdict for every tensor of two --ledger runs, EXACT / ORDER-ONLY /
// WRONG, the predicted set, each run's routing self-check and the first divergence
// (compare/localise.h). Exit 0 when nothing is WRONG, 1 otherwise, 2 on bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/localise_command.h"
#include "spec/limits.h"

namespace parity::cli {

Command add_localise_command(CLI::App& app) {
  auto o = std::make_shared<harness::LocaliseJob>();
  auto* cmd = app.add_subcommand(
      "localise",
      "Verdicts for two --ledger dumps: EXACT, ORDER-ONLY or WRONG per tensor, with the "
      "predicted set, each run's routing self-check and the first divergence");
  cmd->add_option("a", o->a, "dump directory or file (made with --ledger)")->required()
      ->check(non_empty_path());
  cmd->add_option("b", o->b, "dump directory or file (made with --ledger)")->required()
      ->check(non_empty_path());
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_flag("--all", o->all_rows, "list the EXACT tensors too");
  cmd->add_option("--threads", o->threads, "comparison threads")->capture_default_str()
      ->check(threads());
  return {cmd, [o] { return harness::localise_command(*o); }};
}

}  // namespace parity::cli
