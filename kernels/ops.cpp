#include "kernels/ops.h"

#include <ATen/ATen.h>

#include "kernels/precision.h"

namespace parity::kernels {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const auto acc = accum_dtype(x.scalar_type());
  auto xf = x.to(acc);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * w;
}

at::Tensor project(const at::Tensor& x, const at::Tensor& w) { return at::matmul(x, w.t()); }

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w3,
                  const at::Tensor& w2) {
  return project(at::silu(project(x, w1)) * project(x, w3), w2);
}

at::Tensor embed_tokens(const at::Tensor& tokens, const at::Tensor& w) {
  auto flat = w.index_select(0, tokens.reshape({-1}));
  auto shape = tokens.sizes().vec();
  shape.push_back(w.size(1));
  return flat.view(shape);
}

at::Tensor cross_entropy_sum(const at::Tensor& logits, const at::Tensor& labels) {
  const auto acc = accum_dtype(logits.scalar_type());
  auto lf = logits.to(acc).reshape({-1, logits.size(-1)});
  auto logp = at::log_softmax(lf, -1);
  return at::nll_loss(logp, labels.reshape({-1}), {}, at::Reduction::Sum);
}

at::Tensor l2_normalize(const at::Tensor& x, double eps) {
  return x * at::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + eps);
}

}  // namespace parity::kernels
