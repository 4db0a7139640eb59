#include "compare/tensor_compare.h"

#include <cmath>
#include <algorithm>
#include <cstring>

namespace parity::compare {

namespace {

// Maps a sign-magnitude bit pattern onto a line where adjacent floats are adjacent integers:
// negative values below zero, -0 and +0 both at 0.
int64_t ordered(uint64_t bits, int width) {
  const uint64_t sign = uint64_t{1} << (width - 1);
  const uint64_t mag = bits & (sign - 1);
  return (bits & sign) ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag);
}

uint64_t distance(uint64_t a, uint64_t b, int width) {
  if (width == 64) {  // |oa - ob| can exceed int64: widen
    const __int128 d = static_cast<__int128>(ordered(a, 64)) - ordered(b, 64);
    const __int128 m = d < 0 ? -d : d;
    return m > static_cast<__int128>(kInfiniteUlp - 1) ? kInfiniteUlp - 1 : static_cast<uint64_t>(m);
  }
  const int64_t d = ordered(a, width) - ordered(b, width);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

float bf16_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Element {
  double value;
  uint64_t bits;
};

// Element i of a little-endian array of Bits-wide floats (bf16, fp32 or fp64).
template <typename Bits>
Element load(const unsigned char* p, int64_t i) {
  Bits bits;
  std::memcpy(&bits, p + sizeof(Bits) * i, sizeof(Bits));
  double value;
  if constexpr (sizeof(Bits) == 2) {
    value = bf16_to_float(bits);
  } else if constexpr (sizeof(Bits) == 4) {
    float f;
    std::memcpy(&f, &bits, 4);
    value = f;
  } else {
    std::memcpy(&value, &bits, 8);
  }
  return {value, bits};
}

// The element loop: one pass over both sides.
template <typename Bits>
void scan(TensorDiff& d, const unsigned char* pa, const unsigned char* pb, int64_t n) {
  constexpr int width = 8 * sizeof(Bits);
  double sq_diff = 0, sq_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Element a = load<Bits>(pa, i), b = load<Bits>(pb, i);
    const bool nan_a = std::isnan(a.value), nan_b = std::isnan(b.value);
    const bool inf_a = std::isinf(a.value), inf_b = std::isinf(b.value);
    d.nan_a += nan_a;
    d.nan_b += nan_b;
    d.inf_a += inf_a;
    d.inf_b += inf_b;
    if (!nan_b && !inf_b) sq_ref += b.value * b.value;  // the reference energy of NMSE
    if (a.value != 0 || b.value != 0 || nan_a || nan_b) d.all_zero = false;
    if (a.bits == b.bits) continue;
    ++d.wrong;
    if (d.first_diff < 0) d.first_diff = i;
    if (nan_a || nan_b || inf_a || inf_b) {
      if (!(nan_a && nan_b)) {  // two NaNs with different payloads are still both NaN
        ++d.nan_mismatch;
        d.max_ulp = kInfiniteUlp;
      }
      continue;
    }
    if (a.value == 0 && b.value == 0) {
      ++d.signed_zero_diff;
      continue;
    }
    const uint64_t u = distance(a.bits, b.bits, width);
    if (d.max_ulp != kInfiniteUlp && u > d.max_ulp) d.max_ulp = u;
    const double diff = std::fabs(a.value - b.value);
    sq_diff += diff * diff;
    if (diff > d.max_abs) {
      d.max_abs = diff;
      d.max_abs_index = i;
      d.max_abs_a = a.value;
      d.max_abs_b = b.value;
    }
    const double rel = diff / std::max(std::fabs(a.value), std::fabs(b.value));
    if (rel > d.max_rel) {
      d.max_rel = rel;
      d.max_rel_index = i;
      d.max_rel_a = a.value;
      d.max_rel_b = b.value;
    }
  }
  if (d.wrong > 0 && d.nan_mismatch == 0)
    d.nmse = sq_ref > 0 ? sq_diff / sq_ref : (sq_diff > 0 ? INFINITY : 0);
  d.bitwise = d.wrong == 0;
}

// The same results as scan() for buffers known to hold no NaN or Inf on either side: no
// special-value tests, and the relative difference divides only when it can set a new maximum.
template <typename Bits>
void scan_finite(TensorDiff& d, const unsigned char* pa, const unsigned char* pb, int64_t n) {
  constexpr int width = 8 * sizeof(Bits);
  double sq_diff = 0, sq_ref = 0;
  bool all_zero = true;
  for (int64_t i = 0; i < n; ++i) {
    const Element a = load<Bits>(pa, i), b = load<Bits>(pb, i);
    sq_ref += b.value * b.value;
    all_zero = all_zero && a.value == 0 && b.value == 0;
    if (a.bits == b.bits) continue;
    ++d.wrong;
    if (d.first_diff < 0) d.first_diff = i;
    if (a.value == 0 && b.value == 0) {
      ++d.signed_zero_diff;
      continue;
    }
    const uint64_t u = distance(a.bits, b.bits, width);
    if (u > d.max_ulp) d.max_ulp = u;
    const double diff = std::fabs(a.value - b.value);
    sq_diff += diff * diff;
    if (diff > d.max_abs) {
      d.max_abs = diff;
      d.max_abs_index = i;
      d.max_abs_a = a.value;
      d.max_abs_b = b.value;
    }
    const double scale = std::max(std::fabs(a.value), std::fabs(b.value));
    if (diff > d.max_rel * scale) {  // diff / scale > max_rel, without the division
      d.max_rel = diff / scale;
      d.max_rel_index = i;
      d.max_rel_a = a.value;
      d.max_rel_b = b.value;
    }
  }
  d.all_zero = all_zero;
  if (d.wrong > 0) d.nmse = sq_ref > 0 ? sq_diff / sq_ref : (sq_diff > 0 ? INFINITY : 0);
  d.bitwise = d.wrong == 0;
}

// NaN and Inf counts from the bits alone (vectorisable integer work).
template <typename Bits>
void count_specials(const unsigned char* p, int64_t n, int64_t& nan, int64_t& inf) {
  constexpr int mant_bits = sizeof(Bits) == 2 ? 7 : sizeof(Bits) == 4 ? 23 : 52;
  constexpr Bits sign = Bits{1} << (8 * sizeof(Bits) - 1);
  constexpr Bits mant_mask = (Bits{1} << mant_bits) - 1;
  constexpr Bits exp_mask = static_cast<Bits>(~sign & ~mant_mask);
  nan = inf = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, p + sizeof(Bits) * i, sizeof(Bits));
    const bool special = (v & exp_mask) == exp_mask;
    nan += special && (v & mant_mask) != 0;
    inf += special && (v & mant_mask) == 0;
  }
}

