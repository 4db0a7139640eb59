// Element helpers of the torch-free loop kernels (kda_fused.cpp, kda_prep.cpp,
// attn_res_loops.cpp, ...): bf16 travels as its 16 bits and accumulates in fp32; fp32 and
// fp64 accumulate in themselves. And their aligned scratch vectors.
// Include only from files built with -ffp-contract=off (kernels/CMakeLists.txt).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

// One clone per vector ISA, chosen at load time; the arithmetic is the same in each. The
// levels, not single extensions: x86-64-v4 (AVX-512 F, BW, DQ, VL) and x86-64-v3 (AVX2, FMA).
// A clone for "avx512f" alone vectorised no loop over bf16's 16-bit values (AVX-512 BW holds
// those) and one for "avx2" alone vectorised none at all (measured with -fopt-info-vec: the
// bf16 AdamW loop ran scalar, 110-170 ms of a debugmodel bf16 step; 23-25 ms vectorised).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PARITY_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PARITY_CLONES
#endif
#define PARITY_INLINE inline __attribute__((always_inline))
// The same for a lambda (written after its parameters): a lambda in a cloned function is a
// function of its own, built for the default target unless it is inlined.
#define PARITY_INLINE_LAMBDA __attribute__((always_inline))

namespace parity::kernels::loop_elems {

// Scratch vectors on 64-byte boundaries: a vector load or store of a row that starts on a
// whole vector then stays within one cache line (a split one costs two).
template <class E>
struct Aligned64 {
  using value_type = E;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  E* allocate(size_t n) {
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(E) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<E*>(p);
  }
  void deallocate(E* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <class U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};
template <class E>
using Scratch = std::vector<E, Aligned64<E>>;

template <class S>
struct AccOf {
  using type = S;
};
template <>
struct AccOf<uint16_t> {
  using type = float;
};
template <class S>
using Acc = typename AccOf<S>::type;

template <class S>
inline Acc<S> widen(S v) {
  return v;
}
template <>
inline float widen<uint16_t>(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class S>
inline S narrow(Acc<S> v) {
  return v;
}
// fp32 -> bf16, to nearest, ties to even; a NaN stays a (quiet) NaN.
template <>
inline uint16_t narrow<uint16_t>(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const auto rounded = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  return v != v ? uint16_t(0x7FC0) : rounded;  // a select, not a branch: loops vectorise
}

// The rounding a value takes when stored in S and read back.
template <class S>
inline Acc<S> round_trip(Acc<S> v) {
  return widen<S>(narrow<S>(v));
}

// exp(x) from additions, multiplications and exponent bits only, so that it vectorises in
// every clone and gives the same bits on every machine (a libm's exp picks its code by CPU).
// x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split in two parts, the first
// short enough that n times it is exact); e^r by its Taylor series to degree 7 (fp32) or 13
// (fp64), whose remainder is below 0.05 ulp there; 2^n as two exact power-of-two factors.
// Error within 1.2 ulp of the exact value (measured, tests/test_kda.cpp bounds it by 2).
// Above the largest finite result: +inf; below the smallest normal result: +0; NaN: NaN.
template <class A>
struct ExpParts;
template <>
struct ExpParts<float> {
  using Bits = int32_t;
  static constexpr float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f,
                         ln2_lo = -2.12194440e-4f, shifter = 12582912.0f;  // 1.5 * 2^23
  static constexpr float max = 88.72283f, min = -87.33654f;
  static constexpr int mantissa = 23, bias = 127, degree = 7;
};
template <>
struct ExpParts<double> {
  using Bits = int64_t;
  static constexpr double log2e = 1.4426950408889634074, ln2_hi = 6.93147180369123816490e-01,
                          ln2_lo = 1.90821492927058770002e-10,
                          shifter = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double max = 709.782712893384, min = -708.3964185322641;
  static constexpr int mantissa = 52, bias = 1023, degree = 13;
};
template <class A, int D>
struct TaylorExp {  // c[i] = 1 / i!
  A c[D + 1];
  constexpr TaylorExp() : c() {
    c[0] = 1;
    for (int i = 1; i <= D; ++i) c[i] = c[i - 1] / A(i);
  }
};

template <class A>
PARITY_INLINE A fixed_exp(A x) {
  using P = ExpParts<A>;
  using Bits = typename P::Bits;
  constexpr TaylorExp<A, P::degree> taylor;
  const A xc = x > P::max ? P::max : (x < P::min ? P::min : x);
  const A n = (xc * P::log2e + P::shifter) - P::shifter;  // round to nearest integer
  const A r = (xc - n * P::ln2_hi) - n * P::ln2_lo;
  A p = taylor.c[P::degree];
#pragma GCC unroll 16
  for (int i = P::degree - 1; i >= 0; --i) p = p * r + taylor.c[i];
  const Bits ni = Bits(n), n1 = ni >> 1, n2 = ni - n1;
  const Bits e1 = (n1 + P::bias) << P::mantissa, e2 = (n2 + P::bias) << P::mantissa;
  A s1, s2;
  std::memcpy(&s1, &e1, sizeof s1);
  std::memcpy(&s2, &e2, sizeof s2);
  const A y = (p * s1) * s2;
  return x > P::max ? std::numeric_limits<A>::infinity() : (x < P::min ? A(0) : y);
}

// 1 / (1 + e^-x), with fixed_exp.
template <class A>
PARITY_INLINE A logistic(A x) {
  return A(1) / (A(1) + fixed_exp(-x));
}

// e^x - 1 for x <= 0, accurate where it is small (exp(x) - 1 cancels there): the reduction of
// fixed_exp, x = n ln2 + r; e^r - 1 = r (1 + r/2! + r^2/3! + ...) by Horner to degree 8 (fp32)
// or 14 (fp64), whose remainder is below 0.01 ulp; then 2^n (e^r - 1) + (2^n - 1), where the
// product and 2^n - 1 are exact and only the sum rounds. x below -64 is taken as -64, whose
// result already rounds to -1 in both types (2^n stays normal: n >= -93).
template <class A>
PARITY_INLINE A fixed_expm1_neg(A x) {
  using P = ExpParts<A>;
  using Bits = typename P::Bits;
  constexpr int kDegree = sizeof(A) == 4 ? 8 : 14;
  constexpr TaylorExp<A, kDegree> taylor;
  const A xc = x < A(-64) ? A(-64) : x;
  const A n = (xc * P::log2e + P::shifter) - P::shifter;
  const A r = (xc - n * P::ln2_hi) - n * P::ln2_lo;
  A p = taylor.c[kDegree];
#pragma GCC unroll 16
  for (int i = kDegree - 1; i >= 1; --i) p = p * r + taylor.c[i];
  p = p * r;
  const Bits e = (Bits(n) + P::bias) << P::mantissa;
  A s;
  std::memcpy(&s, &e, sizeof s);
  return s * p + (s - A(1));
}

// tanh(x) = -m / (m + 2) with m = e^(-2|x|) - 1 (fixed_expm1_neg), and the sign of x: no
// cancellation anywhere, so small |x| keeps its relative accuracy. +-inf gives +-1, NaN NaN.
template <class A>
PARITY_INLINE A fixed_tanh(A x) {
  const A m = fixed_expm1_neg(A(-2) * std::fabs(x));
  return std::copysign((A(0) - m) / (m + A(2)), x);
}

// Sums along a vector: kLanes partial sums, then a fixed pairwise tree over them.
constexpr int64_t kLanes = 16;

template <class A>
PARITY_INLINE A lane_tree(A* acc) {
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t i = 0; i < w; ++i) acc[i] += acc[i + w];
  return acc[0];
}

// sum_d x_d y_d in kLanes lanes (lane i takes d = i, i + kLanes, ...), then lane_tree: the
// lanes are written out, so every vector clone adds in the same order as the scalar one.
template <class A>
PARITY_INLINE A dot(const A* x, const A* y, int64_t n) {
  A acc[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes)
    for (int64_t i = 0; i < kLanes; ++i) acc[i] += x[d + i] * y[d + i];
  for (int64_t i = 0; d + i < n; ++i) acc[i] += x[d + i] * y[d + i];
  return lane_tree(acc);
}

// out[k] = sum of rows[n*K + k] over n = 0..N-1 ascending: a column sum in row order.
template <class A>
PARITY_INLINE void sum_rows(const A* rows, int64_t N, int64_t K, A* out) {
  for (int64_t k = 0; k < K; ++k) out[k] = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) out[k] += rows[n * K + k];
}

}  // namespace parity::kernels::loop_elems
