#include "kernels/mla.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "kernels/precision.h"

namespace parity::kernels {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double scale) {
  const auto acc = accum_dtype(q.scalar_type());
  const int64_t T = q.size(-2);
  // The scores stay in acc from the product to the softmax, as torch's Flex attention keeps
  // them in fp32 for bf16 inputs; only the probabilities round to v's dtype.
  auto scores = batched_project(q.to(acc), k.to(acc)) * scale;  // [B,H,T,T]
  auto future = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1).to(v.scalar_type());
  return batched_project(probs, v.transpose(-1, -2));
}

at::Tensor mla(const at::Tensor& x, const MlaWeights& w, const MlaDims& d, ProductValue out) {
  const int64_t B = x.size(0), T = x.size(1), H = d.n_heads;
  const int64_t dk = d.qk_nope + d.qk_rope;

  auto q = project(rms_norm(project(x, w.wq_a), w.q_norm, d.norm_eps), w.wq_b)
               .view({B, T, H, dk});
  auto kv_a = project(x, w.wkv_a);                                   // [B,T,kv_lora+rope]
  auto kv_latent = kv_a.narrow(-1, 0, d.kv_lora);
  auto k_rope = kv_a.narrow(-1, d.kv_lora, d.qk_rope);              // shared by all heads
  auto kv = project(rms_norm(kv_latent, w.kv_norm, d.norm_eps), w.wkv_b)
                .view({B, T, H, d.qk_nope + d.v_head});
  auto k_nope = kv.narrow(-1, 0, d.qk_nope);
  auto v = kv.narrow(-1, d.qk_nope, d.v_head);
  at::Tensor k_rope_heads = k_rope.unsqueeze(2).expand({B, T, H, d.qk_rope});
  auto k = at::cat({k_nope, k_rope_heads}, -1);

  auto o = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                            1.0 / std::sqrt(static_cast<double>(dk)));  // [B,H,T,v]
  o = o.transpose(1, 2).reshape({B, T, H * d.v_head});
  return project(o * at::sigmoid(project(x, w.gate)), w.wo, out);
}

}  // namespace parity::kernels
