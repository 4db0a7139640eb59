#include "kernels/optim.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/adamw_loop.h"
#include "kernels/config.h"
#include "kernels/loop_tensors.h"
#include "kernels/precision.h"
#include "kernels/threads.h"

namespace parity::kernels {

double learning_rate(const AdamWConfig& c, int64_t step) {
  if (c.schedule == LrSchedule::Constant) {
    if (c.warmup_steps <= 0) return c.lr;
    return c.lr * std::min(1.0, static_cast<double>(step) / c.warmup_steps);
  }
  const int64_t steps = std::max<int64_t>(1, c.total_steps);
  const int64_t warmup = std::min<int64_t>(std::max(0, c.warmup_steps), steps);
  int64_t decay = static_cast<int64_t>(std::nearbyint(static_cast<double>(steps) * c.decay_ratio));
  if (warmup + decay > steps) decay = steps - warmup;
  const int64_t stable = steps + 1 - warmup - decay;  // a virtual last step keeps lr above 0
  const int64_t current = step - 1;                    // LambdaLR's 0-based index
  double factor;
  if (current < warmup)
    factor = static_cast<double>(current + 1) / static_cast<double>(warmup);
  else if (current < warmup + stable || decay == 0)
    factor = 1.0;
  else
    factor = 1.0 - static_cast<double>(current + 1 - warmup - stable) / static_cast<double>(decay);
  factor = c.min_lr_factor + (1.0 - c.min_lr_factor) * factor;
  return c.lr * factor;
}

AdamW::AdamW(AdamWConfig cfg, const std::vector<at::Tensor>& params) : cfg_(cfg) {
  for (const auto& p : params) {
    m_.push_back(at::zeros_like(p));
    v_.push_back(at::zeros_like(p));
  }
}

namespace {

// The step of one parameter as adamw_loop's element loop; false (nothing done) where the
// loop does not apply: off the CPU, another dtype, or a strided tensor.
bool loop_step(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v,
               const adamw_loop::Constants& c) {
  const auto t = p.scalar_type();
  for (const at::Tensor* x : std::initializer_list<const at::Tensor*>{&p, &g, &m, &v})
    if (!x->is_cpu() || x->scalar_type() != t || !x->is_contiguous()) return false;
  if (!loop_tensors::loop_dtype(t) || g.sizes() != p.sizes()) return false;
  loop_tensors::on_loop_type(t, "the AdamW loop", [&](auto tag) {
    using S = decltype(tag);
    using loop_tensors::elems;
    parallel_for(0, p.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
      adamw_loop::update(c, elems<S>(p), elems<S>(g), elems<S>(m), elems<S>(v), i0, i1);
    });
  });
  return true;
}

}  // namespace

void AdamW::step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 int64_t step, const std::vector<bool>& frozen) {
  at::NoGradGuard no_grad;
  const double lr = learning_rate(cfg_, step);
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(step));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  const adamw_loop::Constants c{1.0 - lr * cfg_.weight_decay, 1.0 - cfg_.beta1, cfg_.beta2,
                                1.0 - cfg_.beta2, bc2_sqrt, cfg_.eps, -step_size};
  for (size_t i = 0; i < params.size(); ++i) {
    if (i < frozen.size() && frozen[i]) continue;
    auto& p = params[i];
    if (cfg_.loop && loop_step(p, grads[i], m_[i], v_[i], c)) continue;
    const auto acc = accum_dtype(p.scalar_type());
    // Read once in acc, update out of place, write once: a bf16 parameter or state is rounded
    // once per step. The op sequence is torch's AdamW (decoupled decay as a multiply, lerp
    // for the first moment, addcmul for the second, addcdiv for the update).
    auto pa = p.to(acc), g = grads[i].to(acc), m = m_[i].to(acc), v = v_[i].to(acc);
    pa = pa * (1.0 - lr * cfg_.weight_decay);
    m = at::lerp(m, g, 1.0 - cfg_.beta1);
    v = at::addcmul(v * cfg_.beta2, g, g, 1.0 - cfg_.beta2);
    auto denom = at::sqrt(v) / bc2_sqrt + cfg_.eps;
    pa = at::addcdiv(pa, m, denom, -step_size);
    p.copy_(pa);
    m_[i].copy_(m);
    v_[i].copy_(v);
  }
}

Optimizer::Optimizer(OptimizerKind kind, AdamWConfig adamw, double sgd_lr,
                     const std::vector<at::Tensor>& params)
    : kind_(kind),
      sgd_lr_(sgd_lr),
      adamw_(adamw, kind == OptimizerKind::AdamW ? params : std::vector<at::Tensor>{}) {}

double Optimizer::lr(int64_t step) const {
  return kind_ == OptimizerKind::SGD ? sgd_lr_ : learning_rate(adamw_.config(), step);
}

void Optimizer::step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     int64_t step, const std::vector<bool>& frozen) {
  if (kind_ == OptimizerKind::AdamW) return adamw_.step(params, grads, step, frozen);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i)
    if (i >= frozen.size() || !frozen[i]) params[i].sub_(grads[i], sgd_lr_);
}

namespace {
at::Tensor norm_of_norms(const std::vector<at::Tensor>& grads, const std::vector<size_t>& idx,
                         GradNormDtype dtype) {
  std::vector<at::Tensor> norms;
  norms.reserve(idx.size());
  for (auto i : idx) {
    const auto t = grads[i].scalar_type();
    const auto out = dtype == GradNormDtype::BF16 ? t : accum_dtype(t);
    norms.push_back(at::linalg_vector_norm(grads[i], 2, c10::nullopt, false, out));
  }
  return at::linalg_vector_norm(at::stack(norms), 2);
}
}  // namespace

at::Tensor total_grad_norm(const std::vector<at::Tensor>& grads, ClipOrder order,
                           const std::vector<int>& rank_of, GradNormDtype dtype) {
  at::NoGradGuard no_grad;
  if (order == ClipOrder::Single) {
    std::vector<size_t> all(grads.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return norm_of_norms(grads, all, dtype);
  }
  if (rank_of.size() != grads.size())
    throw ConfigError("per-rank clip order needs a rank for every parameter (got " +
                      std::to_string(rank_of.size()) + " for " + std::to_string(grads.size()) +
                      " parameters)");
  std::map<int, std::vector<size_t>> by_rank;
  for (size_t i = 0; i < grads.size(); ++i) by_rank[rank_of[i]].push_back(i);
  std::vector<at::Tensor> squares;
  for (auto& [rank, idx] : by_rank) squares.push_back(norm_of_norms(grads, idx, dtype).pow(2));
  return at::stack(squares).sum().sqrt();
}

void clip_grads(std::vector<at::Tensor>& grads, const at::Tensor& total_norm, double max_norm) {
  at::NoGradGuard no_grad;
  auto coef = (max_norm / (total_norm + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) g.mul_(coef);
}

}  // namespace parity::kernels
