// RMSNorm as plain loops (no torch), which ops.cpp wraps in an autograd Function for CPU:
//
//   y[n,:] = round(round(x[n,:] r_n) w),  r_n = 1 / sqrt(sum_k x[n,k]^2 / D + eps)
//
// the statistics and the normalisation in the accumulation type A (fp32 for bf16), the
// normalised row rounded to the element type S, then the product with w rounded to S: the
// roundings of the readable rms_norm (x.to(acc) ... .to(S) * w). The backward rounds where
// the readable one's autograd does: dy w and dy n to S before use and before the row sum.
//
// Numerics. sum_k runs in loop_elems' 16 lanes and tree; dw sums its rows in ascending order
// in A and rounds once. Each row is one loop iteration whatever range a caller hands out, and
// the file is built without FMA contraction, so the bits depend neither on threads nor on the
// vector ISA.
#pragma once

#include <cstdint>

namespace parity::kernels::norm_loops {

// Rows [n0, n1) of x [N,D], w [D] -> y [N,D] and r [N] (kept for the backward).
void forward(int64_t D, const float* x, const float* w, double eps, float* y, float* r,
             int64_t n0, int64_t n1);
void forward(int64_t D, const double* x, const double* w, double eps, double* y, double* r,
             int64_t n0, int64_t n1);
void forward(int64_t D, const uint16_t* x, const uint16_t* w, double eps, uint16_t* y, float* r,
             int64_t n0, int64_t n1);

// Rows [n0, n1) of the gradients of sum(y * dy): dx [N,D], and each row's term of dw (already
// rounded to S, held in A) in dw_rows [N,D].
void backward(int64_t D, const float* x, const float* w, const float* r, const float* dy,
              float* dx, float* dw_rows, int64_t n0, int64_t n1);
void backward(int64_t D, const double* x, const double* w, const double* r, const double* dy,
              double* dx, double* dw_rows, int64_t n0, int64_t n1);
void backward(int64_t D, const uint16_t* x, const uint16_t* w, const float* r,
              const uint16_t* dy, uint16_t* dx, float* dw_rows, int64_t n0, int64_t n1);

// dw [D] = round(sum of dw_rows over its N rows, ascending); also the KDA output norm's dw.
void sum_rows(const float* dw_rows, int64_t N, int64_t D, float* dw);
void sum_rows(const double* dw_rows, int64_t N, int64_t D, double* dw);
void sum_rows(const float* dw_rows, int64_t N, int64_t D, uint16_t* dw);

}  // namespace parity::kernels::norm_loops
