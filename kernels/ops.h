// The basic ops of the kernel set. Every op is a free function over tensors; shapes are
// written as suffixes (x_BTD is [rows, tokens, dim]). Each works for fp32, bf16 and fp64 on
// CPU and CUDA; "acc" below is accum_dtype(stream dtype): fp32 for bf16/fp32, fp64 for fp64.
#pragma once

#include <ATen/core/Tensor.h>

namespace parity::kernels {

// y = w * (x * rsqrt(mean(x^2, -1) + eps)). The statistics and the normalisation run in acc;
// the normalised value is cast back to x's dtype, then scaled by w (w in x's dtype).
// x_sD: any leading shape, last dim D. w_D.
at::Tensor rms_norm(const at::Tensor& x_sD, const at::Tensor& w_D, double eps);

// y = x @ w^T. x_sI, w_OI -> y_sO.
at::Tensor project(const at::Tensor& x_sI, const at::Tensor& w_OI);

// w2(silu(w1 x) * w3 x). x_sD, w1_HD, w3_HD, w2_DH -> y_sD.
at::Tensor swiglu(const at::Tensor& x_sD, const at::Tensor& w1_HD, const at::Tensor& w3_HD,
                  const at::Tensor& w2_DH);

// Row gather. tokens_BT (int64), w_VD -> x_BTD. Backward is an index_add in token order.
at::Tensor embed_tokens(const at::Tensor& tokens_BT, const at::Tensor& w_VD);

// Sum over tokens of the cross-entropy of logits against labels, computed in acc.
// logits_BTV (stream dtype), labels_BT (int64) -> scalar in acc dtype.
at::Tensor cross_entropy_sum(const at::Tensor& logits_BTV, const at::Tensor& labels_BT);

// x * rsqrt(sum(x^2, -1) + eps): unit L2 norm over the last dim.
at::Tensor l2_normalize(const at::Tensor& x_sD, double eps = 1e-6);

}  // namespace parity::kernels
