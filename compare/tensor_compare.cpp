#include "compare/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compare/float_formats.h"

namespace parity::compare {

namespace {

uint64_t distance(int64_t oa, int64_t ob) {
  const __int128 d = static_cast<__int128>(oa) - ob;
  const __int128 m = d < 0 ? -d : d;
  return m > static_cast<__int128>(kInfiniteUlp - 1) ? kInfiniteUlp - 1 : static_cast<uint64_t>(m);
}

// The bit layout of a stored float format: its width and significand bits, for the
// special-value counts that need no decoding.
template <typename Bits, int Mant>
struct Layout {
  static constexpr Bits sign = Bits{1} << (8 * sizeof(Bits) - 1);
  static constexpr Bits mant_mask = (Bits{1} << Mant) - 1;
  static constexpr Bits exp_mask = static_cast<Bits>(~sign & ~mant_mask);
};

// NaN and Inf counts, and whether any element is non-zero, from the bits alone (integer work
// the compiler vectorises).
template <typename Bits, int Mant>
void count_specials(const unsigned char* p, int64_t n, int64_t& nan, int64_t& inf, bool& nonzero) {
  using L = Layout<Bits, Mant>;
  nan = inf = 0;
  Bits any = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, p + sizeof(Bits) * i, sizeof(Bits));
    const bool special = (v & L::exp_mask) == L::exp_mask;
    nan += special && (v & L::mant_mask) != 0;
    inf += special && (v & L::mant_mask) == 0;
    any |= v & static_cast<Bits>(~L::sign);
  }
  nonzero = any != 0;
}

struct Specials {
  int64_t nan_a = 0, inf_a = 0, nan_b = 0, inf_b = 0;
  bool nonzero_a = false, nonzero_b = false;
};

Specials specials(const h5::Array& a, const h5::Array& b) {
  Specials s;
  const int64_t n = a.numel();
  auto count = [&](const h5::Array& x, int64_t& nan, int64_t& inf, bool& nz) {
    switch (x.dtype) {
      case h5::DType::BF16: return count_specials<uint16_t, 7>(x.bytes.data(), n, nan, inf, nz);
      case h5::DType::F16: return count_specials<uint16_t, 10>(x.bytes.data(), n, nan, inf, nz);
      case h5::DType::F32: return count_specials<uint32_t, 23>(x.bytes.data(), n, nan, inf, nz);
      default: return count_specials<uint64_t, 52>(x.bytes.data(), n, nan, inf, nz);
    }
  };
  count(a, s.nan_a, s.inf_a, s.nonzero_a);
  count(b, s.nan_b, s.inf_b, s.nonzero_b);
  return s;
}

