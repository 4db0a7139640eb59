// The single-device reference trainer: orchestration only, no math of its own
// (docs/design.md section 3). Every number it produces comes from the kernel set.
//
// One step:
//   * the compute copies of the master parameters are made once (bf16 mode: a bf16 copy;
//     fp32/fp64: the masters themselves, detached);
//   * dp replicas x M micro-batches x B rows x T tokens; micro-batch m's loss is
//     l_m = (sum of its token cross-entropies) / N_global, N_global the label tokens of the
//     whole step, and each l_m is back-propagated on its own, in micro-batch order;
//   * gradient accumulation: `bf16` accumulates in the compute dtype over the micro-batches
//     and converts to the master dtype once after the last; `fp32` adds each micro-batch's
//     gradients into a master-dtype buffer right after its backward (the same thing in fp32
//     and fp64 modes);
//   * dp: each replica accumulates its own micro-batches; the replicas' gradients are then
//     summed in rank order;
//   * the logged loss is stack(l_m).sum() (one reduction) per replica, summed over replicas
//     in rank order;
//   * the total norm (single or per-rank order), clipping, AdamW.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "datasets/rows.h"
#include "reference/grad_faults.h"
#include "kernels/ledger.h"
#include "kernels/model.h"
#include "kernels/observer.h"
#include "kernels/optim.h"
#include "kernels/params.h"
#include "kernels/precision.h"
#include "kernels/train_step.h"

namespace parity::reference {

using kernels::GradAccum;
using kernels::TrainConfig;
using kernels::effective_grad_accum;

// How many micro-batches a reference step of this shape runs at once (1: one after another):
// min(threads, micro-batches) on CPU, else 1. A step that records per micro-batch (the ledger,
// memory recording, faults, the op-family clock) runs them one after another whatever this says.
int side_by_side_lanes(const TrainConfig& cfg);

class ReferenceTrainer {
 public:
  // init: fp32 master parameters in FQN order (from init_params or a checkpoint).
  ReferenceTrainer(TrainConfig cfg, const kernels::NamedTensors& init,
                   const datasets::TokenRows& data);

  // Runs cfg.steps steps, reporting each to the observer.
  void run(kernels::StepObserver& observer);

  // One step (1-based), reported to the observer.
  void step(int64_t s, kernels::StepObserver& observer);
  // A forward-only pass (eval) over step `s`'s micro-batches with the current parameters:
  // the micro-batch losses, replicas in rank order.
  std::vector<at::Tensor> forward_only(int64_t s);

  const TrainConfig& config() const { return cfg_; }
  // Gradient defects made on purpose (reference/grad_faults.h); FQNs and micro-batches checked
  // by the caller.
  void set_grad_faults(GradFaults f) { faults_ = std::move(f); }
  const kernels::NamedTensors& master() const { return master_; }
  kernels::RunInfo run_info() const;

 private:
  // Micro-batch m of replica r at step s: tokens and labels [B, T] on the run's device, and
  // where its documents start (null: each row one sequence).
  struct MicroBatch {
    at::Tensor tokens, labels;
    std::shared_ptr<const kernels::Documents> docs;
  };
  MicroBatch microbatch(int64_t s, int r, int m) const;
  // The faults that act on the accumulated gradients (scale, zero, swap), before the norm.
  void apply_grad_faults(std::vector<at::Tensor>& grads) const;

  // Micro-batches side by side (docs/design.md section 3.6). With several intra-op threads,
  // on CPU, and nothing that records per micro-batch (the contribution ledger, the memory
  // ledger, gradient faults), up to `threads` micro-batches run at once, each forward and
  // backward on one thread, against handles of their own on the compute copies' storage and
  // token counters of their own. Each gradient the engine delivers to a side's handle is kept,
  // in delivery order (a micro-batch's head delivers one per chunk); in micro-batch order they
  // then reach the compute copies as one backward after another would have delivered them
  // (the first taken, each later one added in place), and the losses the list. The counters
  // (integers) are added to the trainer's after the last micro-batch.
  using Deliveries = std::vector<std::shared_ptr<std::vector<at::Tensor>>>;  // per parameter
  struct Lanes {
    std::vector<kernels::NamedTensors> weights, buffers;  // per lane
    std::vector<Deliveries> delivered;                     // per lane
    std::vector<bool> counter;  // per buffer: a per-step count (summed), not a state (shared)
  };
  // How many micro-batches step s runs at once (1: one after another).
  int lanes_for(int64_t s) const;
  Lanes make_lanes(int n, const std::vector<at::Tensor>& compute);
  // Micro-batches m0 .. m0+n-1 of replica r at once, then handed on in order.
  void run_side_by_side(Lanes& lanes, int64_t s, int r, int m0, int n, int64_t n_global,
                        std::vector<at::Tensor>& compute, const std::vector<size_t>& all,
                        kernels::GradAccumulator& acc, std::vector<at::Tensor>& replica_losses);
  void add_lane_counts(Lanes& lanes);

  TrainConfig cfg_;
  kernels::Model model_;
  const datasets::TokenRows& data_;
  kernels::NamedTensors master_;
  kernels::NamedTensors buffers_;
  kernels::Optimizer optimizer_;
  kernels::Ledger ledger_;  // ledger mode: this step's records
  GradFaults faults_;
};

}  // namespace parity::reference
