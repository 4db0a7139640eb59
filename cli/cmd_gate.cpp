// parity gate [--matrix FILE]: the step-1 checks, for CI and `git bisect run` (matrix/gate.h).
// Exit codes: 0 pass, 1 a check failed, 125 the gate cannot run, 130 stopped.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "matrix/gate.h"

namespace parity::cli {

Command add_gate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gate", "step-1 checks: contracts 1 and 2 and the closed forms (exit 0 pass, 1 fail, "
              "125 cannot run)");
  auto o = std::make_shared<matrix::GateOptions>();
  cmd->add_option("--matrix", o->matrix, "matrix file, or a shipped one (quick, seed)")
      ->capture_default_str()->check(non_empty_path());
  cmd->add_option("--out", o->out, "keep the runs in this directory (default: a temporary "
                                   "one, removed when the gate passes)")
      ->check(non_empty_path());
  cmd->add_option("--jobs", o->run.jobs, "cores to keep busy (default: all)")
      ->check(threads());
  add_choice(*cmd, o->run.device, spec::devices(),
             "run the cells and the closed forms on this device");
  cmd->add_option("--tokens", o->run.tokens, "every cell reads this token file (train --tokens)")
      ->check(non_empty_path());
  cmd->add_flag("--keep", o->keep, "keep the temporary directory even when the gate passes");
  cmd->add_flag("!--no-closed-forms", o->closed_forms, "skip the closed-form checks");
  cmd->add_flag("--quiet", o->run.quiet, "no progress lines");
  cmd->add_option("--junit", o->junit, "write JUnit XML: one testcase per gate and closed form")
      ->check(non_empty_path());
  cmd->add_option("--markdown", o->markdown, "write a Markdown summary (for a PR comment)")
      ->check(non_empty_path());
  return {cmd, [o] { return matrix::run_gate(*o); }};
}

}  // namespace parity::cli