// The element loop over two tensors that differ somewhere. Finite: neither side holds a NaN
// or an Inf (the special-value tests are skipped). Same: the ulp dtype is the stored one (the
// ulp distance is the difference of the stored ordinals, no rounding).
template <h5::DType Stored, bool Finite, bool Same>
void scan(TensorDiff& d, h5::DType ulp, const unsigned char* pa, const unsigned char* pb,
          int64_t n) {
  const size_t w = h5::dtype_size(Stored);
  const TorchTolerance tt = torch_tolerance(ulp);
  double sq_diff = 0, sq_ref = 0, dot = 0, sq_a = 0, max_mag = 0;
  int64_t over_1e3 = 0, over_5e3 = 0;
  bool all_zero = true;
  for (int64_t i = 0; i < n; ++i) {
    const double a = load_as<Stored>(pa, i), b = load_as<Stored>(pb, i);
    const bool equal = std::memcmp(pa + w * i, pb + w * i, w) == 0;
    if (!Finite) {
      const bool nan_a = std::isnan(a), nan_b = std::isnan(b);
      const bool inf_a = std::isinf(a), inf_b = std::isinf(b);
      d.nan_a += nan_a;
      d.nan_b += nan_b;
      d.inf_a += inf_a;
      d.inf_b += inf_b;
      if (a != 0 || b != 0 || nan_a || nan_b) all_zero = false;
      if (nan_a || nan_b || inf_a || inf_b) {
        // Outside every tolerance but bitwise-equal infinities (torch: equal_nan=False).
        const bool same_inf = equal && !nan_a;
        d.over_torch += !same_inf;
        over_1e3 += !same_inf;
        over_5e3 += !same_inf;
        if (!same_inf && !equal) {
          ++d.wrong;
          if (d.first_diff < 0) d.first_diff = i;
          if (!(nan_a && nan_b)) {  // two NaNs with different payloads are still both NaN
            ++d.nan_mismatch;
            d.max_ulp = kInfiniteUlp;
          }
        }
        if (!nan_b && !inf_b) sq_ref += b * b;
        if (!nan_a && !inf_a) max_mag = std::max(max_mag, std::fabs(a));
        if (!nan_b && !inf_b) max_mag = std::max(max_mag, std::fabs(b));
        continue;
      }
    } else if (a != 0 || b != 0) {
      all_zero = false;
    }
    sq_ref += b * b;
    dot += a * b;
    sq_a += a * a;
    max_mag = std::max(max_mag, std::max(std::fabs(a), std::fabs(b)));
    if (equal) continue;
    ++d.wrong;
    if (d.first_diff < 0) d.first_diff = i;
    if (a == 0 && b == 0) {
      ++d.signed_zero_diff;
      continue;
    }
    const uint64_t u = Same ? distance(ordinal_as<Stored>(pa, i), ordinal_as<Stored>(pb, i))
                            : distance(ordinal_in(ulp, a), ordinal_in(ulp, b));
    if (d.max_ulp != kInfiniteUlp && u > d.max_ulp) d.max_ulp = u;
    const double diff = std::fabs(a - b);
    sq_diff += diff * diff;
    if (diff > d.max_abs) {
      d.max_abs = diff;
      d.max_abs_index = i;
      d.max_abs_a = a;
      d.max_abs_b = b;
    }
    const double scale = std::max(std::fabs(a), std::fabs(b));
    if (diff > d.max_rel * scale) {  // diff / scale > max_rel, without the division
      d.max_rel = diff / scale;
      d.max_rel_index = i;
      d.max_rel_a = a;
      d.max_rel_b = b;
    }
    // msprobe's ratios: relative to the second tensor; b = 0 only passes when a = 0.
    const double ref = std::fabs(b);
    over_1e3 += !(diff < 1e-3 * ref);
    over_5e3 += !(diff < 5e-3 * ref);
    d.over_torch += !(diff <= tt.atol + tt.rtol * ref);
  }
  d.all_zero = all_zero;
  if (d.wrong > 0 && d.nan_mismatch == 0)
    d.nmse = sq_ref > 0 ? sq_diff / sq_ref : (sq_diff > 0 ? INFINITY : 0);
  d.cosine = (sq_a == 0 && sq_ref == 0) ? 1 : (sq_a == 0 || sq_ref == 0) ? 0
                                                                        : dot / std::sqrt(sq_a * sq_ref);
  const double s = spacing_at(ulp, max_mag);
  d.scale_ulps = s > 0 ? d.max_abs / s : 0;
  if (n > 0) {
    d.share_1e3 = 1.0 - static_cast<double>(over_1e3) / n;
    d.share_5e3 = 1.0 - static_cast<double>(over_5e3) / n;
  }
  d.bitwise = d.wrong == 0;
}

template <h5::DType T>
void scan_variant(TensorDiff& d, bool finite, bool same, h5::DType ulp, const h5::Array& a,
                  const h5::Array& b) {
  const unsigned char *pa = a.bytes.data(), *pb = b.bytes.data();
  const int64_t n = a.numel();
  if (finite && same) return scan<T, true, true>(d, ulp, pa, pb, n);
  if (finite) return scan<T, true, false>(d, ulp, pa, pb, n);
  if (same) return scan<T, false, true>(d, ulp, pa, pb, n);
  scan<T, false, false>(d, ulp, pa, pb, n);
}

void compare_floats(TensorDiff& d, const h5::Array& a, const h5::Array& b, h5::DType ulp) {
  const int64_t n = a.numel();
  const Specials s = specials(a, b);
  if (std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0) {
    // Identical buffers (the common case in a parity run): only the counts are needed.
    d.nan_a = d.nan_b = s.nan_a;
    d.inf_a = d.inf_b = s.inf_a;
    d.all_zero = !s.nonzero_a;
    d.over_torch = s.nan_a;  // NaN fails assert_close even against itself
    if (n > 0) d.share_1e3 = d.share_5e3 = 1.0 - static_cast<double>(s.nan_a) / n;
    d.bitwise = true;
    return;
  }
  const bool finite = s.nan_a + s.inf_a + s.nan_b + s.inf_b == 0;
  const bool same = ulp == a.dtype;
  switch (a.dtype) {
    case h5::DType::BF16: return scan_variant<h5::DType::BF16>(d, finite, same, ulp, a, b);
    case h5::DType::F16: return scan_variant<h5::DType::F16>(d, finite, same, ulp, a, b);
    case h5::DType::F32: return scan_variant<h5::DType::F32>(d, finite, same, ulp, a, b);
    default: return scan_variant<h5::DType::F64>(d, finite, same, ulp, a, b);
  }
}

}  // namespace

