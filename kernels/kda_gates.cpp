// The decay pre-activation and the gated output norm of `--kda fused` (kda_gates.h). Built
// with -ffp-contract=off (kernels/CMakeLists.txt): every product and sum rounds on its own, in
// every clone. Inner loops run along the head dimension k, whose elements are independent
// except in the lane sums of loop_elems.h.
#include "kernels/kda_gates.h"

#include <cmath>
#include <vector>

#include "kernels/loop_elems.h"

namespace parity::kernels::kda_gates {
namespace {

using namespace loop_elems;

template <class S>
PARITY_INLINE void decay_fwd(const Shape& s, const S* pre, const Acc<S>* dt,
                             const Acc<S>* rate, Acc<S>* z, int64_t h0, int64_t h1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  for (int64_t h = h0; h < h1; ++h) {
    const A rh = rate[h];
    const A* dth = dt + h * K;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const S* pr = pre + ((b * T + t) * H + h) * K;
        A* zr = z + ((b * H + h) * T + t) * K;
        for (int64_t k = 0; k < K; ++k) zr[k] = rh * (widen<S>(pr[k]) + dth[k]);
      }
  }
}

// z = rate (pre + dt): dpre = dz rate, ddt = sum_{b,t} dz rate, drate = sum_k sum_{b,t} dz x.
template <class S>
PARITY_INLINE void decay_bwd(const Shape& s, const S* pre, const Acc<S>* dt, const Acc<S>* rate,
                             const Acc<S>* dz, S* dpre, Acc<S>* ddt, Acc<S>* drate, int64_t h0,
                             int64_t h1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  std::vector<A> dx_sum(K), dr_sum(K);
  for (int64_t h = h0; h < h1; ++h) {
    const A rh = rate[h];
    const A* dth = dt + h * K;
    std::fill(dx_sum.begin(), dx_sum.end(), A(0));
    std::fill(dr_sum.begin(), dr_sum.end(), A(0));
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t at = ((b * T + t) * H + h) * K;
        const A* dzr = dz + ((b * H + h) * T + t) * K;
        for (int64_t k = 0; k < K; ++k) {
          const A dx = dzr[k] * rh;
          dpre[at + k] = narrow<S>(dx);
          dx_sum[k] += dx;
          dr_sum[k] += dzr[k] * (widen<S>(pre[at + k]) + dth[k]);
        }
      }
    A dr = 0;
    for (int64_t k = 0; k < K; ++k) {
      ddt[h * K + k] = dx_sum[k];
      dr += dr_sum[k];
    }
    drate[h] = dr;
  }
}

template <class S>
PARITY_INLINE void norm_fwd(const Shape& s, const Acc<S>* o, const Acc<S>* gate,
                            const Acc<S>* w, double eps, S* y, Acc<S>* r, int64_t n0,
                            int64_t n1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  const A e = A(eps), Kn = A(K);
  std::vector<A> x(K);
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t h = n % H, bt = n / H, b = bt / T, t = bt % T;
    const A* orow = o + ((b * H + h) * T + t) * K;
    for (int64_t k = 0; k < K; ++k) x[k] = round_trip<S>(orow[k]);
    const A rn = A(1) / std::sqrt(dot(x.data(), x.data(), K) / Kn + e);
    r[n] = rn;
    const A* gr = gate + n * K;
    S* yr = y + n * K;
    for (int64_t k = 0; k < K; ++k) yr[k] = narrow<S>(((x[k] * rn) * w[k]) * logistic(gr[k]));
  }
}

// y = n sg, sg = sigmoid(gate), n_k = x_k r w_k, r = (sum x^2 / K + eps)^(-1/2),
// dr/dx_j = -r^3 x_j / K: dgate = dy n (1 - sg) sg; dn = dy sg; dw_k = dn_k x_k r;
// dx_j = r w_j dn_j - x_j r^3 c / K with c = sum_k dn_k w_k x_k.
template <class S>
PARITY_INLINE void norm_bwd(const Shape& s, const Acc<S>* o, const Acc<S>* gate,
                            const Acc<S>* w, const Acc<S>* r, const S* dy, Acc<S>* d_o,
                            Acc<S>* dgate, Acc<S>* dw_rows, int64_t n0, int64_t n1) {
  using A = Acc<S>;
  const int64_t T = s.T, H = s.H, K = s.K;
  const A Kn = A(K);
  std::vector<A> x(K), wdn(K);
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t h = n % H, bt = n / H, b = bt / T, t = bt % T;
    const int64_t at = ((b * H + h) * T + t) * K;
    for (int64_t k = 0; k < K; ++k) x[k] = round_trip<S>(o[at + k]);
    const A rn = r[n];
    const A* gr = gate + n * K;
    const S* dyr = dy + n * K;
    A* dgr = dgate + n * K;
    A* dwr = dw_rows + n * K;
    for (int64_t k = 0; k < K; ++k) {
      const A g = widen<S>(dyr[k]), sg = logistic(gr[k]);
      dgr[k] = ((g * ((x[k] * rn) * w[k])) * (A(1) - sg)) * sg;
      const A dn = g * sg;
      dwr[k] = dn * (x[k] * rn);
      wdn[k] = w[k] * dn;
    }
    const A c = (dot(wdn.data(), x.data(), K) * ((rn * rn) * rn)) / Kn;
    for (int64_t k = 0; k < K; ++k) d_o[at + k] = round_trip<S>(rn * wdn[k] - x[k] * c);
  }
}

}  // namespace