// Identical buffers (the common case in a parity run): only the NaN/Inf counts and the
// all-zero flag are needed, and they come from the bits of one side. Integer work the
// compiler vectorises, several times faster than the element loop.
template <typename Bits>
void scan_identical(TensorDiff& d, const unsigned char* p, int64_t n) {
  constexpr int mant_bits = sizeof(Bits) == 2 ? 7 : sizeof(Bits) == 4 ? 23 : 52;
  constexpr Bits sign = Bits{1} << (8 * sizeof(Bits) - 1);
  constexpr Bits mant_mask = (Bits{1} << mant_bits) - 1;
  constexpr Bits exp_mask = static_cast<Bits>(~sign & ~mant_mask);
  int64_t nan = 0, inf = 0;
  Bits any = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, p + sizeof(Bits) * i, sizeof(Bits));
    const bool special = (v & exp_mask) == exp_mask;
    nan += special && (v & mant_mask) != 0;
    inf += special && (v & mant_mask) == 0;
    any |= v & static_cast<Bits>(~sign);
  }
  d.nan_a = d.nan_b = nan;
  d.inf_a = d.inf_b = inf;
  d.all_zero = any == 0;
  d.bitwise = true;
}

template <typename Bits>
void compare_floats(TensorDiff& d, const h5::Array& a, const h5::Array& b) {
  const int64_t n = a.numel();
  if (std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0)
    return scan_identical<Bits>(d, a.bytes.data(), n);
  int64_t nan_a, inf_a, nan_b, inf_b;
  count_specials<Bits>(a.bytes.data(), n, nan_a, inf_a);
  count_specials<Bits>(b.bytes.data(), n, nan_b, inf_b);
  if (nan_a + inf_a + nan_b + inf_b == 0)
    scan_finite<Bits>(d, a.bytes.data(), b.bytes.data(), n);
  else
    scan<Bits>(d, a.bytes.data(), b.bytes.data(), n);
}

}  // namespace

uint64_t ulp_distance_f32(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return distance(x, y, 32);
}
uint64_t ulp_distance_f64(double a, double b) {
  uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return distance(x, y, 64);
}
uint64_t ulp_distance_bf16(uint16_t a, uint16_t b) { return distance(a, b, 16); }

TensorDiff compare_arrays(const std::string& name, const h5::Array& a, const h5::Array& b) {
  TensorDiff d;
  d.name = name;
  d.dtype = h5::dtype_name(a.dtype);
  d.numel = a.numel();
  if (a.dtype != b.dtype) {
    d.problem = std::string("dtype ") + h5::dtype_name(a.dtype) + " vs " + h5::dtype_name(b.dtype);
    d.bitwise = false;
    return d;
  }
  if (a.shape != b.shape) {
    d.problem = "shapes differ";
    d.bitwise = false;
    return d;
  }
  const int64_t n = a.numel();
  const unsigned char* pa = a.bytes.data();
  const unsigned char* pb = b.bytes.data();
  switch (a.dtype) {
    case h5::DType::F32: compare_floats<uint32_t>(d, a, b); break;
    case h5::DType::F64: compare_floats<uint64_t>(d, a, b); break;
    case h5::DType::BF16: compare_floats<uint16_t>(d, a, b); break;
    default: {  // integers: bitwise only
      d.wrong = 0;
      const size_t w = h5::dtype_size(a.dtype);
      for (int64_t i = 0; i < n; ++i)
        if (std::memcmp(pa + w * i, pb + w * i, w) != 0) {
          if (d.first_diff < 0) d.first_diff = i;
          ++d.wrong;
        }
      d.bitwise = d.wrong == 0;
      d.all_zero = false;
    }
  }
  return d;
}

}  // namespace parity::compare
