// Overflow-checked arithmetic for every size, count, offset and step a file gives: each returns
// nullopt where the exact result does not fit, so that a reader refuses the file instead of
// wrapping around (a product of dims that wraps to 0 reads nothing and compares equal).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace parity::spec {

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The element count of a shape whose dims are all >= 0; nullopt past int64 or on a negative
// dim. The empty shape (a scalar) counts 1, and a shape with a 0 dim counts 0 whatever its
// other dims ((2^40, 2^40, 0) is a valid empty tensor, not an overflow).
inline std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  for (const int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (const int64_t d : shape) {
    const auto m = checked_mul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace parity::spec
