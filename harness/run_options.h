// What a training run is asked to do (RunOptions: the model, data, trainer and pipeline
// options that `parity train`, `bench` and the matrix cells share) and turning it into library
// objects: the configs, the token rows and the initial parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/model.h"
#include "kernels/params.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"
#include "spec/run_spec.h"

namespace parity::harness {

// A run: its RunSpec (spec/run_spec.h: everything that changes its numbers, shape or
// placement) plus how this process carries it out.
struct RunOptions : spec::RunSpec {
  bool ledger = false;  // record the contribution ledger (dumped with --dump)
  std::vector<int64_t> ledger_steps;  // the steps it records; empty = every step
  // Multi-process (pipelined): --nproc N local workers, or one rank of a run started
  // elsewhere (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment).
  int nproc = 0;
  std::optional<spec::Backend> backend;  // none: gloo when multi-process
  double timeout_s = 300;
  bool verbose = false;  // show the libraries' own log of a failed rendezvous
  // The flavor with this many layers (0: the flavor's own), blocks as the flavor groups them;
  // a fresh initialisation only (`parity memory --layers`).
  int layers = 0;
  // Multi-process: an observer each rank adds for itself (its own dump file of the parameters
  // it owns), given the rank, those FQNs and the run's id (rank 0's, the same on every rank);
  // null or returning null: none.
  std::function<std::unique_ptr<kernels::StepObserver>(int rank, std::set<std::string> fqns,
                                                       const std::string& run_id)>
      rank_observer;

  // The collectives backend of a multi-process run: the one named, else gloo.
  spec::Backend backend_or_default() const { return backend ? *backend : spec::Backend::Gloo; }
};

// Each of these throws UsageError (harness/errors.h) naming the option and the remedy.
kernels::ModelOptions model_options(const RunOptions& o);

// The corpus (fortunes by default, or --data FILE.jsonl) tokenized and cut into rows of
// seq_len + 1 tokens, checked to hold one step's rows.
std::unique_ptr<datasets::TokenRows> load_rows(const RunOptions& o);

// The initialisation's options (--pseudo-query-init).
kernels::InitOptions init_options(spec::PseudoQueryInit pseudo_query_init);

// Where a run starts: the parameters and persistent buffers (the expert biases) of --init if
// given (validated against the flavor), else a fresh deterministic initialisation from --seed
// and --pseudo-query-init with zero buffers.
struct InitialState {
  kernels::NamedTensors params;
  kernels::NamedTensors buffers;  // by FQN; absent ones start at zero
};
InitialState initial_state(const RunOptions& o, const kernels::ModelConfig& cfg);

kernels::TrainConfig train_config(const RunOptions& o);
pipelined::PipelineConfig pipeline_config(const RunOptions& o);

// A word for sh: single-quoted, a quote inside closed, escaped and reopened.
std::string shell_quote(const std::string& s);

}  // namespace parity::harness
