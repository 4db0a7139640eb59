// The options every training run shares (`train`, `bench`), on a CLI11 command.
#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/limits.h"

namespace parity::cli {

void add_run_options(CLI::App& cmd, harness::RunOptions& o) {
  cmd.add_option("--flavor", o.flavor, "model flavor: debugmodel, tiny")->capture_default_str();
  cmd.add_option("--dtype", o.dtype, "precision mode: fp32, bf16 (torchtitan's: bf16 parameters, gradients and "
                 "optimizer states), bf16-master (fp32 masters, bf16 compute copies), fp64")->capture_default_str();
  cmd.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()
      ->check(integer_in(1, harness::kMaxSteps));
  cmd.add_option("--dp", o.dp,
                 "data-parallel replicas, run in-process one after the other on their own rows; "
                 "gradients summed in rank order after the last micro-batch")
      ->check(integer_in(1, harness::kMaxRanks))
      ->capture_default_str();
  cmd.add_option("--microbatches", o.microbatches, "micro-batches per step (M)")
      ->capture_default_str()->check(integer_in(1, harness::kMaxMicrobatches));
  cmd.add_option("--batch", o.rows, "rows per micro-batch (B)")->capture_default_str()
      ->check(integer_in(1, harness::kMaxRows));
  cmd.add_option("--seq-len", o.seq_len, "tokens per row (T)")->capture_default_str()
      ->check(integer_in(1, harness::kMaxSeqLen));
  cmd.add_option("--seed", o.seed, "initialisation seed (ignored with --init)")
      ->capture_default_str()->check(unsigned_integer());
  cmd.add_option("--threads", o.threads, "intra-op threads (pinned; recorded)")
      ->capture_default_str()->check(threads());
  cmd.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
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
  cmd.add_option("--tokens-dtype", o.tokens_dtype,
                 "a raw --tokens file's element type (nanoGPT/Megatron .bin): uint16, int32 or "
                 "int64, little-endian");
  cmd.add_option("--clip-order", o.clip_order, "total-norm order: single or per-rank")
      ->capture_default_str();
  cmd.add_option("--pp", o.pp, "pipeline ranks")->capture_default_str()
      ->check(integer_in(1, harness::kMaxRanks));
  cmd.add_option("--vp", o.vp, "virtual stages per rank")->capture_default_str()
      ->check(integer_in(1, harness::kMaxVirtualStages));
  cmd.add_option("--schedule", o.schedule,
                 "1f1b or interleaved1f1b (default: 1f1b for vp 1, else interleaved1f1b)");
  cmd.add_option("--cache", o.cache, "block-stack transport: on (rank store, deltas) or off "
                                     "(whole stack every hop)")
      ->capture_default_str();
  cmd.add_option("--split", o.split, "explicit split, e.g. 'emb,0|1-2|3-4|...|16|head'")
      ->check(non_empty_path());
  cmd.add_option("--grad-accum", o.grad_accum,
                 "micro-batch gradient accumulation: auto (bf16 in bf16 mode), bf16, fp32")
      ->capture_default_str();
  cmd.add_option("--attn-res", o.attn_res, "AttnRes read: fused (per-token loops; CPU), recompute or plain")
      ->capture_default_str();
  cmd.add_option("--kda", o.kda, "KDA form: fused, chunked or recurrent")->capture_default_str();
  cmd.add_option("--lr", o.lr, "peak learning rate")->capture_default_str()
      ->check(real_in(0, harness::kMaxLr, /*lo_open=*/true));
  cmd.add_option("--warmup", o.warmup, "linear warmup steps")->capture_default_str()
      ->check(integer_in(0, harness::kMaxSteps));
  cmd.add_option("--lr-schedule", o.lr_schedule,
                 "wsd (torchtitan's: warmup, stable, linear decay to 0 over the last 80% of the "
                 "steps) or constant (warmup, then the peak)")
      ->capture_default_str();
  cmd.add_flag("--no-expert-balance", o.no_expert_balance,
               "keep the MoE expert bias at zero (no quantile balancing)");
  cmd.add_option("--pseudo-query-init", o.pseudo_query_init,
                 "AttnRes pseudo-queries: trunc-normal (std 0.02, the PR era) or zero")
      ->capture_default_str();
  cmd.add_option("--loss-chunks", o.loss_chunks,
                 "the head's loss in N chunks along each sequence (torchtitan's "
                 "ChunkedLossWrapper); 1: the plain loss")
      ->capture_default_str()->check(integer_in(1, harness::kMaxSeqLen));
  cmd.add_option("--max-norm", o.max_norm, "clipping threshold on the total norm")
      ->capture_default_str()->check(real_in(0, 1e6, /*lo_open=*/true));
  cmd.add_flag("--reverse-microbatches", o.reverse_microbatches,
               "feed each step's micro-batches in reverse order");
  cmd.add_flag("--freeze-embedding", o.freeze_embedding,
               "no gradient and no update for the embedding");
  cmd.add_flag("--ledger", o.ledger,
               "record each stack read's gradient contribution, block gradients, hop hashes, "
               "deposits and collections; stored in the dump's steps (for `parity localise`)");
  cmd.add_option("--nproc", o.nproc,
                 "pipelined: run as N local processes (one per rank, N = dp x pp) over c10d")
      ->check(integer_in(0, harness::kMaxRanks));
  cmd.add_option("--backend", o.backend,
                 "multi-process backend (gloo); with RANK, WORLD_SIZE, MASTER_ADDR and "
                 "MASTER_PORT set, this process runs that one rank");
  cmd.add_option("--timeout-s", o.timeout_s, "multi-process: the longest any wait may take")
      ->check(real_in(0, harness::kMaxTimeoutS, /*lo_open=*/true))
      ->capture_default_str();
  cmd.add_flag("--verbose", o.verbose,
               "multi-process: show what the c10d and Gloo libraries logged when a rendezvous "
               "fails");
  cmd.add_option("--inject", o.inject,
                 "inject a routing bug (pipelined, cache on): KIND:block=B,stage=S[,mb=M], "
                 "KIND drop-deposit|duplicate-deposit|misroute|skip-collect|stale-block; "
                 "the deposit count check is then off");
}

}  // namespace parity::cli
