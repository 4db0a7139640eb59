// Kimi Delta Attention: the gated delta rule with a per-key-channel decay
// (docs/design.md section 4).
//
// Per head, with state S [K, V] starting at zero:
//   S_t = diag(exp g_t) S_{t-1}
//   S_t += beta_t k_t (v_t - S_t^T k_t)^T
//   o_t = S_t^T q_t
//
// The core runs in acc (fp32 for bf16/fp32 streams, fp64 for fp64): callers upcast.
// Shapes: q_BHTK, k_BHTK, v_BHTV, g_BHTK (log-space decay, <= 0), beta_BHT -> o_BHTV.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/ops.h"
#include "spec/options.h"

namespace parity::kernels {

// The naive token-by-token recurrence: the algorithmic ground truth.
at::Tensor kda_recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& g, const at::Tensor& beta);

// The chunked form (the default), chunks of C tokens; T need not be a multiple of C.
// Per chunk, S0 the state entering it and G the in-chunk cumulative sum of g:
//   A[t,i] = beta_t sum_k exp(G_t - G_i)_k k_t,k k_i,k   (i < t)
//   P[t,i] = sum_k exp(G_t - G_i)_k q_t,k k_i,k          (i <= t)
//   U      = (I + A)^-1 beta (V - (K exp G) S0)  =  Uv - W S0, with
//            Uv = (I + A)^-1 (beta V),  W = (I + A)^-1 (beta K exp G)   (all chunks at once)
//   O      = (Q exp G) S0 + P U
//   S_next = exp(G_C) S0 + (K exp(G_C - G))^T U
// exp(G_t - G_i) is formed only where i <= t (masked before the exp: the other half
// overflows).
at::Tensor kda_chunked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& g, const at::Tensor& beta, int64_t chunk);

// The fused form (kernels/kda_fused.h): the forward one vectorised pass per (row, head), token
// by token, keeping only the state entering each chunk of `chunk` tokens and r_t = v_t - S'^T
// k_t; the backward the chunked form's adjoint, hand-written, over chunks of at most 16
// tokens inside each saved interval. The output's bits do not depend on `chunk`; the
// gradients' do (other chunks, other roundings), as does the memory the saved states take
// (1/chunk of every state). fp32 or fp64 inputs (callers upcast bf16); (row, head) pairs run
// in parallel, each on one thread, so the bits do not depend on the thread count.
// Differentiable once. CPU only: kda() runs the chunked form for it on CUDA.
at::Tensor kda_fused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& g, const at::Tensor& beta, int64_t chunk);

using spec::KdaImpl;  // named by spec::kda_forms()

// The fused form's checkpoint interval in kda_form: half the states that 16 (the chunked
// form's chunk) would keep; the backward recomputes the state in the middle of each interval
// by the chunked form and runs chunks of 16.
constexpr int64_t kFusedCheckpoint = 32;

// The core in the given form (on CUDA the fused form runs as the chunked one). `chunk` is
// the chunked form's; the fused form checkpoints every kFusedCheckpoint tokens.
at::Tensor kda_form(KdaImpl impl, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& g, const at::Tensor& beta, int64_t chunk);


struct KdaDims {
  int64_t n_heads, head_dim, conv;
  int64_t chunk;
  double l2norm_eps;   // q, k normalisation (ModelConfig::kda_l2norm_eps)
  double gate_bound;   // g = bound * sigmoid(...) (ModelConfig::kda_gate_bound)
  double output_eps;   // KimiRMSNormGated (ModelConfig::kda_output_eps)
  KdaImpl impl = KdaImpl::Fused;
};

// Torchtitan's KDA parameters (kda.py), by their state-dict names.
struct KdaWeights {
  at::Tensor q_proj, k_proj, v_proj;      // [H*K, D]
  at::Tensor q_conv, k_conv, v_conv;      // [H*K, 1, conv] causal depthwise taps
  at::Tensor beta;                        // [H, D]
  at::Tensor forget_a, forget_b;          // [K, D], [H*K, K]
  at::Tensor A_log;                       // [H]
  at::Tensor dt_bias;                     // [H, K]
  at::Tensor output_norm;                 // [K] KimiRMSNormGated weight
  at::Tensor output_gate, output_proj;    // [H*K, D], [D, H*K]
};

