// The basic ops of the kernel set. Every op is a free function over tensors; shapes are
// written as suffixes (x_BTD is [rows, tokens, dim]). Each works for fp32, bf16 and fp64 on
// CPU and CUDA; "acc" below is accum_dtype(stream dtype): fp32 for bf16/fp32, fp64 for fp64.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace parity::kernels {

// y = w * (x * rsqrt(mean(x^2, -1) + eps)). The statistics and the normalisation run in acc;
// the normalised value is cast back to x's dtype, then scaled by w (w in x's dtype).
// x_sD: any leading shape, last dim D. w_D. On CPU, with x and w of one dtype (fp32, fp64 or
// bf16), it runs as kernels/norm_loops.h's loops in an autograd Function (the same roundings,
// sums in a fixed order); elsewhere as rms_norm_ops.
at::Tensor rms_norm(const at::Tensor& x_sD, const at::Tensor& w_D, double eps);
// The same as ATen ops (the readable form, and the form on CUDA).
at::Tensor rms_norm_ops(const at::Tensor& x_sD, const at::Tensor& w_D, double eps);

// y = x @ w^T. x_sI, w_OI -> y_sO. In fp32 on CPU, forward and backward run parity's own
// product (kernels/gemm.h: every element one fused multiply-add chain in k order, so the
// same bits on every x86-64 vector width and thread count); elsewhere at::matmul.
// PARITY_GEMM=aten runs at::matmul in fp32 too (PARITY_GEMM=avx512|avx2|scalar picks a path).
at::Tensor project(const at::Tensor& x_sI, const at::Tensor& w_OI);

// Whether anything reads a product's value. Unread is for a product whose output enters only
// sums while a checkpointed layer's forward is recomputed (kernels/layer_checkpoint.h): the
// recompute exists for its graph, and a sum's backward reads no values. An unread product
// built on parity's products saves x and w and skips the multiply, its value left at zero;
// its backward is project()'s, bit for bit. Elsewhere (ATen's products) it is project().
enum class ProductValue { Read, Unread };
at::Tensor project(const at::Tensor& x_sI, const at::Tensor& w_OI, ProductValue value);

// project() for a batch of matrices: y[g] = x[g] @ w[g]^T for every index g of the leading
// dims, which x and w share (any strides). x_GMI, w_GOI -> y_GMO. In fp32 on CPU each
// product is parity's, as project()'s; elsewhere at::matmul(x, w^T). Attention's products:
// scores = q k^T is batched_project(q, k), probs v is batched_project(probs, v^T).
at::Tensor batched_project(const at::Tensor& x_GMI, const at::Tensor& w_GOI);

// project() on rows grouped by expert: rows [s_e, s_e + counts[e]) of x, s_e the sum of the
// counts before e, times w[e]^T. x_RI, w_EOI, counts (E of them, summing to R) -> y_RO. Each
// group's product is project()'s on its rows, the same bits; in fp32 on CPU all groups run in
// one parallel region (the routed experts' small products split between the threads); in the
// other dtypes on CPU, ATen's products of project() per group, written in place under one
// autograd node; elsewhere project() per group.
at::Tensor grouped_project(const at::Tensor& x_RI, const at::Tensor& w_EOI,
                           const std::vector<int64_t>& counts);

// SiTU-GLU (models/common/activation.SiTUGLU), in acc, cast back to gate's dtype:
//   (beta tanh(g / beta) sigmoid(g)) * (linear_beta tanh(u / linear_beta)).
// gate_sH, up_sH -> h_sH.
at::Tensor situ_glu(const at::Tensor& gate_sH, const at::Tensor& up_sH, double beta,
                    double linear_beta);

// situ_glu on the w13 product's output, whose rows hold the gate half then the up half:
// gu_s2H -> h_sH. On CPU in fp32, fp64 and bf16 it is the fused loops of kernels/glu_loops.h
// (one pass over memory each way, only gu saved; their tanh and sigmoid are parity's own, so
// the bits differ from situ_glu's by a few ulp: tests/test_ops.cpp bounds both against the
// exact values); elsewhere situ_glu of the two halves.
at::Tensor situ_glu_rows(const at::Tensor& gu_s2H, double beta, double linear_beta);

// The gated FFN: w2(SiTU-GLU(w13[0] x, w13[1] x)), the gate and up projections one GEMM.
// x_sD, w13_2HD (stacked gate/up), w2_DH -> y_sD. `value` is w2's product's (Unread: y is
// zero, its graph whole).
at::Tensor glu_ffn(const at::Tensor& x_sD, const at::Tensor& w13_2HD, const at::Tensor& w2_DH,
                   double beta, double linear_beta, ProductValue value = ProductValue::Read);

// Row gather. tokens_BT (int64), w_VD -> x_BTD. Backward is an index_add in token order.
at::Tensor embed_tokens(const at::Tensor& tokens_BT, const at::Tensor& w_VD);

// Sum over tokens of the cross-entropy of logits against labels, computed in acc.
// logits_BTV (stream dtype), labels_BT (int64) -> scalar in acc dtype.
at::Tensor cross_entropy_sum(const at::Tensor& logits_BTV, const at::Tensor& labels_BT);

// x * (1 / sqrt(sum(x^2, -1) + eps)) in acc, cast back to x's dtype: unit L2 norm over the
// last dim, as the KDA kernel's l2norm computes it.
at::Tensor l2_normalize(const at::Tensor& x_sD, double eps);

// KimiRMSNormGated: rms_norm(x, w) * sigmoid(gate), all in acc (x, w and gate upcast), cast
// back to x's dtype. x_sK, gate_sK, w_K -> y_sK.
at::Tensor rms_norm_gated(const at::Tensor& x_sK, const at::Tensor& gate_sK, const at::Tensor& w_K,
                          double eps);

}  // namespace parity::kernels
