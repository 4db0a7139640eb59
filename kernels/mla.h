// Multi-head latent attention (docs/design.md section 4), no rotary.
//
//   q          = wq_b(q_norm(wq_a(x)))                      [B,T,H,nope+rope]
//   kv, k_rope = split(wkv_a(x), [kv_lora, rope])
//   k_nope, v  = split(wkv_b(kv_norm(kv)), [nope, v])       per head
//   k          = cat(k_nope, k_rope broadcast over heads)   [B,T,H,nope+rope]
//   attn       = causal softmax(q k^T * (nope+rope)^-0.5) v  (softmax in acc)
//   out        = wo(attn * sigmoid(gate(x)))                [B,T,D]
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/ops.h"

namespace parity::kernels {

struct MlaDims {
  int64_t n_heads, q_lora, kv_lora, qk_nope, qk_rope, v_head;
  double norm_eps;
};

struct MlaWeights {
  at::Tensor wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, gate, wo;
};

// x_BTD -> y_BTD. `out` is wo's ProductValue (kernels/ops.h): Unread in a checkpointed layer's
// rerun.
at::Tensor mla(const at::Tensor& x_BTD, const MlaWeights& w, const MlaDims& d,
               ProductValue out = ProductValue::Read);

// Causal softmax attention. q_BHTK, k_BHTK, v_BHTV -> o_BHTV; scores (from the product of q
// and k on) and softmax in acc, probabilities cast to v's dtype before the value product.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double scale);

}  // namespace parity::kernels