// The prologue of `--kda fused` on CPU (kernels/kda_prep.h), each an autograd Function with
// a hand-written backward; fp32, fp64 or bf16, sums in fp32 (fp64 for fp64) in a fixed order.
// causal_conv_fused: causal_depthwise_conv with one rounding per output (bit for bit the same
// in fp32 and fp64); with silu, silu of the unrounded sum (e^x by loop_elems::fixed_exp), then
// the one rounding (attention-gym's causal_conv1d), keeping only x for the backward. heads_fused: a_BTC [B,T,H*K] -> [B,H,T,K] contiguous in
// acc; with l2, each head's vector a / sqrt(|a|^2 + eps) is rounded to a's dtype, then times
// scale.
at::Tensor causal_conv_fused(const at::Tensor& x_BTC, const at::Tensor& w_CJ, bool silu = false);
at::Tensor heads_fused(const at::Tensor& a_BTC, int64_t n_heads, bool l2, double eps,
                       double scale);

// The stages after the prologue (kernels/kda_gates.h), Functions of the same kind.
// decay_pre_fused: z = rate_h (pre + dt), pre_BTC in the stream dtype, dt_C and rate_H in acc,
// -> z [B,H,T,K] in acc, bit for bit what the readable form computes before its sigmoid.
// rms_norm_gated_fused: KimiRMSNormGated on the core's o_BHTK (acc, rounded to `stream` as the
// cast does) gated by sigmoid(gate_BTC) (e^x by loop_elems::fixed_exp), gate_BTC and w_K in
// acc -> [B,T,H*K] in `stream`.
at::Tensor decay_pre_fused(const at::Tensor& pre_BTC, const at::Tensor& dt_C,
                           const at::Tensor& rate_H);
at::Tensor rms_norm_gated_fused(const at::Tensor& o_BHTK, const at::Tensor& gate_BTC,
                                const at::Tensor& w_K, double eps, at::ScalarType stream);

// Causal depthwise convolution with taps w_CJ: y_t = sum_j w_j x_{t-J+1+j} (zero history).
// x_BTC -> y_BTC. Written as J shifted multiply-adds in tap order (a fixed reduction order).
at::Tensor causal_depthwise_conv(const at::Tensor& x_BTC, const at::Tensor& w_CJ);

// The short convolution with its SiLU as kda() composes it outside `--kda fused`: the conv and
// the SiLU in acc, rounded once to x's dtype (attention-gym's causal_conv1d widens inputs and
// taps to fp32 and rounds after the SiLU). Autograd throughout.
at::Tensor conv_silu(const at::Tensor& x_BTC, const at::Tensor& w_CJ);

// The KDA mixer, as torchtitan's KDA / InnerKDA / KDAKernel compute it: the q, k, v
// projections, each a causal depthwise conv + SiLU (in acc, rounded once to the stream dtype); q and k L2-normalised per
// head in acc and cast back (the kernel's l2norm); beta = sigmoid(beta(x)) and
// g = bound * sigmoid(exp(A_log) (forget_b(forget_a(x)) + dt_bias)) in acc; the core in acc
// with q scaled by K^-0.5, its output cast to the stream dtype; KimiRMSNormGated with
// output_gate(x); output_proj. x_BTD -> y_BTD. With `--kda fused` on CPU the conv + SiLU and
// the q, k, v head step run as causal_conv_fused and heads_fused (the same roundings in the
// loops' fixed order), and the
// decay gate and output norm (with its sigmoid) as decay_pre_fused and rms_norm_gated_fused.
// `out` is output_proj's ProductValue (kernels/ops.h): Unread in a checkpointed layer's rerun.
at::Tensor kda(const at::Tensor& x_BTD, const KdaWeights& w, const KdaDims& d,
               ProductValue out = ProductValue::Read);

}  // namespace parity::kernels
