// The AdamW loop (adamw_loop.h). Built with -ffp-contract=off (kernels/CMakeLists.txt).
#include "kernels/adamw_loop.h"

#include <cmath>

#include "kernels/loop_elems.h"

namespace parity::kernels::adamw_loop {
namespace {

using namespace loop_elems;

// The fused kernel's lerp: fma(w, end - start, start) for |w| < 0.5, else
// fma(w - 1, end - start, end); the side is a template argument so that the loop body has no
// branch and vectorises.
template <bool kLow, class S>
PARITY_INLINE void update_side(const Constants& c, S* p, const S* g, S* m, S* v, int64_t i0,
                               int64_t i1) {
  using A = Acc<S>;
  const A decay = A(c.decay), w = A(c.lerp_weight), b2 = A(c.beta2),
          one_b2 = A(c.one_minus_beta2), bc2 = A(c.bc2_sqrt), eps = A(c.eps),
          step = A(c.neg_step_size), w_hi = w - A(1);
  for (int64_t i = i0; i < i1; ++i) {
    const A gi = widen<S>(g[i]), mi = widen<S>(m[i]), vi = widen<S>(v[i]);
    A pi = widen<S>(p[i]) * decay;
    const A diff = gi - mi;
    A mn;
    if constexpr (kLow)
      mn = std::fma(w, diff, mi);
    else
      mn = std::fma(w_hi, diff, gi);
    const A vn = vi * b2 + (one_b2 * gi) * gi;
    const A denom = std::sqrt(vn) / bc2 + eps;
    pi = pi + (step * mn) / denom;
    p[i] = narrow<S>(pi);
    m[i] = narrow<S>(mn);
    v[i] = narrow<S>(vn);
  }
}

template <class S>
PARITY_INLINE void update_impl(const Constants& c, S* p, const S* g, S* m, S* v, int64_t i0,
                               int64_t i1) {
  if (std::abs(c.lerp_weight) < 0.5)
    update_side<true>(c, p, g, m, v, i0, i1);
  else
    update_side<false>(c, p, g, m, v, i0, i1);
}

}  // namespace

PARITY_CLONES void update(const Constants& c, float* p, const float* g, float* m, float* v,
                          int64_t i0, int64_t i1) {
  update_impl(c, p, g, m, v, i0, i1);
}
PARITY_CLONES void update(const Constants& c, double* p, const double* g, double* m, double* v,
                          int64_t i0, int64_t i1) {
  update_impl(c, p, g, m, v, i0, i1);
}
PARITY_CLONES void update(const Constants& c, uint16_t* p, const uint16_t* g, uint16_t* m,
                          uint16_t* v, int64_t i0, int64_t i1) {
  update_impl(c, p, g, m, v, i0, i1);
}

}  // namespace parity::kernels::adamw_loop
