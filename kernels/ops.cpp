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

at::Tensor situ_glu(const at::Tensor& gate, const at::Tensor& up, double beta,
                    double linear_beta) {
  const auto acc = accum_dtype(gate.scalar_type());
  auto g = gate.to(acc), u = up.to(acc);
  auto a = beta * at::tanh(g / beta) * at::sigmoid(g);
  auto b = linear_beta * at::tanh(u / linear_beta);
  return (a * b).to(gate.scalar_type());
}

at::Tensor glu_ffn(const at::Tensor& x, const at::Tensor& w13, const at::Tensor& w2, double beta,
                   double linear_beta) {
  const int64_t H = w13.size(1);
  auto gu = project(x, w13.reshape({2 * H, w13.size(2)}));  // [.., 2H]: gate | up
  return project(situ_glu(gu.narrow(-1, 0, H), gu.narrow(-1, H, H), beta, linear_beta), w2);
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
  auto xf = x.to(accum_dtype(x.scalar_type()));
  auto inv = 1.0 / at::sqrt(xf.pow(2).sum(-1, /*keepdim=*/true) + eps);
  return (xf * inv).to(x.scalar_type());
}

at::Tensor rms_norm_gated(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& w,
                          double eps) {
  const auto acc = accum_dtype(x.scalar_type());
  auto xf = x.to(acc);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * w.to(acc);
  return (normed * at::sigmoid(gate.to(acc))).to(x.scalar_type());
}

}  // namespace parity::kernels
