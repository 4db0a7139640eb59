// Optimizer, learning-rate schedule and gradient clipping (docs/design.md section 3).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "spec/options.h"

namespace parity::kernels {

// The learning rate over the steps.
//   wsd:      torchtitan's LRSchedulersContainer (linear_warmup_stable_decay, LambdaLR) with
//             decay_ratio 0.8 and min_lr_factor 0: decay_steps = round(steps * 0.8) (to
//             even; at most steps - warmup), stable = steps + 1 - warmup - decay. Step s uses
//             the factor of c = s - 1: (c + 1) / warmup while c < warmup, 1 while
//             c < warmup + stable, then 1 - (c + 1 - warmup - stable) / decay.
//   constant: lr * min(1, s / warmup) (parity's schedule before it took torchtitan's).
using spec::LrSchedule;  // named by spec::lr_schedules()

struct AdamWConfig {
  double lr = 8e-4;
  int warmup_steps = 2;
  LrSchedule schedule = LrSchedule::WSD;
  int64_t total_steps = 1;  // the run's steps (wsd's decay is a fraction of them)
  double decay_ratio = 0.8;
  double min_lr_factor = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // on every parameter: torchtitan's one param group, pattern .*
  // On CPU, run each contiguous fp32, fp64 or bf16 parameter's step as one element loop
  // (kernels/adamw_loop.h, torch's fused order) instead of the readable ATen op sequence; the
  // two differ only where the loop's fused lerp rounds once and ATen's lerp twice.
  bool loop = true;
};

double learning_rate(const AdamWConfig& c, int64_t step);

// AdamW on the parameters in their own dtype (bf16 in torchtitan's bf16 mode, fp32 masters,
// fp64), moments in the parameter's dtype, one tensor at a time in FQN order. It follows torch's
// fused AdamW (the implementation torchtitan's optimizer config names): every element is read,
// updated in acc (fp32 for bf16) and written back once per step, so a bf16 parameter, m and v
// are each rounded once per step. The op sequence, in acc:
//   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2 v + (1-b2) g*g
//   p += -lr/(1-b1^t) * (m / (sqrt(v)/sqrt(1-b2^t) + eps))
// with the lerp one fused multiply-add on CPU, as torch's fused CPU kernel computes it; off
// the CPU (or for a strided tensor) the same sequence runs as ATen ops, whose lerp may round
// its product before the sum.
class AdamW {
 public:
  AdamW(AdamWConfig cfg, const std::vector<at::Tensor>& params);
  // grads[i] has params[i]'s dtype and shape. step is 1-based. Parameters marked frozen are
  // left untouched (no decay, no moments).
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, int64_t step,
            const std::vector<bool>& frozen = {});
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  std::vector<at::Tensor> m_, v_;
};

// Which update rule a run uses. SGD is plain p -= lr * g at a constant lr (no momentum, no
// decay): the exact flavors use it with a power-of-two lr, so every update is exact.
enum class OptimizerKind { AdamW, SGD };

class Optimizer {
 public:
  Optimizer(OptimizerKind kind, AdamWConfig adamw, double sgd_lr,
            const std::vector<at::Tensor>& params);
  void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, int64_t step,
            const std::vector<bool>& frozen = {});
  double lr(int64_t step) const;  // the rate step `step` uses

 private:
  OptimizerKind kind_;
  double sgd_lr_;
  AdamW adamw_;
};

// Order of the total-norm reduction.
//   single:   n_p = ||g_p||_2 for every parameter, then ||stack(n_p in FQN order)||_2
//             (the single-device clip_grad_norm_ order).
//   per-rank: each rank's norm over its own parameters (FQN order) as above, then
//             sqrt(sum over ranks in rank order of norm_r^2) (what torch's pipeline does).
using spec::ClipOrder;      // named by spec::clip_orders()
using spec::GradNormDtype;  // named by spec::grad_norm_dtypes()

// The total norm. With dtype FP32, in acc (fp32; fp64 in fp64 mode): each parameter's norm
// accumulated and returned in acc, then the norm of those norms; for bf16 gradients this is
// the seed's "total grad norm in fp32". With BF16, in the gradients' own dtype as torch's
// clip_grad_norm_ takes it: each norm accumulated in fp32 and returned in bf16, the norm of
// norms (and per-rank, the squares, their sum and its root) in bf16, at bf16's 3 significant
// digits. rank_of[i] is the pipeline rank that owns parameter i (used by per-rank only; ranks
// numbered from 0).
at::Tensor total_grad_norm(const std::vector<at::Tensor>& grads, ClipOrder order,
                           const std::vector<int>& rank_of,
                           GradNormDtype dtype = GradNormDtype::FP32);

// Multiplies every gradient by min(1, max_norm / (norm + 1e-6)) computed in the norm's dtype
// (multiplication by exactly 1 leaves the bits unchanged).
void clip_grads(std::vector<at::Tensor>& grads, const at::Tensor& total_norm, double max_norm);

}  // namespace parity::kernels
