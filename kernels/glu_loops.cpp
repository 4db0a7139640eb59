// SiTU-GLU loops (glu_loops.h). Built with -ffp-contract=off (kernels/CMakeLists.txt).
#include "kernels/glu_loops.h"

#include "kernels/loop_elems.h"

namespace parity::kernels::glu_loops {
namespace {

using namespace loop_elems;

// One element's activation parts: t = tanh(g / beta), s = sigma(g), a = beta t s, and
// tu = tanh(u / lb), b = lb tu; the operations and their order are the readable situ_glu's.
template <class A>
struct Parts {
  A t, s, a, tu, b;
};
template <class A>
PARITY_INLINE Parts<A> parts(A g, A u, A beta, A lb) {
  Parts<A> p;
  p.t = fixed_tanh(g / beta);
  p.s = logistic(g);
  p.a = (beta * p.t) * p.s;
  p.tu = fixed_tanh(u / lb);
  p.b = lb * p.tu;
  return p;
}

template <class S>
PARITY_INLINE void forward_impl(int64_t H, const S* gu, double beta_d, double lb_d, S* y,
                                int64_t n0, int64_t n1) {
  using A = Acc<S>;
  const A beta = A(beta_d), lb = A(lb_d);
  for (int64_t n = n0; n < n1; ++n) {
    const S* g = gu + n * 2 * H;
    const S* u = g + H;
    S* yr = y + n * H;
    for (int64_t h = 0; h < H; ++h) {
      const auto p = parts<A>(widen<S>(g[h]), widen<S>(u[h]), beta, lb);
      yr[h] = narrow<S>(p.a * p.b);
    }
  }
}

template <class S>
PARITY_INLINE void backward_impl(int64_t H, const S* gu, const S* dy, double beta_d,
                                 double lb_d, S* dgu, int64_t n0, int64_t n1) {
  using A = Acc<S>;
  const A beta = A(beta_d), lb = A(lb_d), one = A(1);
  for (int64_t n = n0; n < n1; ++n) {
    const S* g = gu + n * 2 * H;
    const S* u = g + H;
    const S* dyr = dy + n * H;
    S* dg = dgu + n * 2 * H;
    S* du = dg + H;
    for (int64_t h = 0; h < H; ++h) {
      const auto p = parts<A>(widen<S>(g[h]), widen<S>(u[h]), beta, lb);
      const A d = widen<S>(dyr[h]);
      const A da = d * p.b, db = d * p.a;
      dg[h] = narrow<S>(da * ((one - p.t * p.t) * p.s + (beta * p.t) * (p.s * (one - p.s))));
      du[h] = narrow<S>(db * (one - p.tu * p.tu));
    }
  }
}

}  // namespace

PARITY_CLONES void forward(int64_t H, const float* gu, double beta, double linear_beta,
                           float* y, int64_t n0, int64_t n1) {
  forward_impl(H, gu, beta, linear_beta, y, n0, n1);
}
PARITY_CLONES void forward(int64_t H, const double* gu, double beta, double linear_beta,
                           double* y, int64_t n0, int64_t n1) {
  forward_impl(H, gu, beta, linear_beta, y, n0, n1);
}
PARITY_CLONES void forward(int64_t H, const uint16_t* gu, double beta, double linear_beta,
                           uint16_t* y, int64_t n0, int64_t n1) {
  forward_impl(H, gu, beta, linear_beta, y, n0, n1);
}

PARITY_CLONES void backward(int64_t H, const float* gu, const float* dy, double beta,
                            double linear_beta, float* dgu, int64_t n0, int64_t n1) {
  backward_impl(H, gu, dy, beta, linear_beta, dgu, n0, n1);
}
PARITY_CLONES void backward(int64_t H, const double* gu, const double* dy, double beta,
                            double linear_beta, double* dgu, int64_t n0, int64_t n1) {
  backward_impl(H, gu, dy, beta, linear_beta, dgu, n0, n1);
}
PARITY_CLONES void backward(int64_t H, const uint16_t* gu, const uint16_t* dy, double beta,
                            double linear_beta, uint16_t* dgu, int64_t n0, int64_t n1) {
  backward_impl(H, gu, dy, beta, linear_beta, dgu, n0, n1);
}

}  // namespace parity::kernels::glu_loops
