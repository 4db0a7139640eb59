// The two element-wise stages around the fused KDA core, as plain loops (no torch) that
// kda.cpp wraps in autograd Functions for `--kda fused`:
//
//   decay:  z[b,h,t,k] = rate[h] * (pre[b,t,h*K+k] + dt[h*K+k])
//           the decay gate's pre-activation, already in the core's [B,H,T,K] layout
//           (the gate is then bound * sigmoid(z), left to ATen's vectorised sigmoid);
//   norm:   y[b,t,h*K+k] = round(x_k r w_k sg[b,t,h*K+k]),  x = round_trip(o[b,h,t,:]),
//           r = 1 / sqrt(sum_k x_k^2 / K + eps),  sg = 1 / (1 + e^-gate), e^x being
//           loop_elems::fixed_exp
//           KimiRMSNormGated per head with its sigmoid gate, back in [B,T,H*K].
//
// Numerics. pre, y and the gradients of pre and o's rounding are in the element type S (fp32,
// fp64, or bf16 as its 16 bits); everything else is in the accumulation type A (fp32 for
// bf16). `decay` computes what `(pre.to(A) + dt) * rate` computes, bit for bit. The sums run
// in a fixed order: sum_k x_k^2 and the backward's sum_k in loop_elems' 16 lanes and tree;
// the parameter gradients over tokens ascending (rows, then tokens, then heads for w). Each
// (row, token, head) is one loop iteration whatever range a caller hands out, and the file is
// built without FMA contraction, so the bits depend neither on threads nor on the vector ISA.
#pragma once

#include <cstdint>

namespace parity::kernels::kda_gates {

struct Shape {
  int64_t B, T, H, K;
};

// Heads [h0, h1): pre [B,T,H*K], dt [H*K], rate [H] -> z [B,H,T,K].
void decay_forward(const Shape& s, const float* pre, const float* dt, const float* rate,
                   float* z, int64_t h0, int64_t h1);
void decay_forward(const Shape& s, const double* pre, const double* dt, const double* rate,
                   double* z, int64_t h0, int64_t h1);
void decay_forward(const Shape& s, const uint16_t* pre, const float* dt, const float* rate,
                   float* z, int64_t h0, int64_t h1);

// Heads [h0, h1) of the gradients of sum(z * dz): dpre [B,T,H*K], ddt [H*K] and drate [H].
void decay_backward(const Shape& s, const float* pre, const float* dt, const float* rate,
                    const float* dz, float* dpre, float* ddt, float* drate, int64_t h0,
                    int64_t h1);
void decay_backward(const Shape& s, const double* pre, const double* dt, const double* rate,
                    const double* dz, double* dpre, double* ddt, double* drate, int64_t h0,
                    int64_t h1);
void decay_backward(const Shape& s, const uint16_t* pre, const float* dt, const float* rate,
                    const float* dz, uint16_t* dpre, float* ddt, float* drate, int64_t h0,
                    int64_t h1);

// Rows n = (b*T + t)*H + h in [n0, n1): o [B,H,T,K], gate [B,T,H*K], w [K] -> y [B,T,H*K] and
// r [B,T,H] (kept for the backward).
void norm_forward(const Shape& s, const float* o, const float* gate, const float* w, double eps,
                  float* y, float* r, int64_t n0, int64_t n1);
void norm_forward(const Shape& s, const double* o, const double* gate, const double* w,
                  double eps, double* y, double* r, int64_t n0, int64_t n1);
void norm_forward(const Shape& s, const float* o, const float* gate, const float* w, double eps,
                  uint16_t* y, float* r, int64_t n0, int64_t n1);

// Rows [n0, n1) of the gradients of sum(y * dy): do [B,H,T,K] (rounded to S and back, as the
// gradient of o.to(S) is), dgate [B,T,H*K], and each row's share of dw in dw_rows [B*T*H, K]
// (summed in row order by norm_loops::sum_rows).
void norm_backward(const Shape& s, const float* o, const float* gate, const float* w,
                   const float* r, const float* dy, float* d_o, float* dgate, float* dw_rows,
                   int64_t n0, int64_t n1);
void norm_backward(const Shape& s, const double* o, const double* gate, const double* w,
                   const double* r, const double* dy, double* d_o, double* dgate,
                   double* dw_rows, int64_t n0, int64_t n1);
void norm_backward(const Shape& s, const float* o, const float* gate, const float* w,
                   const float* r, const uint16_t* dy, float* d_o, float* dgate, float* dw_rows,
                   int64_t n0, int64_t n1);

}  // namespace parity::kernels::kda_gates
