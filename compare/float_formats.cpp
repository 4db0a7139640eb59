#include "compare/float_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace parity::compare {

namespace {

// Round-to-nearest-even of a double to fp16 bits. Doubles hold every fp16 value and every
// midpoint between two exactly, so one rounding here is the correct rounding.
uint16_t double_to_half(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isnan(v)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity (65504 + half its spacing)
  // Scale to an integer count of the spacing at a's binade (subnormals share 2^-24).
  int e;
  std::frexp(a, &e);                        // a = f 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, -14);     // the exponent of a's binade, at least -14
  const double q = std::nearbyint(std::ldexp(a, 10 - exp));  // 2^10 .. 2^11 steps (ties even)
  int64_t n = static_cast<int64_t>(q);
  int biased = exp + 15;
  if (n >= 2048) {  // rounded up into the next binade
    n >>= 1;
    ++biased;
  }
  if (n < 1024) return sign | static_cast<uint16_t>(n);  // subnormal (biased exponent 0)
  return sign | static_cast<uint16_t>((biased << 10) | (n - 1024));
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
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
    case h5::DType::BF16: return ordered_bits(float_to_bf16_bits(static_cast<float>(v)), 16);
    case h5::DType::F16: return ordered_bits(double_to_half(v), 16);
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

std::optional<h5::DType> parse_float_dtype(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return h5::DType::BF16;
  if (s == "fp16" || s == "float16") return h5::DType::F16;
  if (s == "fp32" || s == "float32") return h5::DType::F32;
  if (s == "fp64" || s == "float64") return h5::DType::F64;
  return std::nullopt;
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