PARITY_CLONES void decay_forward(const Shape& s, const float* pre, const float* dt,
                                 const float* rate, float* z, int64_t h0, int64_t h1) {
  decay_fwd(s, pre, dt, rate, z, h0, h1);
}
PARITY_CLONES void decay_forward(const Shape& s, const double* pre, const double* dt,
                                 const double* rate, double* z, int64_t h0, int64_t h1) {
  decay_fwd(s, pre, dt, rate, z, h0, h1);
}
PARITY_CLONES void decay_forward(const Shape& s, const uint16_t* pre, const float* dt,
                                 const float* rate, float* z, int64_t h0, int64_t h1) {
  decay_fwd(s, pre, dt, rate, z, h0, h1);
}

PARITY_CLONES void decay_backward(const Shape& s, const float* pre, const float* dt,
                                  const float* rate, const float* dz, float* dpre, float* ddt,
                                  float* drate, int64_t h0, int64_t h1) {
  decay_bwd(s, pre, dt, rate, dz, dpre, ddt, drate, h0, h1);
}
PARITY_CLONES void decay_backward(const Shape& s, const double* pre, const double* dt,
                                  const double* rate, const double* dz, double* dpre,
                                  double* ddt, double* drate, int64_t h0, int64_t h1) {
  decay_bwd(s, pre, dt, rate, dz, dpre, ddt, drate, h0, h1);
}
PARITY_CLONES void decay_backward(const Shape& s, const uint16_t* pre, const float* dt,
                                  const float* rate, const float* dz, uint16_t* dpre,
                                  float* ddt, float* drate, int64_t h0, int64_t h1) {
  decay_bwd(s, pre, dt, rate, dz, dpre, ddt, drate, h0, h1);
}

PARITY_CLONES void norm_forward(const Shape& s, const float* o, const float* gate, const float* w,
                                double eps, float* y, float* r, int64_t n0, int64_t n1) {
  norm_fwd<float>(s, o, gate, w, eps, y, r, n0, n1);
}
PARITY_CLONES void norm_forward(const Shape& s, const double* o, const double* gate,
                                const double* w, double eps, double* y, double* r, int64_t n0,
                                int64_t n1) {
  norm_fwd<double>(s, o, gate, w, eps, y, r, n0, n1);
}
PARITY_CLONES void norm_forward(const Shape& s, const float* o, const float* gate, const float* w,
                                double eps, uint16_t* y, float* r, int64_t n0, int64_t n1) {
  norm_fwd<uint16_t>(s, o, gate, w, eps, y, r, n0, n1);
}

PARITY_CLONES void norm_backward(const Shape& s, const float* o, const float* gate,
                                 const float* w, const float* r, const float* dy, float* d_o,
                                 float* dgate, float* dw_rows, int64_t n0, int64_t n1) {
  norm_bwd<float>(s, o, gate, w, r, dy, d_o, dgate, dw_rows, n0, n1);
}
PARITY_CLONES void norm_backward(const Shape& s, const double* o, const double* gate,
                                 const double* w, const double* r, const double* dy,
                                 double* d_o, double* dgate, double* dw_rows, int64_t n0,
                                 int64_t n1) {
  norm_bwd<double>(s, o, gate, w, r, dy, d_o, dgate, dw_rows, n0, n1);
}
PARITY_CLONES void norm_backward(const Shape& s, const float* o, const float* gate,
                                 const float* w, const float* r, const uint16_t* dy,
                                 float* d_o, float* dgate, float* dw_rows, int64_t n0,
                                 int64_t n1) {
  norm_bwd<uint16_t>(s, o, gate, w, r, dy, d_o, dgate, dw_rows, n0, n1);
}

}  // namespace parity::kernels::kda_gates
