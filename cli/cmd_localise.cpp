// parity localise A B: a verdict for every tensor of two --ledger runs, EXACT / ORDER-ONLY /
// WRONG, the predicted set, each run's routing self-check and the first divergence
// (compare/localise.h). Exit 0 when nothing is WRONG, 1 otherwise, 2 on bad input.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "compare/localise.h"
#include "compare/localise_report.h"

namespace parity::cli {

namespace {

struct LocaliseOptions {
  std::string a, b;
  bool json = false;
  bool all_rows = false;
  int threads = 2;
};

}  // namespace

Command add_localise_command(CLI::App& app) {
  auto o = std::make_shared<LocaliseOptions>();
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
  return {cmd, [o] {
            const auto r = compare::localise(o->a, o->b, o->threads);
            if (o->json)
              std::cout << compare::to_json(r).dump(2) << "\n";
            else
              compare::print_text(r, o->all_rows);
            return r.ok() ? 0 : 1;
          }};
}

}  // namespace parity::cli
