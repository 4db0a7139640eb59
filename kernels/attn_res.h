// The Block AttnRes read (docs/design.md section 4).
//
//   V   = cat(stack, partial) in acc                      [B, T, N+1, D]
//   K   = V * rsqrt(mean(V^2, -1) + eps)                  per-entry RMS-normalised keys
//   q   = norm_D * proj_D in acc                          the layer's pseudo-query
//   p   = softmax over the N+1 entries of K . q           [B, T, N+1]
//   out = sum_n p_n V_n, cast back to the stream dtype    [B, T, D]
//
// stack_BTND holds the N committed blocks (N >= 0), partial_BTD the running sum of the
// current block, both in the stream dtype. proj_D is zero-initialised, so at step 0 the
// read is the uniform mix.
//
// Three implementations. Two have the same forward bits (they share `attn_res_forward_parts`):
//   * Plain: ordinary autograd; saves the acc [B,T,N+1,D] values and keys for backward.
//   * Recompute: a custom autograd Function that saves only per-token statistics (the
//     row scales r [B,T,N+1] and the mix p [B,T,N+1]) besides its inputs, and rebuilds V
//     and K in backward. Its gradients equal the plain form's up to reduction order.
// The third, Fused (the default; CPU, fp32/fp64/bf16), is the recomputing form as per-token
// loops (kernels/attn_res_loops.h) with the same saved statistics: fewer passes over V, its
// sums in a fixed lane order, so it equals the other two up to reduction order. On CUDA it
// runs as Recompute.
#pragma once

#include <ATen/core/Tensor.h>

#include "spec/options.h"

namespace parity::kernels {

using spec::AttnResImpl;  // named by spec::attn_res_forms()

at::Tensor attn_res(const at::Tensor& stack_BTND, const at::Tensor& partial_BTD,
                    const at::Tensor& proj_D, const at::Tensor& norm_D, double eps,
                    AttnResImpl impl = AttnResImpl::Fused);

at::Tensor attn_res_plain(const at::Tensor& stack_BTND, const at::Tensor& partial_BTD,
                          const at::Tensor& proj_D, const at::Tensor& norm_D, double eps);

at::Tensor attn_res_recompute(const at::Tensor& stack_BTND, const at::Tensor& partial_BTD,
                              const at::Tensor& proj_D, const at::Tensor& norm_D, double eps);

at::Tensor attn_res_fused(const at::Tensor& stack_BTND, const at::Tensor& partial_BTD,
                          const at::Tensor& proj_D, const at::Tensor& norm_D, double eps);

}  // namespace parity::kernels
