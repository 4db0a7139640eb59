#include "compare/float_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace parity::compare {

namespace {

// A 16-bit float format: `mant` stored significand bits, `emin` the exponent of its smallest
// normal binade (the bias is 1 - emin), `inf_from` the magnitude that rounds to infinity (the
// largest finite value plus half its spacing).
struct Narrow {
  int mant, emin;
  double inf_from;
};
constexpr Narrow kHalf{10, -14, 65520.0};                    // 65504 + 16
const Narrow kBf16{7, -126, std::ldexp(2.0 - 0x1p-8, 127)};  // (2 - 2^-7) 2^127 + 2^119

// Round-to-nearest-even of a double to the format's bits. Doubles hold every fp16 and bf16
// value and every midpoint between two of them exactly, so one rounding here is the correct
// rounding (a detour through float would round twice: 1 + 2^-8 + 2^-30 becomes the float
// 1 + 2^-8, a bf16 midpoint, which then ties to even and lands one ulp low).
uint16_t round_to(const Narrow& f, double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const int exp_bits = 15 - f.mant;
  const uint16_t inf = static_cast<uint16_t>(((1 << exp_bits) - 1) << f.mant);
  if (std::isnan(v)) return sign | inf | static_cast<uint16_t>(1 << (f.mant - 1));  // quiet NaN
  const double a = std::fabs(v);
  if (a >= f.inf_from) return sign | inf;
  // Scale to an integer count of the spacing at a's binade (subnormals share the smallest).
  int e;
  std::frexp(a, &e);                          // a = g 2^e, g in [0.5, 1)
  const int exp = std::max(e - 1, f.emin);    // the exponent of a's binade, at least emin
  const double q = std::nearbyint(std::ldexp(a, f.mant - exp));  // 2^mant .. 2^(mant+1) steps
  int64_t n = static_cast<int64_t>(q);
  int biased = exp + 1 - f.emin;
  if (n >= (int64_t{2} << f.mant)) {  // rounded up into the next binade
    n >>= 1;
    ++biased;
  }
  const int64_t hidden = int64_t{1} << f.mant;
  if (n < hidden) return sign | static_cast<uint16_t>(n);  // subnormal (biased exponent 0)
  return sign | static_cast<uint16_t>((biased << f.mant) | (n - hidden));
}

}  // namespace

bool is_float(h5::DType t) {
  return t == h5::DType::BF16 || t == h5::DType::F16 || t == h5::DType::F32 ||
         t == h5::DType::F64;
}

double load_value(h5::DType t, const unsigned char* p, int64_t i) {
  switch (t) {
    case h5::DType::BF16: return load_as<h5::DType::BF16>(p, i);
    case h5::DType::F16: return load_as<h5::DType::F16>(p, i);
    case h5::DType::F32: return load_as<h5::DType::F32>(p, i);
    case h5::DType::F64: return load_as<h5::DType::F64>(p, i);
    default: throw std::invalid_argument("load_value: not a float dtype");
  }
}

int64_t stored_ordinal(h5::DType t, const unsigned char* p, int64_t i) {
  switch (t) {
    case h5::DType::BF16: return ordinal_as<h5::DType::BF16>(p, i);
    case h5::DType::F16: return ordinal_as<h5::DType::F16>(p, i);
    case h5::DType::F32: return ordinal_as<h5::DType::F32>(p, i);
    case h5::DType::F64: return ordinal_as<h5::DType::F64>(p, i);
    default: throw std::invalid_argument("stored_ordinal: not a float dtype");
  }
}

int64_t ordinal_in(h5::DType t, double v) {
  switch (t) {
    case h5::DType::BF16: return ordered_bits(round_to(kBf16, v), 16);
    case h5::DType::F16: return ordered_bits(round_to(kHalf, v), 16);
    case h5::DType::F32: {
      const float f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return ordered_bits(b, 32);
    }
    case h5::DType::F64: {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return ordered_bits(b, 64);
    }
    default: throw std::invalid_argument("ordinal_in: not a float dtype");
  }
}

int mantissa_bits(h5::DType t) {
  switch (t) {
    case h5::DType::BF16: return 7;
    case h5::DType::F16: return 10;
    case h5::DType::F32: return 23;
    case h5::DType::F64: return 52;
    default: throw std::invalid_argument("mantissa_bits: not a float dtype");
  }
}

int min_normal_exponent(h5::DType t) {
  switch (t) {
    case h5::DType::BF16:
    case h5::DType::F32: return -126;
    case h5::DType::F16: return -14;
    case h5::DType::F64: return -1022;
    default: throw std::invalid_argument("min_normal_exponent: not a float dtype");
  }
}

double spacing_at(h5::DType t, double m) {
  m = std::fabs(m);
  if (m == 0 || !std::isfinite(m)) return 0;
  int e;
  std::frexp(m, &e);  // m = f 2^e, f in [0.5, 1): m's binade is 2^(e-1)
  return std::ldexp(1.0, std::max(e - 1, min_normal_exponent(t)) - mantissa_bits(t));
}

TorchTolerance torch_tolerance(h5::DType t) {
  switch (t) {
    case h5::DType::BF16: return {1.6e-2, 1e-5};
    case h5::DType::F16: return {1e-3, 1e-5};
    case h5::DType::F32: return {1.3e-6, 1e-5};
    case h5::DType::F64: return {1e-7, 1e-7};
    default: throw std::invalid_argument("torch_tolerance: not a float dtype");
  }
}

const spec::Choices<h5::DType>& ulp_dtypes() {
  static const spec::Choices<h5::DType> t{"--ulp-dtype",
                                          {{h5::DType::BF16, "bf16"},
                                           {h5::DType::F16, "fp16"},
                                           {h5::DType::F32, "fp32"},
                                           {h5::DType::F64, "fp64"}}};
  return t;
}

const char* short_name(h5::DType t) {
  switch (t) {
    case h5::DType::BF16: return "bf16";
    case h5::DType::F16: return "fp16";
    case h5::DType::F32: return "fp32";
    case h5::DType::F64: return "fp64";
    default: return h5::dtype_name(t);
  }
}

}  // namespace parity::compare
