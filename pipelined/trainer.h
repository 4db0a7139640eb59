// The pipelined trainer: the reference trainer's step (same kernels, compute copies,
// accumulation, loss reduction, norm, clipping, AdamW, observer) with the model split into
// pp x vp stages that exchange the hidden state and the block stack through a transport,
// scheduled by 1F1B or Interleaved1F1B and executed in-process.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/ledger.h"
#include "kernels/train_step.h"
#include "pipelined/comm.h"
#include "pipelined/rank_store.h"
#include "pipelined/routing.h"
#include "pipelined/schedule.h"
#include "pipelined/stage.h"
#include "pipelined/transport.h"

namespace parity::pipelined {

struct PipelineConfig {
  int pp = 1;
  int vp = 1;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  bool cache = true;
  std::string split;  // explicit split spec; empty = the default even split
  std::vector<Fault> faults;         // injected routing bugs (parity train --inject)
  bool check_deposit_counts = true;  // --inject turns it off so the run goes on
  // Multi-process: this process is rank comm->rank() = dp_rank * pp + pp_rank and runs only
  // that rank's actions over comm. Null: every rank in this process (in-process executor).
  Comm* comm = nullptr;
};

// The split a pipeline config describes (the default even split unless it spells one out).
Split make_split(const kernels::ModelConfig& m, const PipelineConfig& pc);
// The rank that owns each parameter (FQN order) under the loop map, stage s on rank s % pp:
// the per-rank clip order's grouping.
std::vector<int> param_ranks(const kernels::ModelConfig& m, const Split& split, int pp);

// What one step's pipeline did, for tests and benchmarks.
struct PipelineStats {
  std::vector<int> store_high_water;  // per rank: most micro-batches held at once
  std::vector<int64_t> store_high_water_bytes;  // per rank: most bytes held at once
  int64_t bytes_forward = 0, bytes_backward = 0;  // the whole step
  std::vector<int64_t> bytes_forward_per_mb, bytes_backward_per_mb;
};

class PipelinedTrainer {
 public:
  PipelinedTrainer(kernels::TrainConfig cfg, PipelineConfig pc, const kernels::NamedTensors& init,
                   const datasets::TokenRows& data);

  void run(kernels::StepObserver& observer);
  // A forward-only pass (eval) over step `step`'s micro-batches with the current parameters:
  // the micro-batch losses. Leaves every store empty.
  std::vector<at::Tensor> forward_only(int64_t step);

  const kernels::TrainConfig& config() const { return cfg_; }
  const PipelineConfig& pipeline() const { return pc_; }
  const RoutingTables& tables() const { return tables_; }
  const Schedule& schedule() const { return schedule_; }
  const kernels::NamedTensors& master() const { return master_; }
  const PipelineStats& last_stats() const { return stats_; }
  // Per injected fault (PipelineConfig::faults), how often it fired so far in this run.
  const std::vector<int64_t>& fault_hits() const { return fault_hits_; }
  kernels::RunInfo run_info() const;
  // The pipeline rank that owns each parameter (FQN order).
  std::vector<int> param_ranks() const;

  void step(int64_t s, kernels::StepObserver& observer);

 private:
  struct Batch {
    std::vector<at::Tensor> tokens, labels;
    std::vector<std::shared_ptr<const kernels::Documents>> docs;  // per micro-batch
    int64_t n_global = 0;
  };
  Batch batch(int64_t step, int replica) const;  // one dp replica's micro-batches
  StepContext context(const kernels::NamedTensors& weights, const Batch& b, bool training) const;
  // Runs the schedule's orders over fresh stages; fills losses (per micro-batch).
  // Multi-process: gives every rank every dp replica's gradients and losses.
  void share_replicas(std::vector<std::vector<at::Tensor>>& grads,
                      std::vector<std::vector<at::Tensor>>& losses);
  void share_losses(std::vector<std::vector<at::Tensor>>& losses);
  // Multi-process: every rank's buffers get the expert balancer's counts summed over replicas.
  void share_counts();
  void execute(StepContext& ctx, const std::vector<std::vector<Action>>& orders,
               kernels::GradAccumulator* acc, std::vector<at::Tensor>& losses);

  kernels::TrainConfig cfg_;
  PipelineConfig pc_;
  kernels::Model model_;
  const datasets::TokenRows& data_;
  Split split_;
  RoutingTables tables_;
  Schedule schedule_;
  kernels::NamedTensors master_;
  kernels::NamedTensors buffers_;
  kernels::Optimizer optimizer_;
  std::vector<std::vector<size_t>> stage_params_;  // parameter indices per stage
  PipelineStats stats_;
  std::vector<int64_t> fault_hits_;
  kernels::Ledger ledger_;  // ledger mode: this step's records
};

}  // namespace parity::pipelined
