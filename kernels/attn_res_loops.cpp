// The AttnRes read as loops (attn_res_loops.h). Built with -ffp-contract=off
// (kernels/CMakeLists.txt). Sums along the channels run in 16 lanes (lane i takes channels
// i, i + 16, ...), then a fixed pairwise tree over the lanes: the lanes are written out, so
// every vector clone adds in the same order as the scalar one.
#include "kernels/attn_res_loops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/loop_elems.h"

namespace parity::kernels::attn_res_loops {
namespace {

using namespace loop_elems;

// sum_d (x_d r) y_d, in lanes: the keys K = V r dotted with q, as the readable form forms them.
template <class A>
PARITY_INLINE A scaled_dot(const A* x, A r, const A* y, int64_t n) {
  A acc[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes)
    for (int64_t i = 0; i < kLanes; ++i) acc[i] += (x[d + i] * r) * y[d + i];
  for (int64_t i = 0; d + i < n; ++i) acc[i] += (x[d + i] * r) * y[d + i];
  return lane_tree(acc);
}

// Token t's entries V_0..V_N, widened into v [(N + 1) D].
template <class S>
PARITY_INLINE void load_entries(const Shape& s, const S* stack, const S* partial, int64_t t,
                                Acc<S>* v) {
  const int64_t N = s.N, D = s.D;
  const S* st = stack + t * N * D;
  for (int64_t i = 0; i < N * D; ++i) v[i] = widen<S>(st[i]);
  const S* pa = partial + t * D;
  for (int64_t d = 0; d < D; ++d) v[N * D + d] = widen<S>(pa[d]);
}

template <class S>
PARITY_INLINE void forward_impl(const Shape& s, const S* stack, const S* partial,
                                const Acc<S>* q, S* out, Acc<S>* r, Acc<S>* p, int64_t t0,
                                int64_t t1) {
  using A = Acc<S>;
  const int64_t M = s.N + 1, D = s.D;
  const A eps = A(s.eps), Dn = A(D);
  Scratch<A> v(M * D), logit(M), o(D);
  for (int64_t t = t0; t < t1; ++t) {
    load_entries(s, stack, partial, t, v.data());
    A* rt = r + t * M;
    A* pt = p + t * M;
    for (int64_t n = 0; n < M; ++n) {
      const A* vn = v.data() + n * D;
      rt[n] = A(1) / std::sqrt(dot(vn, vn, D) / Dn + eps);
      logit[n] = scaled_dot(vn, rt[n], q, D);
    }
    A top = logit[0];
    for (int64_t n = 1; n < M; ++n) top = std::max(top, logit[n]);
    A z = 0;
    for (int64_t n = 0; n < M; ++n) {
      pt[n] = std::exp(logit[n] - top);
      z += pt[n];
    }
    for (int64_t n = 0; n < M; ++n) pt[n] = pt[n] / z;
    std::fill(o.begin(), o.end(), A(0));
    for (int64_t n = 0; n < M; ++n) {
      const A* vn = v.data() + n * D;
      for (int64_t d = 0; d < D; ++d) o[d] += pt[n] * vn[d];
    }
    S* ot = out + t * D;
    for (int64_t d = 0; d < D; ++d) ot[d] = narrow<S>(o[d]);
  }
}

template <class S>
PARITY_INLINE void backward_impl(const Shape& s, const S* stack, const S* partial,
                                 const Acc<S>* q, const Acc<S>* r, const Acc<S>* p,
                                 const Acc<S>* go, S* d_stack, S* d_partial, Acc<S>* dq_rows,
                                 int64_t t0, int64_t t1) {
  using A = Acc<S>;
  const int64_t N = s.N, M = N + 1, D = s.D;
  const A Dn = A(D);
  Scratch<A> v(M * D), dp(M);
  for (int64_t t = t0; t < t1; ++t) {
    load_entries(s, stack, partial, t, v.data());
    const A* rt = r + t * M;
    const A* pt = p + t * M;
    const A* gt = go + t * D;
    A mean_dp = 0;
    for (int64_t n = 0; n < M; ++n) {
      dp[n] = dot(v.data() + n * D, gt, D);
      mean_dp += pt[n] * dp[n];
    }
    A* dqt = dq_rows + t * D;
    std::fill(dqt, dqt + D, A(0));
    for (int64_t n = 0; n < M; ++n) {
      const A* vn = v.data() + n * D;
      const A ds = pt[n] * (dp[n] - mean_dp);
      const A rn = rt[n];
      const A a = ds * rn;
      const A c = ((ds * dot(q, vn, D)) * (rn * rn * rn)) / Dn;
      S* dv = n < N ? d_stack + (t * N + n) * D : d_partial + t * D;
      for (int64_t d = 0; d < D; ++d) dv[d] = narrow<S>(pt[n] * gt[d] + a * q[d] - c * vn[d]);
      for (int64_t d = 0; d < D; ++d) dqt[d] += a * vn[d];
    }
  }
}

template <class A>
PARITY_INLINE void sum_rows_impl(const A* rows, int64_t tokens, int64_t D, A* dq, int64_t d0,
                                 int64_t d1) {
  for (int64_t d = d0; d < d1; ++d) dq[d] = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t d = d0; d < d1; ++d) dq[d] += rows[t * D + d];
}

}  // namespace

