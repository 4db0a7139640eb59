// The four floating formats parity compares (bf16, fp16, fp32, fp64): decoding stored bits,
// the ulp line, rounding a value into a format, a format's spacing at a magnitude, and the
// tolerances torch.testing.assert_close uses by default. Torch-free.
//
// The ulp line: a format's finite values numbered in order, adjacent values one apart, with
// -0 and +0 both at 0 (the "ordinal"). The ulp distance of two values in a format is the
// difference of their ordinals. A value measured in a narrower format than it is stored in
// (fp32 storage, bf16 ulps: a bf16 run's gradients dumped as fp32) is first rounded to that
// format, to nearest even; values that already lie on its grid are measured exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "dumps/h5.h"
#include "spec/choices.h"

namespace parity::compare {

// bf16, fp16, fp32, fp64 (not the integer dtypes).
bool is_float(h5::DType t);

// Sign-magnitude bits of a `width`-bit float onto the ulp line.
inline int64_t ordered_bits(uint64_t bits, int width) {
  const uint64_t sign = uint64_t{1} << (width - 1);
  const uint64_t mag = bits & (sign - 1);
  return (bits & sign) ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag);
}

// An fp16 bit pattern's value (exact).
inline double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), -24);  // subnormal: mant x 2^-24
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

// Element i of a little-endian array of the float dtype T, as a double (exact), and its
// ordinal; the inner loops' forms of load_value and stored_ordinal below.
template <h5::DType T>
inline double load_as(const unsigned char* p, int64_t i) {
  if constexpr (T == h5::DType::BF16) {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    const uint32_t w = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  } else if constexpr (T == h5::DType::F16) {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    return half_to_double(b);
  } else if constexpr (T == h5::DType::F32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  } else {
    static_assert(T == h5::DType::F64, "a float dtype");
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
  }
}

template <h5::DType T>
inline int64_t ordinal_as(const unsigned char* p, int64_t i) {
  if constexpr (T == h5::DType::BF16 || T == h5::DType::F16) {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    return ordered_bits(b, 16);
  } else if constexpr (T == h5::DType::F32) {
    uint32_t b;
    std::memcpy(&b, p + 4 * i, 4);
    return ordered_bits(b, 32);
  } else {
    uint64_t b;
    std::memcpy(&b, p + 8 * i, 8);
    return ordered_bits(b, 64);
  }
}

// Element i of a little-endian array of a float dtype, as a double (exact).
double load_value(h5::DType t, const unsigned char* p, int64_t i);

// The ordinal of a finite value of the stored bits (no rounding).
int64_t stored_ordinal(h5::DType t, const unsigned char* p, int64_t i);

// The ordinal of a finite double rounded to nearest even into `t` (which must be a float
// dtype); a value beyond the format's range lands on its infinity's ordinal.
int64_t ordinal_in(h5::DType t, double v);

// Explicit significand bits (7, 10, 23, 52) and the smallest normal exponent (-126, -14,
// -126, -1022).
int mantissa_bits(h5::DType t);
int min_normal_exponent(h5::DType t);

// The spacing of `t`'s values at magnitude m (the ulp of m): 2^(e - mantissa_bits) with e the
// exponent of m (at least the smallest normal exponent); 0 for m = 0.
double spacing_at(h5::DType t, double m);

// torch.testing.assert_close's default (rtol, atol) for a float dtype
// (torch/testing/_comparison.py, _DTYPE_PRECISIONS): bf16 (1.6e-2, 1e-5), fp16 (1e-3, 1e-5),
// fp32 (1.3e-6, 1e-5), fp64 (1e-7, 1e-7).
struct TorchTolerance {
  double rtol, atol;
};
TorchTolerance torch_tolerance(h5::DType t);

// The float dtypes ulps can be counted in (--ulp-dtype): bf16, fp16, fp32, fp64.
const spec::Choices<h5::DType>& ulp_dtypes();

// "bf16", "fp16", "fp32", "fp64" (the short names parity's own options use).
const char* short_name(h5::DType t);

}  // namespace parity::compare
