// RMSNorm loops (norm_loops.h). Built with -ffp-contract=off (kernels/CMakeLists.txt).
#include "kernels/norm_loops.h"

#include <cmath>
#include <vector>

#include "kernels/loop_elems.h"

namespace parity::kernels::norm_loops {
namespace {

using namespace loop_elems;

template <class S>
PARITY_INLINE void forward_impl(int64_t D, const S* x, const S* w, double eps, S* y, Acc<S>* r,
                                int64_t n0, int64_t n1) {
  using A = Acc<S>;
  const A e = A(eps), Dn = A(D);
  std::vector<A> xa(D), wa(D);
  for (int64_t k = 0; k < D; ++k) wa[k] = widen<S>(w[k]);
  for (int64_t n = n0; n < n1; ++n) {
    const S* xr = x + n * D;
    for (int64_t k = 0; k < D; ++k) xa[k] = widen<S>(xr[k]);
    const A rn = A(1) / std::sqrt(dot(xa.data(), xa.data(), D) / Dn + e);
    r[n] = rn;
    S* yr = y + n * D;
    for (int64_t k = 0; k < D; ++k) yr[k] = narrow<S>(round_trip<S>(xa[k] * rn) * wa[k]);
  }
}

// n = round(x r), y = round(n w), r = (sum x^2 / D + eps)^(-1/2): dn = round(dy w);
// dw_k = sum_rows round(dy_k n_k); dx_j = dn_j r - x_j r^3 c / D with c = sum_k dn_k x_k.
template <class S>
PARITY_INLINE void backward_impl(int64_t D, const S* x, const S* w, const Acc<S>* r,
                                 const S* dy, S* dx, Acc<S>* dw_rows, int64_t n0, int64_t n1) {
  using A = Acc<S>;
  const A Dn = A(D);
  std::vector<A> xa(D), wa(D), dn(D);
  for (int64_t k = 0; k < D; ++k) wa[k] = widen<S>(w[k]);
  for (int64_t n = n0; n < n1; ++n) {
    const S* xr = x + n * D;
    const S* dyr = dy + n * D;
    A* dwr = dw_rows + n * D;
    const A rn = r[n];
    for (int64_t k = 0; k < D; ++k) {
      xa[k] = widen<S>(xr[k]);
      const A g = widen<S>(dyr[k]);
      dn[k] = round_trip<S>(g * wa[k]);
      dwr[k] = round_trip<S>(g * round_trip<S>(xa[k] * rn));
    }
    const A c = (dot(dn.data(), xa.data(), D) * ((rn * rn) * rn)) / Dn;
    S* dxr = dx + n * D;
    for (int64_t k = 0; k < D; ++k) dxr[k] = narrow<S>(dn[k] * rn - xa[k] * c);
  }
}

template <class S>
PARITY_INLINE void sum_impl(const Acc<S>* rows, int64_t N, int64_t D, S* dw) {
  std::vector<Acc<S>> total(D);
  loop_elems::sum_rows(rows, N, D, total.data());
  for (int64_t k = 0; k < D; ++k) dw[k] = narrow<S>(total[k]);
}

}  // namespace

PARITY_CLONES void forward(int64_t D, const float* x, const float* w, double eps, float* y,
                           float* r, int64_t n0, int64_t n1) {
  forward_impl(D, x, w, eps, y, r, n0, n1);
}
PARITY_CLONES void forward(int64_t D, const double* x, const double* w, double eps, double* y,
                           double* r, int64_t n0, int64_t n1) {
  forward_impl(D, x, w, eps, y, r, n0, n1);
}
PARITY_CLONES void forward(int64_t D, const uint16_t* x, const uint16_t* w, double eps,
                           uint16_t* y, float* r, int64_t n0, int64_t n1) {
  forward_impl(D, x, w, eps, y, r, n0, n1);
}

PARITY_CLONES void backward(int64_t D, const float* x, const float* w, const float* r,
                            const float* dy, float* dx, float* dw_rows, int64_t n0,
                            int64_t n1) {
  backward_impl(D, x, w, r, dy, dx, dw_rows, n0, n1);
}
PARITY_CLONES void backward(int64_t D, const double* x, const double* w, const double* r,
                            const double* dy, double* dx, double* dw_rows, int64_t n0,
                            int64_t n1) {
  backward_impl(D, x, w, r, dy, dx, dw_rows, n0, n1);
}
PARITY_CLONES void backward(int64_t D, const uint16_t* x, const uint16_t* w, const float* r,
                            const uint16_t* dy, uint16_t* dx, float* dw_rows, int64_t n0,
                            int64_t n1) {
  backward_impl(D, x, w, r, dy, dx, dw_rows, n0, n1);
}

PARITY_CLONES void sum_rows(const float* dw_rows, int64_t N, int64_t D, float* dw) {
  sum_impl<float>(dw_rows, N, D, dw);
}
PARITY_CLONES void sum_rows(const double* dw_rows, int64_t N, int64_t D, double* dw) {
  sum_impl<double>(dw_rows, N, D, dw);
}
PARITY_CLONES void sum_rows(const float* dw_rows, int64_t N, int64_t D, uint16_t* dw) {
  sum_impl<uint16_t>(dw_rows, N, D, dw);
}

}  // namespace parity::kernels::norm_loops
