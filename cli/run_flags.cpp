// The options every training run shares (`train`, `bench`), on a CLI11 command.
#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"

namespace parity::cli {

void add_run_options(CLI::App& cmd, harness::RunOptions& o) {
  add_choice(cmd, o.flavor, spec::flavors(), "model flavor");
  add_choice(cmd, o.dtype, spec::precisions(),
             "precision mode (bf16 is torchtitan's: bf16 parameters, gradients and optimizer "
             "states; bf16-master keeps fp32 masters and makes bf16 compute copies)");
  cmd.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()
      ->check(integer_in(1, spec::kMaxSteps));
  cmd.add_option("--dp", o.dp,
                 "data-parallel replicas, run in-process one after the other on their own rows; "
                 "gradients summed in rank order after the last micro-batch")
      ->check(integer_in(1, spec::kMaxRanks))
      ->capture_default_str();
  cmd.add_option("--microbatches", o.microbatches, "micro-batches per step (M)")
      ->capture_default_str()->check(integer_in(1, spec::kMaxMicrobatches));
  cmd.add_option("--batch", o.rows, "rows per micro-batch (B)")->capture_default_str()
      ->check(integer_in(1, spec::kMaxRows));
  cmd.add_option("--seq-len", o.seq_len, "tokens per row (T)")->capture_default_str()
      ->check(integer_in(1, spec::kMaxSeqLen));
  cmd.add_option("--seed", o.seed, "initialisation seed (ignored with --init)")
      ->capture_default_str()->check(unsigned_integer());
  cmd.add_option(
      "--threads", o.threads,
      "intra-op threads (pinned; recorded); the reference runs that many micro-batches at once")
      ->capture_default_str()->check(threads());
  add_choice(cmd, o.device, spec::devices(), "where the run computes");
  cmd.add_option("--init", o.init_path, "seed checkpoint written by `parity init`")
      ->check(non_empty_path());
  cmd.add_option("--data", o.data_path, "JSONL corpus, one {\"text\": ...} per line "
                                        "(default: the Debian fortunes text)")
      ->check(non_empty_path());
  cmd.add_option("--tokens", o.tokens_path,
                 "token ids read as they are: a token file written by parity-tokenize (for a "
                 "machine without SentencePiece; scripts/gpu-pack makes one), a NumPy .npy "
                 "array, or a raw array with --tokens-dtype")
      ->check(non_empty_path());
  add_choice(cmd, o.tokens_dtype, spec::token_dtypes(),
             "a raw --tokens file's element type (nanoGPT/Megatron .bin), little-endian");
  cmd.add_option("--positions", o.positions_path,
                 "per-token positions beside --tokens, a .npy array as torchtitan's dataloader "
                 "emits them (one per token; a document starts where the position is 0); needs "
                 "--documents on")
      ->check(non_empty_path());
  add_choice(cmd, o.clip_order, spec::clip_orders(), "total-norm order");
  add_choice(cmd, o.documents, spec::document_modes(),
             "documents inside a row: on, the mixers see each document alone (a document starts "
             "after EOS and at BOS, or where --positions are 0: torchtitan's masking); off, "
             "causal over the whole row");
  cmd.add_option("--bos-id", o.bos_id, "the id that opens a document (-1: none)")
      ->capture_default_str()->check(integer_in(-1, spec::kMaxTokenId));
  cmd.add_option("--eos-id", o.eos_id, "the id that closes a document (-1: none)")
      ->capture_default_str()->check(integer_in(-1, spec::kMaxTokenId));
  add_choice(cmd, o.grad_norm_dtype, spec::grad_norm_dtypes(),
             "dtype of the total norm of bf16 gradients: fp32 (the seed's tables) or bf16 (stock "
             "torchtitan)");
  cmd.add_option("--pp", o.pp, "pipeline ranks")->capture_default_str()
      ->check(integer_in(1, spec::kMaxRanks));
  cmd.add_option("--vp", o.vp, "virtual stages per rank")->capture_default_str()
      ->check(integer_in(1, spec::kMaxVirtualStages));
  add_choice(cmd, o.schedule, spec::schedules(),
             "pipeline schedule (default: 1f1b for vp 1, else interleaved1f1b)");
  add_choice(cmd, o.cache, spec::caches(),
             "block-stack transport: on (rank store, deltas) or off (whole stack every hop)");
  cmd.add_option("--split", o.split, "explicit split, e.g. 'emb,0|1-2|3-4|...|16|head'")
      ->check(non_empty_path());
  add_choice(cmd, o.grad_accum, spec::grad_accums(),
             "micro-batch gradient accumulation (auto: bf16 in the bf16 modes)");
  add_choice(cmd, o.attn_res, spec::attn_res_forms(), "AttnRes read (fused: per-token loops, CPU)");
  add_choice(cmd, o.kda, spec::kda_forms(), "KDA form");
  add_choice(cmd, o.ac, spec::checkpointing_modes(),
             "activation checkpointing (layer: each layer keeps its inputs and is recomputed in "
             "the backward, bitwise the same step)");
  cmd.add_option("--lr", o.lr, "peak learning rate")->capture_default_str()
      ->check(real_in(0, spec::kMaxLr, /*lo_open=*/true));
  cmd.add_option("--warmup", o.warmup, "linear warmup steps")->capture_default_str()
      ->check(integer_in(0, spec::kMaxSteps));
  add_choice(cmd, o.lr_schedule, spec::lr_schedules(),
             "learning-rate schedule (wsd is torchtitan's: warmup, stable, linear decay to 0 over "
             "the last 80% of the steps; constant: warmup, then the peak)");
  cmd.add_flag_callback("--no-expert-balance", [&o] { o.expert_balance = false; },
                        "keep the MoE expert bias at zero (no quantile balancing)");
  add_choice(cmd, o.pseudo_query_init, spec::pseudo_query_inits(),
             "AttnRes pseudo-queries (trunc-normal: std 0.02, the PR era)");
  cmd.add_option("--loss-chunks", o.loss_chunks,
                 "the head's loss in N chunks along each sequence (torchtitan's "
                 "ChunkedLossWrapper); 1: the plain loss")
      ->capture_default_str()->check(integer_in(1, spec::kMaxSeqLen));
  cmd.add_option("--max-norm", o.max_norm, "clipping threshold on the total norm")
      ->capture_default_str()->check(real_in(0, spec::kMaxMaxNorm, /*lo_open=*/true));
  cmd.add_flag("--reverse-microbatches", o.reverse_microbatches,
               "feed each step's micro-batches in reverse order");
  cmd.add_flag("--freeze-embedding", o.freeze_embedding,
               "no gradient and no update for the embedding");
  cmd.add_flag("--ledger", o.ledger,
               "record each stack read's gradient contribution, block gradients, hop hashes, "
               "deposits and collections; stored in the dump's steps (for `parity localise`)");
  cmd.add_option("--nproc", o.nproc,
                 "pipelined: run as N local processes (one per rank, N = dp x pp) over c10d")
      ->check(integer_in(0, spec::kMaxRanks));
  add_choice(cmd, o.backend, spec::backends(),
             "multi-process backend (default gloo); with RANK, WORLD_SIZE, MASTER_ADDR and "
             "MASTER_PORT set, this process runs that one rank");
  cmd.add_option("--timeout-s", o.timeout_s, "multi-process: the longest any wait may take")
      ->check(real_in(0, spec::kMaxTimeoutS, /*lo_open=*/true))
      ->capture_default_str();
  cmd.add_flag("--verbose", o.verbose,
               "multi-process: show what the c10d and Gloo libraries logged when a rendezvous "
               "fails");
  cmd.add_option("--inject", o.inject,
                 "inject a routing bug (pipelined, cache on): KIND:block=B,stage=S[,mb=M], "
                 "KIND drop-deposit|duplicate-deposit|misroute|skip-collect|stale-block; "
                 "the deposit count check is then off. Or a gradient bug (reference): "
                 "drop-microbatch:mb=M, scale-grads:factor=F, zero-grad:param=FQN, "
                 "swap-grads:a=FQN,b=FQN");
}

}  // namespace parity::cli
