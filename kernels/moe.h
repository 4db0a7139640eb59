// Mixture of experts (DESIGN.md section 4).
//
// Router in acc: scores = sigmoid(x W_r^T) [N, E]. The top-k experts of each token are chosen
// on scores + selection_bias (the bias only selects); the token's weights are the unbiased
// scores of the chosen experts normalised to sum 1. Routed SwiGLU experts plus shared
// experts (one SwiGLU of width n_shared * expert_hidden).
//
// Deterministic dispatch: the (token, slot) pairs are stably sorted by expert, each expert
// runs on its contiguous run of tokens in token order, results are placed (no accumulation)
// at their (token, slot) position, and the k slots of a token are summed in slot order in acc.
// No atomics anywhere, so the result does not depend on thread count or device scheduling.
#pragma once

#include <ATen/core/Tensor.h>

namespace parity::kernels {

struct MoeWeights {
  at::Tensor router;             // [E, D]
  at::Tensor w1, w3, w2;         // [E, He, D], [E, He, D], [E, D, He]
  at::Tensor shared_w1, shared_w3, shared_w2;  // [Hs, D], [Hs, D], [D, Hs]; undefined if none
  at::Tensor selection_bias;     // [E], not trained
};

// x_BTD -> y_BTD. top_k experts per token.
at::Tensor moe(const at::Tensor& x_BTD, const MoeWeights& w, int64_t top_k);

}  // namespace parity::kernels
