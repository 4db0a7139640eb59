// The integer-valued model of the closed forms (docs/design.md section 6, the `exact` flavor).
//
// Same units, blocks and stack as the real decoder, so it runs through the real trainers,
// stage protocol and schedules; but every value it computes is a small dyadic rational, so
// every sum is exact in bf16, fp32 and fp64 whatever the order. Its expected losses and
// gradients are then known exactly (harness/closed_form.h computes them with cpp_int).
//
// The stream has two channels, a and b (D = 2). Per token, with stack entries s_n:
//   embedding   x = E[token]
//   layer l     if l opens a block: append x to the stack, prefix = 0; else prefix = x
//               r = sum_n read_l[n] * s_n[a]          (over the n_l = l/lpb + 1 entries)
//               x = prefix + add_l + (0, r)
//   head        y = x + sum_n s_n                      (in the accumulation dtype)
//               loss_t = w_t * (y[b] + u * y[a]),  w_t = +1 for an even label, -1 odd
// Channel a never reads the stack, so channel b's reads never compound: activations grow
// linearly in depth, and the gradients are products of at most two parameters.
//
// Parameters: tok_embeddings.weight [V,2]; layers.<l>.add.weight [2] and
// layers.<l>.read.weight [n_l]; output.weight [1] (u).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::kernels {

struct LayerState;

// The parameters of an exact flavor, in FQN order.
std::vector<ParamSpec> exact_param_specs(const ModelConfig& c);

// The initial values (fp64, so exact-wide's offsets survive): small integers from a fixed
// formula of the position, the same for every seed.
at::Tensor exact_init(const ModelConfig& c, const ParamSpec& spec);

LayerState exact_layer(const ModelConfig& c, int l, const at::Tensor& add, const at::Tensor& read,
                       const LayerState& in);

// sum_t loss_t over the micro-batch, a scalar in the accumulation dtype. head_unit names the
// head's reads in the ledger.
at::Tensor exact_head_loss_sum(const LayerState& in, const at::Tensor& u,
                               const at::Tensor& labels_BT, int head_unit);

}  // namespace parity::kernels
