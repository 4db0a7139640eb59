// Comparing two stored tensors element by element (DESIGN.md section 6). Torch-free: it works
// on the raw bytes of h5::Array, in the tensor's own dtype (bf16, fp32, fp64 aware).
//
// Per tensor: the bitwise flag; #wrong (elements whose bits differ); the largest distance in
// units in the last place of the dtype (adjacent representable values are 1 ulp apart, +0
// and -0 are 0 ulp apart but not bitwise equal); NMSE = sum (a-b)^2 / sum b^2; the largest
// absolute and relative differences with their index and both values; the first differing
// index. NaN and Inf are counted first: a NaN on one side only, or infinities of different
// sign, is a hard mismatch (ulp distance "inf").
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "dumps/h5.h"

namespace parity::compare {

constexpr uint64_t kInfiniteUlp = std::numeric_limits<uint64_t>::max();

struct TensorDiff {
  std::string name;
  std::string dtype;
  int64_t numel = 0;
  std::string problem;     // dtype or shape mismatch: nothing else is meaningful then
  bool bitwise = true;
  int64_t wrong = 0;       // elements whose bits differ
  uint64_t max_ulp = 0;
  double nmse = 0;
  double max_abs = 0;
  int64_t max_abs_index = -1;
  double max_abs_a = 0, max_abs_b = 0;
  double max_rel = 0;
  int64_t max_rel_index = -1;
  double max_rel_a = 0, max_rel_b = 0;
  int64_t first_diff = -1;
  int64_t nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
  int64_t nan_mismatch = 0;      // NaN on one side only, or infinities that differ
  int64_t signed_zero_diff = 0;  // +0 against -0
  bool all_zero = true;          // both sides entirely zero
};

TensorDiff compare_arrays(const std::string& name, const h5::Array& a, const h5::Array& b);

// Ulp distance between two finite values of the same dtype (bit patterns widened to 64 bits).
uint64_t ulp_distance_f32(float a, float b);
uint64_t ulp_distance_f64(double a, double b);
uint64_t ulp_distance_bf16(uint16_t a, uint16_t b);

}  // namespace parity::compare