uint64_t ulp_distance_f32(float a, float b) {
  return distance(ordinal_in(h5::DType::F32, a), ordinal_in(h5::DType::F32, b));
}
uint64_t ulp_distance_f64(double a, double b) {
  return distance(ordinal_in(h5::DType::F64, a), ordinal_in(h5::DType::F64, b));
}
uint64_t ulp_distance_bf16(uint16_t a, uint16_t b) {
  const unsigned char pa[2] = {static_cast<unsigned char>(a), static_cast<unsigned char>(a >> 8)};
  const unsigned char pb[2] = {static_cast<unsigned char>(b), static_cast<unsigned char>(b >> 8)};
  return distance(stored_ordinal(h5::DType::BF16, pa, 0), stored_ordinal(h5::DType::BF16, pb, 0));
}

TensorDiff compare_arrays(const std::string& name, const h5::Array& a, const h5::Array& b,
                          std::optional<h5::DType> ulp_dtype) {
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
  if (is_float(a.dtype)) {
    // Ulps are counted in the narrower of the stored dtype and the one asked for.
    h5::DType ulp = a.dtype;
    if (ulp_dtype && is_float(*ulp_dtype) && mantissa_bits(*ulp_dtype) < mantissa_bits(a.dtype))
      ulp = *ulp_dtype;
    d.ulp_dtype = short_name(ulp);
    compare_floats(d, a, b, ulp);
    return d;
  }
  // Integers: bitwise only.
  const int64_t n = a.numel();
  const size_t w = h5::dtype_size(a.dtype);
  const unsigned char *pa = a.bytes.data(), *pb = b.bytes.data();
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(pa + w * i, pb + w * i, w) != 0) {
      if (d.first_diff < 0) d.first_diff = i;
      ++d.wrong;
    }
  d.bitwise = d.wrong == 0;
  d.all_zero = false;
  d.over_torch = d.wrong;
  if (n > 0) d.share_1e3 = d.share_5e3 = 1.0 - static_cast<double>(d.wrong) / n;
  return d;
}

const spec::Choices<Tolerance::Kind>& tolerance_kinds() {
  static const spec::Choices<Tolerance::Kind> t{
      "--tol", {{Tolerance::Bitwise, "bitwise"}, {Tolerance::Ulp, "ulp:K"}, {Tolerance::Torch, "torch"}}};
  return t;
}

std::optional<Tolerance> parse_tolerance(const std::string& s) {
  if (s == "bitwise") return Tolerance{Tolerance::Bitwise, 0};
  if (s == "torch") return Tolerance{Tolerance::Torch, 0};
  const std::string p = "ulp:";  // "ulp:K" itself names the form, not a value
  if (s.rfind(p, 0) == 0 && s.size() > p.size() && s.size() <= p.size() + 18) {
    uint64_t k = 0;
    for (size_t i = p.size(); i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      k = 10 * k + static_cast<uint64_t>(s[i] - '0');
    }
    return Tolerance{Tolerance::Ulp, k};
  }
  return std::nullopt;
}

std::string to_string(const Tolerance& t) {
  switch (t.kind) {
    case Tolerance::Bitwise: return "bitwise";
    case Tolerance::Ulp: return "ulp:" + std::to_string(t.ulps);
    case Tolerance::Torch: return "torch";
  }
  return "?";
}

bool within(const TensorDiff& d, const Tolerance& t) {
  if (!d.problem.empty()) return false;
  if (d.nonfinite() > 0 && !t.allow_nonfinite) return false;
  switch (t.kind) {
    case Tolerance::Bitwise: return d.bitwise;
    case Tolerance::Ulp: return d.nan_mismatch == 0 && d.max_ulp <= t.ulps;
    case Tolerance::Torch: return d.over_torch == 0;
  }
  return false;
}

}  // namespace parity::compare
