// parity compare A B: every tensor of two dumps, side by side (compare/compare_report.h).
//
// Exit codes: 0 every tensor bitwise equal (or within --max-ulp), 1 a difference (or a
// vacuous agreement: all-zero gradients, a flat loss, both runs dead), 2 bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/limits.h"
#include "compare/compare_report.h"

namespace parity::cli {

Command add_compare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "compare two dumps tensor by tensor");
  auto o = std::make_shared<compare::CompareOptions>();
  cmd->add_option("a", o->a, "dump directory or file")->required()->check(non_empty_path());
  cmd->add_option("b", o->b, "dump directory or file")->required()->check(non_empty_path());
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--max-ulp", o->max_ulp, "pass when every difference is within K ulps")
      ->capture_default_str()->check(unsigned_integer());
  cmd->add_flag("--all", o->all_rows, "list the bitwise-equal tensors too");
  cmd->add_option("--truth", o->truth, "an fp64 dump of the same cell: report each run's error "
                                       "against it in its own ulps")
      ->check(non_empty_path());
  cmd->add_option("--threads", o->threads, "comparison threads")->capture_default_str()
      ->check(threads());
  return {cmd, [o] { return compare::compare_command(*o); }};
}

}  // namespace parity::cli
