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
