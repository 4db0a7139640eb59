// SiTU-GLU as plain loops (no torch), which ops.cpp wraps in an autograd Function for CPU:
//
//   y[n,h] = round(a(g) b(u)),  a(g) = beta tanh(g / beta) sigma(g),  b(u) = lb tanh(u / lb)
//
// with g = gu[n, h] and u = gu[n, H + h]: each row of gu is the w13 product's output, gate
// half then up half, so no narrow or copy comes between the product and the activation. The
// activation runs in the accumulation type A (fp32 for bf16) and rounds once to S, as the
// readable situ_glu does (ops.h). The backward recomputes a and b from gu (nothing else is
// saved) and rounds each gradient once:
//
//   dg = round(dy b a'(g)),  a' = (1 - t^2) sigma + beta t sigma (1 - sigma),  t = tanh(g / beta)
//   du = round(dy a b'(u)),  b' = 1 - tu^2,                                    tu = tanh(u / lb)
//
// Numerics. tanh and sigma come from loop_elems (fixed_tanh, logistic): additions,
// multiplications, one division and exponent bits, the same bits in every vector clone and on
// every machine. Each element is computed alone, the file is built without FMA contraction, and
// each row is one loop iteration whatever range a caller hands out: the bits depend neither on
// threads nor on the vector ISA.
#pragma once

#include <cstdint>

namespace parity::kernels::glu_loops {

// Rows [n0, n1) of gu [N, 2H] -> y [N, H].
void forward(int64_t H, const float* gu, double beta, double linear_beta, float* y, int64_t n0,
             int64_t n1);
void forward(int64_t H, const double* gu, double beta, double linear_beta, double* y,
             int64_t n0, int64_t n1);
void forward(int64_t H, const uint16_t* gu, double beta, double linear_beta, uint16_t* y,
             int64_t n0, int64_t n1);

// Rows [n0, n1) of the gradient of sum(y * dy) w.r.t. gu: dgu [N, 2H], gate half then up half.
void backward(int64_t H, const float* gu, const float* dy, double beta, double linear_beta,
              float* dgu, int64_t n0, int64_t n1);
void backward(int64_t H, const double* gu, const double* dy, double beta, double linear_beta,
              double* dgu, int64_t n0, int64_t n1);
void backward(int64_t H, const uint16_t* gu, const uint16_t* dy, double beta,
              double linear_beta, uint16_t* dgu, int64_t n0, int64_t n1);

}  // namespace parity::kernels::glu_loops
