// parity truth RUN...: each run's step-1 gradients judged against the float64 truth of the same
// step, computed here from the checkpoint and the batch (harness/truth_command.h).
//
// Exit codes: 0 every tensor (and every loss given) of every run is CONSISTENT, 1 a tensor is
// WRONG (a named defect explains it) or SUSPECT (beyond the floor, unexplained), 2 bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/truth_command.h"
#include "harness/validate.h"
#include "spec/limits.h"

namespace parity::cli {

Command add_truth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "truth", "judge runs' step-1 gradients against the fp64 truth of the same step: "
               "CONSISTENT, WRONG (the defect named) or SUSPECT");
  auto o = std::make_shared<harness::TruthOptions>();
  auto& r = o->run;
  cmd->add_option("runs", o->runs,
                  "step-1 gradients: a parity dump, a torch.save / safetensors / HDF5 file, or a "
                  "directory of them")
      ->required()->check(non_empty_path());
  add_choice(*cmd, r.flavor, spec::flavors(), "model flavor");
  cmd->add_option("--init", r.init_path,
                  "the checkpoint the runs started from (`parity init`, a torch.save or "
                  "safetensors state dict, or a DCP directory; default: a fresh draw from "
                  "--seed)")
      ->check(non_empty_path());
  cmd->add_option("--seed", r.seed, "initialisation seed (ignored with --init)")
      ->capture_default_str()->check(unsigned_integer());
  cmd->add_option("--tokens", r.tokens_path,
                  "the batch's token ids (.npy, a parity-tokenize file, or raw with "
                  "--tokens-dtype)")
      ->check(non_empty_path());
  add_choice(*cmd, r.tokens_dtype, spec::token_dtypes(), "a raw --tokens file's element type");
  cmd->add_option("--positions", r.positions_path, "per-token positions beside --tokens (.npy)")
      ->check(non_empty_path());
  cmd->add_option("--data", r.data_path, "JSONL corpus (default: the Debian fortunes text)")
      ->check(non_empty_path());
  cmd->add_option("--microbatches", r.microbatches, "micro-batches in the step, over all replicas")
      ->capture_default_str()->check(integer_in(1, spec::kMaxMicrobatches));
  cmd->add_option("--batch", r.rows, "rows per micro-batch (B)")->capture_default_str()
      ->check(integer_in(1, spec::kMaxRows));
  cmd->add_option("--seq-len", r.seq_len, "tokens per row (T)")->capture_default_str()
      ->check(integer_in(1, spec::kMaxSeqLen));
  add_choice(*cmd, r.documents, spec::document_modes(), "documents inside a row (train --documents)");
  cmd->add_option("--bos-id", r.bos_id, "the id that opens a document (-1: none)")
      ->capture_default_str()->check(integer_in(-1, spec::kMaxTokenId));
  cmd->add_option("--eos-id", r.eos_id, "the id that closes a document (-1: none)")
      ->capture_default_str()->check(integer_in(-1, spec::kMaxTokenId));
  cmd->add_option("--loss-chunks", r.loss_chunks, "the head's loss in N chunks (train --loss-chunks)")
      ->capture_default_str()->check(integer_in(1, spec::kMaxSeqLen));
  cmd->add_flag_callback("--no-expert-balance", [o] { o->run.expert_balance = false; },
                         "the runs kept the MoE expert bias at zero");
  add_choice(*cmd, r.pseudo_query_init, spec::pseudo_query_inits(),
             "AttnRes pseudo-queries of a fresh draw");
  cmd->add_option("--threads", r.threads, "intra-op threads")->capture_default_str()
      ->check(threads());
  cmd->add_option_function<std::string>(
      "--dtype", [o](const std::string& v) { o->dtype = spec::precisions().parse(v, "--dtype"); },
      "the runs' precision, whose floor is measured (default: what each file says: a parity "
      "dump's dtype, else the gradients' stored dtype): " + spec::precisions().names());
  cmd->add_option("--layout", o->layouts,
                  "how a run was pipelined: pp=P,vp=V[,cache=on|off][,schedule=K][,split=SPEC]; "
                  "once for every run, or once per run ('' for none)");
  cmd->add_option("--log", o->logs, "a run's training log, whose step-1 loss is judged too; "
                                    "once per run ('' for none)");
  cmd->add_option("--map", o->map, "a name map: lines 'FROM TO' (a trailing * maps a prefix)")
      ->check(non_empty_path());
  cmd->add_option("--margin", o->margin, "a tensor is within the floor at distance <= margin x "
                                         "floor")
      ->capture_default_str()->check(real_in(1, 1e6, false));
  cmd->add_option("--max-terms", o->max_terms, "deposit contributions computed at most, per run")
      ->capture_default_str()->check(integer_in(0, 100000));
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--junit", o->junit, "write JUnit XML: one testcase per run")
      ->check(non_empty_path());
  cmd->add_option("--markdown", o->markdown, "write a Markdown summary (for a PR comment)")
      ->check(non_empty_path());
  cmd->add_flag("--quiet", o->quiet, "no progress lines");
  return {cmd, [o] { return harness::truth_command(*o); }};
}

}  // namespace parity::cli
