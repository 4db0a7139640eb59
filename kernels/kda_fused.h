// The fused KDA core: the gated delta rule of kernels/kda.h, one (row, head) at a time, with a
// hand-written backward. Plain C++ (no torch): kda.cpp wraps it in an autograd Function.
//
// Forward, per token t (S the [K, V] state, zero before token 0):
//   S' = diag(a_t) S,  a_t = exp(g_t)     w = S'^T k_t     r_t = v_t - w
//   S  = S' + k_t (beta_t r_t)^T          o_t = S^T q_t
// It saves the state entering every chunk of `chunk` tokens, r_t and a_t. Two backwards:
// backward() walks the chunks last to first, recomputes the chunk's S' from its entering state
// and r, and runs the adjoint of the four lines above token by token; backward_chunked() (what
// kda_fused runs) runs the adjoint of the chunked form instead, with fewer operations
// (kda_fused.cpp derives each line of both).
//
// Numerics. Everything runs in the element type (fp32 or fp64; callers upcast bf16); exp is
// loop_elems::fixed_exp (within 1.2 ulp, the same bits on every machine). The
// arithmetic is written on fixed-width vector types (64 bytes: 16 floats or 8 doubles), with
// every sum in a fixed order: along the key channels sequentially by vector block, then a
// fixed pairwise tree over the lanes; along the value channels sequentially by column, in
// tiles of a fixed width. The file is built without FMA contraction, so the same input gives
// the same bits on every x86-64 machine whichever clone (x86-64-v4, x86-64-v3, SSE2) runs, and on
// any number of threads (each (row, head) is one thread's work).
#pragma once

#include <cstdint>

namespace parity::kernels::kda_core {

struct Shape {
  int64_t T, K, V, chunk;
};

// The key and value widths the saved buffers use: K and V rounded up to whole vectors.
int64_t padded(int64_t n, bool fp64);
// Elements of the saved state buffer of one (row, head): ceil(T / chunk) * Kp * Vp.
int64_t state_elems(const Shape& s, bool fp64);

// One (row, head). q, k, g: [T, K]; v: [T, V]; beta: [T] (contiguous). Writes o [T, V],
// states [ceil(T/chunk), Kp, Vp] (the state entering each chunk), r [T, Vp] and the decay
// a = exp(g) [T, K]. states and r may both be null (a forward no backward follows): o and a
// get the same bits, and nothing is saved.
void forward(const Shape& s, const float* q, const float* k, const float* v, const float* g,
             const float* beta, float* o, float* states, float* r, float* a);
void forward(const Shape& s, const double* q, const double* k, const double* v,
             const double* g, const double* beta, double* o, double* states, double* r,
             double* a);

// The gradients of sum(o * dout) w.r.t. q, k, v, g, beta (shapes as the inputs), from the
// forward's inputs (g through its a) and saved buffers. Overwrites dq, dk, dv, dg, dbeta.
void backward(const Shape& s, const float* q, const float* k, const float* a,
              const float* beta, const float* states, const float* r, const float* dout,
              float* dq, float* dk, float* dv, float* dg, float* dbeta);
void backward(const Shape& s, const double* q, const double* k, const double* a,
              const double* beta, const double* states, const double* r, const double* dout,
              double* dq, double* dk, double* dv, double* dg, double* dbeta);

// The same gradients from the chunked form (docs/design.md [Note: chunked kda]), also from the
// forward's a: chunks of C = min(s.chunk, 16) tokens, the states entering the chunks inside
// one saved interval recomputed from its saved one. Per state element and token 6 multiplies
// and 6 adds (backward(): 11 and 9), plus the pairwise in-chunk terms (C^2 / 2 products of K
// channels per chunk). Denormals are flushed for its duration (the in-chunk decays fall far
// below fp32's normal range). Every sum runs in a fixed order
// (kda_fused.cpp), so the bits do not depend on the thread count or the vector clone; they
// depend on s.chunk, and differ from backward()'s by rounding (tests/test_kda.cpp bounds both
// against each other and the recurrent form).
void backward_chunked(const Shape& s, const float* q, const float* k, const float* a,
                      const float* beta, const float* states, const float* r, const float* dout,
                      float* dq, float* dk, float* dv, float* dg, float* dbeta);
void backward_chunked(const Shape& s, const double* q, const double* k, const double* a,
                      const double* beta, const double* states, const double* r,
                      const double* dout, double* dq, double* dk, double* dv, double* dg,
                      double* dbeta);

}  // namespace parity::kernels::kda_core
