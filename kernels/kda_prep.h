// The fused KDA prologue: what runs between the q, k, v projections and the core, as two
// plain loops (no torch) that kda.cpp wraps in autograd Functions for `--kda fused`.
//
//   conv:  y[b,t,c] = sum_j w[c,j] x[b, t-J+1+j, c]   (zero history; taps in order j = 0..J-1)
//          and with silu on, y = silu(round(that)) = c / (1 + e^-c), e^x being
//          loop_elems::fixed_exp (the backward recomputes c from x)
//   heads: a [B,T,H*K] -> out [B,H,T,K] in the accumulation type, and with l2 on
//          out = round(a / sqrt(sum_k a_k^2 + eps)) * scale per (b, t, head)
//
// Numerics. Elements are fp32, fp64 or bf16 (given as its 16 bits); every sum runs in the
// accumulation type (fp32 for fp32 and bf16, fp64 for fp64) in the order written above (taps
// ascending; key channels ascending; tokens ascending, rows ascending for the tap gradient),
// and a result is rounded to the element type once, to nearest even. Every channel's value is
// computed by one loop iteration whatever the channel range a caller hands out, and the file is
// built without FMA contraction, so the bits depend neither on threads nor on the vector ISA.
//
// In fp32 and fp64 `conv` without silu computes what causal_depthwise_conv computes, bit for bit. In bf16
// it rounds once instead of after every tap, as a conv1d with an fp32 accumulator does.
#pragma once

#include <cstdint>

namespace parity::kernels::kda_prep {

struct ConvShape {
  int64_t B, T, C, J;
  bool silu = false;
};

// Channels [c0, c1) of x [B,T,C], w [C,J] -> y [B,T,C].
void conv_forward(const ConvShape& s, const float* x, const float* w, float* y, int64_t c0,
                  int64_t c1);
void conv_forward(const ConvShape& s, const double* x, const double* w, double* y, int64_t c0,
                  int64_t c1);
void conv_forward(const ConvShape& s, const uint16_t* x, const uint16_t* w, uint16_t* y,
                  int64_t c0, int64_t c1);

// Channels [c0, c1) of the gradients of sum(y * dy): dx [B,T,C] and dw [C,J].
void conv_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                   float* dx, float* dw, int64_t c0, int64_t c1);
void conv_backward(const ConvShape& s, const double* x, const double* w, const double* dy,
                   double* dx, double* dw, int64_t c0, int64_t c1);
void conv_backward(const ConvShape& s, const uint16_t* x, const uint16_t* w,
                   const uint16_t* dy, uint16_t* dx, uint16_t* dw, int64_t c0, int64_t c1);

struct HeadsShape {
  int64_t B, T, H, K;
  bool l2;       // normalise each (b, t, head) to unit length
  double eps;    // inside the square root
  double scale;  // applied after the rounding, in the accumulation type (1: none)
};

// (row, head) pairs [bh0, bh1) of a [B,T,H*K] -> out [B,H,T,K]; with l2, inv [B,H,T] keeps
// 1 / sqrt(sum a^2 + eps) for the backward.
void heads_forward(const HeadsShape& s, const float* a, float* out, float* inv, int64_t bh0,
                   int64_t bh1);
void heads_forward(const HeadsShape& s, const double* a, double* out, double* inv, int64_t bh0,
                   int64_t bh1);
void heads_forward(const HeadsShape& s, const uint16_t* a, float* out, float* inv, int64_t bh0,
                   int64_t bh1);

// The gradient of sum(out * dout) w.r.t. a, for (row, head) pairs [bh0, bh1).
void heads_backward(const HeadsShape& s, const float* a, const float* inv, const float* dout,
                    float* da, int64_t bh0, int64_t bh1);
void heads_backward(const HeadsShape& s, const double* a, const double* inv,
                    const double* dout, double* da, int64_t bh0, int64_t bh1);
void heads_backward(const HeadsShape& s, const uint16_t* a, const float* inv, const float* dout,
                    uint16_t* da, int64_t bh0, int64_t bh1);

}  // namespace parity::kernels::kda_prep
