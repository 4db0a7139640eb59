// The AttnRes read of kernels/attn_res.h as plain loops (no torch), one token at a time:
// attn_res.cpp wraps them in the autograd Function of the `fused` form.
//
// Per token, with V_0..V_{N-1} the stack's entries and V_N the partial sum:
//   r_n = 1 / sqrt(sum_d V_nd^2 / D + eps)     l_n = sum_d (V_nd r_n) q_d
//   p = softmax(l)                             out_d = sum_n p_n V_nd
// Backward (go the output's gradient):
//   dp_n = go . V_n    ds_n = p_n (dp_n - sum_m p_m dp_m)
//   dV_nd = p_n go_d + ds_n r_n q_d - ds_n (q . V_n) r_n^3 / D V_nd
//   dq_d = sum over tokens of sum_n ds_n r_n V_nd
//
// Numerics. Elements are fp32, fp64 or bf16 (its 16 bits); the arithmetic runs in the
// accumulation type (fp32 for fp32 and bf16, fp64 for fp64) with every sum in a fixed order
// (channels ascending, entries ascending, tokens ascending for dq), and results are rounded
// to the element type once. Each token is one loop iteration, and the file is built without
// FMA contraction, so the bits depend neither on the thread count nor on the vector ISA.
#pragma once

#include <cstdint>

namespace parity::kernels::attn_res_loops {

struct Shape {
  int64_t N, D;  // committed blocks, channels
  double eps;
};

// Tokens [t0, t1): stack [tokens, N, D], partial [tokens, D], q [D] (acc) -> out [tokens, D];
// r and p [tokens, N + 1] (acc) kept for the backward.
void forward(const Shape& s, const float* stack, const float* partial, const float* q,
             float* out, float* r, float* p, int64_t t0, int64_t t1);
void forward(const Shape& s, const double* stack, const double* partial, const double* q,
             double* out, double* r, double* p, int64_t t0, int64_t t1);
void forward(const Shape& s, const uint16_t* stack, const uint16_t* partial, const float* q,
             uint16_t* out, float* r, float* p, int64_t t0, int64_t t1);

// Tokens [t0, t1) of the backward: d_stack, d_partial (element type) and each token's share
// of dq, dq_rows [tokens, D] (acc), which the caller sums over tokens in order (sum_rows).
void backward(const Shape& s, const float* stack, const float* partial, const float* q,
              const float* r, const float* p, const float* go, float* d_stack,
              float* d_partial, float* dq_rows, int64_t t0, int64_t t1);
void backward(const Shape& s, const double* stack, const double* partial, const double* q,
              const double* r, const double* p, const double* go, double* d_stack,
              double* d_partial, double* dq_rows, int64_t t0, int64_t t1);
void backward(const Shape& s, const uint16_t* stack, const uint16_t* partial, const float* q,
              const float* r, const float* p, const float* go, uint16_t* d_stack,
              uint16_t* d_partial, float* dq_rows, int64_t t0, int64_t t1);

// Columns [d0, d1) of dq = sum over tokens (ascending) of dq_rows [tokens, D].
void sum_rows(const float* rows, int64_t tokens, int64_t D, float* dq, int64_t d0, int64_t d1);
void sum_rows(const double* rows, int64_t tokens, int64_t D, double* dq, int64_t d0,
              int64_t d1);

}  // namespace parity::kernels::attn_res_loops
