// Comparing two stored tensors element by element (docs/design.md section 6). Torch-free: it works
// on the raw bytes of h5::Array, in bf16, fp16, fp32 or fp64 (integers: bitwise only).
//
// Per tensor: the bitwise flag; #wrong (elements whose bits differ); the largest distance in
// units in the last place (adjacent representable values are 1 ulp apart, +0 and -0 are 0 ulp
// apart but not bitwise equal), in the *ulp dtype*: the tensor's own, or a narrower one its
// values were computed in (a bf16 run's gradients dumped as fp32 are measured in bf16 ulps;
// compare/float_formats.h says how); the largest |a-b| in ulps of the tensor's scale (the ulp,
// in the ulp dtype, of the largest magnitude on either side: "2-3 bf16 ulps" in the seed's
// words); NMSE = sum (a-b)^2 / sum b^2; cosine similarity; the shares of elements whose
// relative error |a-b| / |b| is under 0.1% and under 0.5% (msprobe's one- and
// five-thousandth ratios; b = 0 counts as under only when a = 0); the count of elements outside
// torch.testing.assert_close's default tolerance |a-b| <= atol + rtol |b| for the ulp dtype
// (NaN anywhere is outside it, as with equal_nan=False); the largest absolute and relative
// differences with their index and both values; the first differing index. NaN and Inf are
// counted first: a NaN on one side only, or infinities of different sign, is a hard mismatch
// (ulp distance "inf"). All sums are in fp64, in element order.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "dumps/h5.h"
#include "spec/choices.h"

namespace parity::compare {

constexpr uint64_t kInfiniteUlp = std::numeric_limits<uint64_t>::max();

struct TensorDiff {
  std::string name;
  std::string dtype;       // the stored dtype's name
  std::string ulp_dtype;   // the dtype ulps are counted in ("bf16", "fp32", ...)
  int64_t numel = 0;
  std::string problem;     // dtype or shape mismatch, or only on one side: nothing else is
                           // meaningful then
  bool bitwise = true;
  int64_t wrong = 0;       // elements whose bits differ
  uint64_t max_ulp = 0;    // in the ulp dtype
  double scale_ulps = 0;   // max |a-b| / the ulp of the largest |value| (ulp dtype)
  double nmse = 0;
  double cosine = 1;       // 1 for two all-zero tensors, 0 when one side alone is all zero
  double share_1e3 = 1;    // elements with relative error < 0.001
  double share_5e3 = 1;    // elements with relative error < 0.005
  int64_t over_torch = 0;  // elements outside assert_close's default tolerance
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
  // NaN or Inf elements on either side: never an agreement, not even bitwise (unless the
  // tolerance allows them), since two runs that both blew up agree on nothing.
  int64_t nonfinite() const { return nan_a + nan_b + inf_a + inf_b; }
};

// ulp_dtype: the float dtype to count ulps (and take torch's tolerance) in; nullopt, or a
// dtype wider than the stored one, means the stored dtype.
TensorDiff compare_arrays(const std::string& name, const h5::Array& a, const h5::Array& b,
                          std::optional<h5::DType> ulp_dtype = std::nullopt);

// Ulp distance between two finite values of the same dtype (bit patterns widened to 64 bits).
uint64_t ulp_distance_f32(float a, float b);
uint64_t ulp_distance_f64(double a, double b);
uint64_t ulp_distance_bf16(uint16_t a, uint16_t b);

// When two tensors agree (the --tol presets of `parity compare`).
//   bitwise:  every bit equal;
//   ulp:K     no hard mismatch and every element within K ulps (ulp dtype);
//   torch:    every element within assert_close's default tolerance for the ulp dtype.
// Under every kind a tensor holding NaN or Inf on either side disagrees, unless
// allow_nonfinite (--allow-nonfinite) lets bitwise-equal specials pass.
struct Tolerance {
  enum Kind { Bitwise, Ulp, Torch } kind = Bitwise;
  uint64_t ulps = 0;
  bool allow_nonfinite = false;
};
// The presets' names (--tol): bitwise, ulp:K (K a count of ulps), torch.
const spec::Choices<Tolerance::Kind>& tolerance_kinds();
// "bitwise" | "ulp:K" | "torch"; nullopt otherwise (tolerance_kinds() says why).
std::optional<Tolerance> parse_tolerance(const std::string& s);
std::string to_string(const Tolerance& t);
bool within(const TensorDiff& d, const Tolerance& t);

}  // namespace parity::compare
