// The latent mixture of experts of torchtitan's kimi_k3 (models/kimi_k3/moe.KimiLatentMoE over
// models/common/moe.py), and its quantile-balanced expert bias.
//
// Router, in acc: scores = sigmoid(x W_gate^T) [N, E]. The experts of a token are chosen on
// scores + expert_bias (the bias only selects): in training the sorted top-(k+1), whose first
// k route and whose (k+1)-th biased score is the cutoff the balancer observes; in a
// forward-only pass the top-k. The weights are the unbiased scores of the chosen experts,
// w / (sum w + route_norm_eps) * route_scale.
//
// Routed path on the latent: z = routed_down(x) [N, L]; the (token, slot) pairs are stably
// sorted by expert and each expert runs a SiTU-GLU FFN (w13 [2, F, L], w2 [L, F]) on its
// contiguous run of tokens, in token order; each output row is weighted in acc and cast back;
// a token's k rows are added in the stream dtype onto zero in ascending expert order (the
// order of the dispatcher's scatter_add over the expert-sorted rows); then
// routed_up(routed_norm(.)). Shared experts: one SiTU-GLU FFN of width n_shared * F on x.
// No atomics anywhere: the result does not depend on thread count or device scheduling.
//
// The balancer (QuantileBalancer): every training forward adds, per token and expert, the
// bias the expert would have needed to be chosen, r = cutoff - score, to an int32 histogram
// of `bins` bins over [min(bias) - 1, max(bias) + 1]. Once per optimizer step, after
// clipping and before the update, the bias is overwritten by the mean-centred k/E-quantile of
// r per expert, interpolated inside its bin, and the histogram is zeroed. Integer histograms
// sum exactly in any order, so micro-batches, dp replicas and pipeline stages cannot change
// the result.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::kernels {

struct MoeWeights {
  at::Tensor gate;                             // router.gate.weight [E, D]
  at::Tensor w13, w2;                          // routed_experts: [E, 2, F, L], [E, L, F]
  at::Tensor shared_w13, shared_w2;            // [2, Hs, D], [D, Hs]; undefined if none
  at::Tensor routed_down, routed_norm, routed_up;  // [L, D], [L], [D, L]
};

struct MoeBuffers {
  at::Tensor expert_bias;        // [E] fp32
  at::Tensor tokens_per_expert;  // [E] fp32, training: routed tokens counted
  at::Tensor histogram;          // [E, bins] int32, training: required biases counted
};

// x_BTD -> y_BTD. training: the top-(k+1) selection, and the buffers' counts and histogram
// are accumulated.
at::Tensor moe(const at::Tensor& x_BTD, const MoeWeights& w, const MoeBuffers& b,
               const ModelConfig& c, bool training);

// QuantileBalancer.observe: scores_NE and cutoff_N1 in acc, bias_E fp32.
void observe_required_bias(const at::Tensor& scores_NE, const at::Tensor& cutoff_N1,
                           const at::Tensor& bias_E, at::Tensor& histogram_EB);

// QuantileBalancer.estimate_expert_bias: the next bias, [E] fp32.
at::Tensor estimate_expert_bias(const at::Tensor& histogram_EB, const at::Tensor& bias_E,
                                int64_t top_k);

// The optimizer-step pre-hook: every MoE layer's bias from its histogram, then the histogram
// and the token counts zeroed. `buffers` as init_buffers names them.
void update_expert_biases(const ModelConfig& c, NamedTensors& buffers);

// With the balancer off: the histograms and token counts zeroed, the bias left as it is.
void clear_expert_counts(const ModelConfig& c, NamedTensors& buffers);

// The MoE layer l's buffers, by name.
MoeBuffers moe_buffers(const NamedTensors& buffers, int layer);

}  // namespace parity::kernels