PARITY_CLONES void forward(const Shape& s, const float* stack, const float* partial,
                           const float* q, float* out, float* r, float* p, int64_t t0,
                           int64_t t1) {
  forward_impl(s, stack, partial, q, out, r, p, t0, t1);
}
PARITY_CLONES void forward(const Shape& s, const double* stack, const double* partial,
                           const double* q, double* out, double* r, double* p, int64_t t0,
                           int64_t t1) {
  forward_impl(s, stack, partial, q, out, r, p, t0, t1);
}
PARITY_CLONES void forward(const Shape& s, const uint16_t* stack, const uint16_t* partial,
                           const float* q, uint16_t* out, float* r, float* p, int64_t t0,
                           int64_t t1) {
  forward_impl(s, stack, partial, q, out, r, p, t0, t1);
}

PARITY_CLONES void backward(const Shape& s, const float* stack, const float* partial,
                            const float* q, const float* r, const float* p, const float* go,
                            float* d_stack, float* d_partial, float* dq_rows, int64_t t0,
                            int64_t t1) {
  backward_impl(s, stack, partial, q, r, p, go, d_stack, d_partial, dq_rows, t0, t1);
}
PARITY_CLONES void backward(const Shape& s, const double* stack, const double* partial,
                            const double* q, const double* r, const double* p,
                            const double* go, double* d_stack, double* d_partial,
                            double* dq_rows, int64_t t0, int64_t t1) {
  backward_impl(s, stack, partial, q, r, p, go, d_stack, d_partial, dq_rows, t0, t1);
}
PARITY_CLONES void backward(const Shape& s, const uint16_t* stack, const uint16_t* partial,
                            const float* q, const float* r, const float* p, const float* go,
                            uint16_t* d_stack, uint16_t* d_partial, float* dq_rows, int64_t t0,
                            int64_t t1) {
  backward_impl(s, stack, partial, q, r, p, go, d_stack, d_partial, dq_rows, t0, t1);
}

PARITY_CLONES void sum_rows(const float* rows, int64_t tokens, int64_t D, float* dq, int64_t d0,
                            int64_t d1) {
  sum_rows_impl(rows, tokens, D, dq, d0, d1);
}
PARITY_CLONES void sum_rows(const double* rows, int64_t tokens, int64_t D, double* dq,
                            int64_t d0, int64_t d1) {
  sum_rows_impl(rows, tokens, D, dq, d0, d1);
}

}  // namespace parity::kernels::attn_res_loops
