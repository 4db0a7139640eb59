// What a training run is asked to do (RunOptions: the model, data, trainer and pipeline
// options that `parity train`, `bench` and the matrix cells share) and turning it into library
// objects: the configs, the token rows and the initial parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/model.h"
#include "kernels/params.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"

namespace parity::harness {

struct RunOptions {
  std::string flavor = "debugmodel";
  std::string dtype = "fp32";
  int64_t steps = 20;
  int microbatches = 4;
  int rows = 1;
  int64_t seq_len = 256;
  uint64_t seed = 42;
  int threads = 1;
  int dp = 1;
  // Pipeline shape: the pipelined trainer's layout; for the reference, where the per-rank
  // clip order takes its parameter->rank map from.
  int pp = 1;
  int vp = 1;
  std::string schedule;  // "" = 1f1b when vp == 1, else interleaved1f1b
  std::string cache = "on";
  std::string split;
  std::string device = "cpu";
  std::string init_path;
  std::string data_path;
  std::string tokens_path;  // a token file parity-tokenize wrote, or a .npy: no tokenizing here
  std::string tokens_dtype;  // a raw --tokens file's element type: uint16, int32, int64
  std::string clip_order = "single";
  std::string grad_accum = "auto";
  std::string attn_res = "fused";
  std::string kda = "fused";
  double lr = 8e-4;
  int warmup = 2;
  std::string lr_schedule = "wsd";  // torchtitan's warmup-stable-decay, or "constant"
  bool no_expert_balance = false;   // the expert bias stays at zero
  std::string pseudo_query_init = "trunc-normal";  // the PR era's draw, or "zero"
  int loss_chunks = 8;              // ChunkedLossWrapper's chunks; 1: the plain loss
  double max_norm = 1.0;
  bool reverse_microbatches = false;
  bool freeze_embedding = false;
  bool ledger = false;  // record the contribution ledger (dumped with --dump)
  std::vector<int64_t> ledger_steps;  // the steps it records; empty = every step
  std::vector<std::string> inject;  // fault specs, pipelined trainer only
  // Multi-process (pipelined): --nproc N local workers, or one rank of a run started
  // elsewhere (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment).
  int nproc = 0;
  std::string backend;  // "" = gloo when multi-process
  double timeout_s = 300;
  bool verbose = false;  // show the libraries' own log of a failed rendezvous
  // Multi-process: an observer each rank adds for itself (its own dump file of the parameters
  // it owns), given the rank, those FQNs and the run's id (rank 0's, the same on every rank);
  // null or returning null: none.
  std::function<std::unique_ptr<kernels::StepObserver>(int rank, std::set<std::string> fqns,
                                                       const std::string& run_id)>
      rank_observer;
};

// Each of these throws UsageError (harness/errors.h) naming the option and the remedy.
kernels::ModelOptions model_options(const RunOptions& o);

// The corpus (fortunes by default, or --data FILE.jsonl) tokenized and cut into rows of
// seq_len + 1 tokens, checked to hold one step's rows.
std::unique_ptr<datasets::TokenRows> load_rows(const RunOptions& o);

// The initialisation's options (--pseudo-query-init).
kernels::InitOptions init_options(const std::string& pseudo_query_init);

// Master parameters: from --init if given (validated against the flavor), else a fresh
// deterministic initialisation from --seed and --pseudo-query-init.
kernels::NamedTensors initial_params(const RunOptions& o, const kernels::ModelConfig& cfg);

kernels::TrainConfig train_config(const RunOptions& o);
pipelined::PipelineConfig pipeline_config(const RunOptions& o);

// A word for sh: single-quoted, a quote inside closed, escaped and reopened.
std::string shell_quote(const std::string& s);

}  // namespace parity::harness
