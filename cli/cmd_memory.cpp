// parity memory [run flags]: one training step under the counting allocator
// (harness/memory_command.h): what is alive after each layer and by what it is held, when the
// backward frees it, the peak; per rank and action in the in-process pipeline.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/memory_command.h"
#include "spec/limits.h"

namespace parity::cli {

Command add_memory_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "memory", "measure one training step's memory: what each layer leaves alive, by what it "
                "is held, when the backward frees it, the peak");
  auto o = std::make_shared<harness::MemoryOptions>();
  add_choice(*cmd, o->run.trainer, spec::trainers(),
             "the trainer (pipelined: in-process, every rank measured here)");
  add_run_options(*cmd, o->run);
  cmd->add_option("--layers", o->run.layers,
                  "the flavor with this many layers (a fresh initialisation; e.g. 8: two blocks "
                  "of 4)")
      ->check(integer_in(1, spec::kMaxLayers));
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  cmd->add_option("--snapshot", o->snapshot,
                  "write a PyTorch allocator snapshot (pickle) for pytorch.org/memory_viz")
      ->check(non_empty_path());
  cmd->add_option("--trace", o->trace, "write a Chrome trace (JSON) for Perfetto")
      ->check(non_empty_path());
  cmd->add_option("--html", o->html, "write the timeline as an HTML page")
      ->check(non_empty_path());
  cmd->add_option("--read-stack", o->read_stack,
                  "instead of a step: one AttnRes read of each form over a stack of N columns "
                  "(at --batch, --seq-len and --read-dim)")
      ->check(integer_in(1, spec::kMaxLayers));
  cmd->add_option("--read-dim", o->read_dim, "--read-stack: the hidden size (default: the flavor's)")
      ->check(integer_in(1, 65536));
  return {cmd, [o] { return harness::run_memory(*o); }};
}

}  // namespace parity::cli
