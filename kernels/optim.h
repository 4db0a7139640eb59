// Optimizer, learning-rate schedule and gradient clipping (DESIGN.md section 3).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace parity::kernels {

struct AdamWConfig {
  double lr = 8e-4;
  int warmup_steps = 2;  // lr_s = lr * min(1, s / warmup) for 1-based step s; then constant
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

double learning_rate(const AdamWConfig& c, int64_t step);

// AdamW on master parameters (fp32, or fp64 in fp64 mode), one tensor at a time in FQN
// order, torch's formulation:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
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
enum class ClipOrder { Single, PerRank };
ClipOrder parse_clip_order(const std::string& s);  // "single" | "per-rank"
const char* to_string(ClipOrder o);

// The total norm, in the gradients' dtype (fp32, or fp64 in fp64 mode). rank_of[i] is the
// pipeline rank that owns parameter i (used by per-rank only; ranks numbered from 0).
at::Tensor total_grad_norm(const std::vector<at::Tensor>& grads, ClipOrder order,
                           const std::vector<int>& rank_of);

// Multiplies every gradient by min(1, max_norm / (norm + 1e-6)) computed in the norm's dtype
// (multiplication by exactly 1 leaves the bits unchanged).
void clip_grads(std::vector<at::Tensor>& grads, const at::Tensor& total_norm, double max_norm);

}  // namespace parity::kernels
