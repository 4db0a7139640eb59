// Element helpers of the torch-free loop kernels (kda_prep.cpp, attn_res_loops.cpp): bf16
// travels as its 16 bits and accumulates in fp32; fp32 and fp64 accumulate in themselves.
// Include only from files built with -ffp-contract=off (kernels/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <cstring>

// One clone per vector ISA, chosen at load time; the arithmetic is the same in each.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PARITY_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PARITY_CLONES
#endif
#define PARITY_INLINE inline __attribute__((always_inline))

namespace parity::kernels::loop_elems {

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
  if (v != v) return uint16_t(0x7FC0);
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// The rounding a value takes when stored in S and read back.
template <class S>
inline Acc<S> round_trip(Acc<S> v) {
  return widen<S>(narrow<S>(v));
}

}  // namespace parity::kernels::loop_elems
