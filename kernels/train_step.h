// What both trainers share around the model: the training configuration of the numerics
// contract (docs/design.md section 3), compute copies, gradient accumulation and the end of a step
// (loss reduction, total norm, clipping, the optimizer, the step record). Sharing it is what makes a
// difference between the trainers the pipeline's doing and nothing else.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/model.h"
#include "kernels/observer.h"
#include "kernels/optim.h"
#include "kernels/params.h"
#include "kernels/precision.h"

namespace parity::kernels {

// Gradient accumulation over the micro-batches (docs/design.md section 3).
//   bf16 (Auto in both bf16 modes): in the compute dtype over the micro-batches, converted to
//        the parameters' dtype once, after the last (what a stage does when the gradient sync
//        waits for the last micro-batch; the seed's NOSYNC reference).
//   fp32: each micro-batch's gradients added into an fp32 buffer (fp64 in fp64 mode) right
//        after its backward, converted to the parameters' dtype after the last (a sync on
//        every micro-batch: the seed's stock accumulation).
using spec::GradAccum;  // named by spec::grad_accums()

struct TrainConfig {
  ModelConfig model;
  ModelOptions model_options;
  Precision precision = Precision::FP32;
  GradAccum grad_accum = GradAccum::Auto;  // Auto: bf16 in bf16 mode
  int64_t steps = 20;
  int dp = 1;
  int microbatches = 4;
  int rows = 1;  // B, rows per micro-batch
  uint64_t seed = 42;
  int threads = 1;
  std::string device = "cpu";
  // The persistent buffers the run starts from (a checkpoint's expert biases, by FQN); the
  // ones absent start at zero.
  NamedTensors initial_buffers;
  ClipOrder clip_order = ClipOrder::Single;
  GradNormDtype grad_norm_dtype = GradNormDtype::FP32;
  double max_norm = 1.0;
  std::vector<int> param_rank;  // per-rank clip order: the rank that owns each parameter
  bool reverse_microbatches = false;
  // The embedding gets no gradient and no update (as under LoRA): block 0 then has nothing
  // trainable upstream, and its gradient deposits are discarded.
  bool freeze_embedding = false;
  // Ledger mode: record every stack read's gradient contribution (kernels/ledger.h), on the
  // steps in ledger_steps (empty: every step). The taps move no bit either way.
  bool ledger = false;
  std::vector<int64_t> ledger_steps;
  bool ledger_on(int64_t step) const {
    return ledger && (ledger_steps.empty() ||
                      std::find(ledger_steps.begin(), ledger_steps.end(), step) != ledger_steps.end());
  }
  // torchtitan's quantile-balanced expert bias (kernels/moe.h): the histograms collected in
  // every training forward, the bias overwritten once per step after clipping and before the
  // update. Off: the bias stays at zero.
  bool expert_balance = true;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  AdamWConfig adamw;
  double sgd_lr = 1.0;  // SGD's constant rate
};

// The optimizer a configuration asks for, over the master parameters.
Optimizer make_optimizer(const TrainConfig& cfg, const NamedTensors& master);

constexpr const char* kEmbeddingFqn = "tok_embeddings.weight";

// The accumulation mode actually used: "bf16" (in the compute dtype over the micro-batches,
// converted once after the last) or "fp32" (into a master-dtype buffer after every backward).
std::string effective_grad_accum(const TrainConfig& c);

// The run's description for observers; the trainer fills in its name.
RunInfo make_run_info(const TrainConfig& cfg, const std::string& trainer, int64_t seq_len,
                      const std::vector<std::string>& fqns);

// Master parameters on the run's device in the master dtype (copies of `init`), and the
// buffers (each in its own dtype).
NamedTensors make_masters(const TrainConfig& cfg, const NamedTensors& init);
NamedTensors make_buffers(const TrainConfig& cfg);

// The start of every run: pins threads, installs the CPU allocator that caches freed large
// blocks (kernels/host_allocator.h) and, on CUDA, turns deterministic algorithms on.
void prepare_run(const TrainConfig& cfg);

// Compute copies of the master parameters, made once per step: the masters themselves
// (detached) where they are in the compute dtype (fp32, fp64, bf16), a bf16 copy in
// bf16-master; all require grad.
// With freeze_embedding the embedding's copy does not require grad.
std::vector<at::Tensor> make_compute_copies(const TrainConfig& cfg, const NamedTensors& master);

// Gradient accumulation over micro-batches in either mode. `take(i)` is called whenever a
// backward that touched parameter i is complete (fp32 mode adds it into the master-dtype
// buffer right away and clears the compute copy's .grad); `finish` converts what is left.
class GradAccumulator {
 public:
  GradAccumulator(const TrainConfig& cfg, const NamedTensors& master,
                  std::vector<at::Tensor>& compute);
  void after_backward(const std::vector<size_t>& params);  // no-op in bf16 mode
  std::vector<at::Tensor> finish();  // master-dtype gradients in FQN order

 private:
  bool in_buffer_;             // fp32 mode: each backward's gradient moves into acc_
  at::ScalarType buffer_dtype_;
  const NamedTensors& master_;
  std::vector<at::Tensor>& compute_;
  std::vector<at::Tensor> acc_;
};

// The end of a step, identical in both trainers: logged loss = stack(mb_losses).sum() (one
// reduction), total norm in the configured order, clipping, the expert-bias update (the
// optimizer's step pre-hook), the update, the observer's record. `buffers` must hold every
// MoE layer's summed histogram by then.
void finish_step(const TrainConfig& cfg, int64_t step, Optimizer& optimizer, NamedTensors& master,
                 NamedTensors& buffers, std::vector<at::Tensor> grads, const at::Tensor& loss,
                 const std::vector<at::Tensor>& mb_losses, int64_t tokens,
                 std::chrono::steady_clock::time_point t0, StepObserver& observer,
                 const Ledger* ledger = nullptr);

}  // namespace parity::kernels
