// The float formats the comparison engine counts ulps in (compare/float_formats.h), and the
// per-tensor figures built on them (compare/tensor_compare.h): ulps in a narrower dtype than
// the stored one, the ulps of a tensor's scale, cosine similarity, msprobe's relative-error
// shares, torch.testing's default tolerance and the --tol presets.
//
// Every expected value is worked by hand in the comment beside it; all checks are exact (the
// inputs are dyadic or the expected values are the stated exact reals' fp64 roundings).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "compare/float_formats.h"
#include "compare/tensor_compare.h"

namespace parity::compare {
namespace {

h5::Array array_of(h5::DType t, const std::vector<double>& v) {
  h5::Array a;
  a.dtype = t;
  a.shape = {static_cast<int64_t>(v.size())};
  a.bytes.resize(v.size() * h5::dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == h5::DType::F64) {
      std::memcpy(a.bytes.data() + 8 * i, &v[i], 8);
    } else if (t == h5::DType::F32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(a.bytes.data() + 4 * i, &f, 4);
    } else {
      ADD_FAILURE() << "array_of: 16-bit arrays are written as bit patterns (bits_of)";
    }
  }
  return a;
}

// A 16-bit array from bit patterns written by hand, so that the inputs do not come from the
// rounding (ordinal_in) these tests also check.
h5::Array bits_of(h5::DType t, const std::vector<uint16_t>& bits) {
  h5::Array a;
  a.dtype = t;
  a.shape = {static_cast<int64_t>(bits.size())};
  a.bytes.resize(2 * bits.size());
  std::memcpy(a.bytes.data(), bits.data(), a.bytes.size());
  return a;
}

// fp16: 1.0 is 0x3c00, the largest finite 65504 is 0x7bff, the smallest subnormal 2^-24 is
// 0x0001, -inf 0xfc00.
TEST(FloatFormats, HalfDecodesExact) {
  EXPECT_EQ(half_to_double(0x3c00), 1.0);
  EXPECT_EQ(half_to_double(0x7bff), 65504.0);
  EXPECT_EQ(half_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(half_to_double(0x03ff), std::ldexp(1023.0, -24));  // largest subnormal
  EXPECT_EQ(half_to_double(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(half_to_double(0x7e00)));
}

// Rounding into fp16 to nearest even: 1 + 2^-11 lies halfway between 1 (mantissa 0, even) and
// 1 + 2^-10 (odd): it goes to 1, ordinal 0x3c00. 1 + 3 x 2^-11 lies halfway between 1 + 2^-10
// (odd) and 1 + 2^-9 (mantissa 2, even): ordinal 0x3c02. 65519 is below the midpoint 65520
// between 65504 and 2^16 (which would overflow): 0x7bff; 65520 overflows to infinity (0x7c00).
// 2^-25 is halfway between 0 and 2^-24: even, 0. bf16: 1 + 2^-8 halfway between 1 (0x3f80) and
// 1 + 2^-7 (0x3f81): to 0x3f80.
TEST(FloatFormats, RoundingIntoANarrowerFormatIsNearestEvenExact) {
  EXPECT_EQ(ordinal_in(h5::DType::F16, 1 + std::ldexp(1.0, -11)), 0x3c00);
  EXPECT_EQ(ordinal_in(h5::DType::F16, 1 + 3 * std::ldexp(1.0, -11)), 0x3c02);
  EXPECT_EQ(ordinal_in(h5::DType::F16, 65519.0), 0x7bff);
  EXPECT_EQ(ordinal_in(h5::DType::F16, 65520.0), 0x7c00);
  EXPECT_EQ(ordinal_in(h5::DType::F16, std::ldexp(1.0, -25)), 0);
  EXPECT_EQ(ordinal_in(h5::DType::F16, -2.0), -0x4000);
  EXPECT_EQ(ordinal_in(h5::DType::BF16, 1 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(ordinal_in(h5::DType::BF16, 1 + 3 * std::ldexp(1.0, -8)), 0x3f82);
  // Just above the bf16 midpoint 1 + 2^-8, by 2^-30 (less than half an fp32 ulp there): the
  // nearest bf16 is 1 + 2^-7, 0x3f81. A detour through fp32 would round twice, to the midpoint
  // and then to even, 0x3f80.
  EXPECT_EQ(ordinal_in(h5::DType::BF16, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);
  // The largest bf16 is (2 - 2^-7) 2^127 = 0x7f7f; the midpoint to the next binade overflows.
  EXPECT_EQ(ordinal_in(h5::DType::BF16, std::ldexp(2.0 - std::ldexp(1.0, -7), 127)), 0x7f7f);
  EXPECT_EQ(ordinal_in(h5::DType::BF16, std::ldexp(2.0 - std::ldexp(1.0, -8), 127)), 0x7f80);
  // The smallest bf16 subnormal is 2^-133 (bits 0x0001); 3 x 2^-135 = 0.75 x 2^-133 rounds to it.
  EXPECT_EQ(ordinal_in(h5::DType::BF16, 3 * std::ldexp(1.0, -135)), 0x0001);
}

// The spacing at a magnitude: bf16 at 1.0 is 2^-7, fp16 at 1.0 is 2^-10, fp32 at 3.0 (binade
// 2^1) is 2^-22, fp64 at 0.75 (binade 2^-1) is 2^-53; below the smallest normal the spacing
// stays the subnormal one (fp16: 2^-24 at 1e-6, whose binade 2^-20 is below 2^-14).
TEST(FloatFormats, SpacingAtAMagnitudeExact) {
  EXPECT_EQ(spacing_at(h5::DType::BF16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(spacing_at(h5::DType::F16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(spacing_at(h5::DType::F32, 3.0), std::ldexp(1.0, -22));
  EXPECT_EQ(spacing_at(h5::DType::F64, 0.75), std::ldexp(1.0, -53));
  EXPECT_EQ(spacing_at(h5::DType::F16, 1e-6), std::ldexp(1.0, -24));
  EXPECT_EQ(spacing_at(h5::DType::F32, 0.0), 0.0);
}

// fp32 tensors holding bf16 values: 1.0 against 1 + 3 x 2^-7 is 3 bf16 ulps, and 3 x 2^16 fp32
// ulps (bf16 keeps fp32's top 16 bits). Counted in fp64 (wider than stored) they stay fp32.
TEST(CompareArrays, UlpsInANarrowerDtypeExact) {
  const double up3 = 1 + 3 * std::ldexp(1.0, -7);
  auto a = array_of(h5::DType::F32, {1.0, 2.0});
  auto b = array_of(h5::DType::F32, {up3, 2.0});
  auto own = compare_arrays("t", a, b);
  EXPECT_EQ(own.ulp_dtype, "fp32");
  EXPECT_EQ(own.max_ulp, 3u << 16);
  auto bf = compare_arrays("t", a, b, h5::DType::BF16);
  EXPECT_EQ(bf.ulp_dtype, "bf16");
  EXPECT_EQ(bf.max_ulp, 3u);
  auto wide = compare_arrays("t", a, b, h5::DType::F64);
  EXPECT_EQ(wide.ulp_dtype, "fp32");
  EXPECT_EQ(wide.max_ulp, 3u << 16);
}

// The ulps of the tensor's scale: bf16 {1, 2} against {1, 2 + 3 x 2^-6}: max |a-b| = 3 x 2^-6,
// the largest magnitude 2 + 3 x 2^-6 is in binade 2^1 where bf16's spacing is 2^-6: 3 ulps of
// scale. With a 4 on both sides the scale's spacing is 2^-5 and the same difference is 1.5.
TEST(CompareArrays, UlpsOfScaleExact) {
  const double d = 3 * std::ldexp(1.0, -6);
  // bf16 bits: 1 = 0x3f80, 2 = 0x4000, 2 + 3 x 2^-6 = 0x4003 (mantissa 3 in steps of 2^-6),
  // 4 = 0x4080.
  auto r = compare_arrays("t", bits_of(h5::DType::BF16, {0x3f80, 0x4000}),
                          bits_of(h5::DType::BF16, {0x3f80, 0x4003}));
  EXPECT_EQ(r.max_abs, d);
  EXPECT_EQ(r.scale_ulps, 3.0);
  EXPECT_EQ(r.max_ulp, 3u);
  auto s = compare_arrays("t", bits_of(h5::DType::BF16, {0x3f80, 0x4000, 0x4080}),
                          bits_of(h5::DType::BF16, {0x3f80, 0x4003, 0x4080}));
  EXPECT_EQ(s.scale_ulps, 1.5);
}

// Cosine similarity, in fp64: a = (3, 4), b = (4, 3): 24 / 25 = 0.96 (the fp64 rounding of the
// quotient). Orthogonal (1, 0) and (0, 1): 0. One side all zero: 0; both zero: 1.
TEST(CompareArrays, CosineExact) {
  auto c = compare_arrays("t", array_of(h5::DType::F64, {3, 4}), array_of(h5::DType::F64, {4, 3}));
  EXPECT_EQ(c.cosine, 24.0 / std::sqrt(25.0 * 25.0));
  auto o = compare_arrays("t", array_of(h5::DType::F64, {1, 0}), array_of(h5::DType::F64, {0, 1}));
  EXPECT_EQ(o.cosine, 0.0);
  auto z = compare_arrays("t", array_of(h5::DType::F64, {0, 0}), array_of(h5::DType::F64, {0, 1}));
  EXPECT_EQ(z.cosine, 0.0);
  auto same = compare_arrays("t", array_of(h5::DType::F64, {3, 4}), array_of(h5::DType::F64, {3, 4}));
  EXPECT_EQ(same.cosine, 1.0);
}

// msprobe's shares, relative to the second tensor: a = (1, 1, 1, 1, 0, 2),
// b = (1, 1.0005, 1.002, 1.01, 0, 0):
//   el 0 equal: under both;  el 1: 0.0005 / 1.0005 = 5.0e-4: under both;
//   el 2: 0.002 / 1.002 = 2.0e-3: under 5e-3 only;  el 3: 0.01 / 1.01 = 9.9e-3: under neither;
//   el 4: 0 against 0: under both;  el 5: 2 against 0: under neither.
// share_1e3 = 3 / 6 = 0.5, share_5e3 = 4 / 6. torch's fp64 tolerance (rtol 1e-7, atol 1e-7):
// elements 1, 2, 3 and 5 are outside it (differences of at least 5e-4): 4.
TEST(CompareArrays, RelativeErrorSharesAndTorchToleranceExact) {
  auto r = compare_arrays("t", array_of(h5::DType::F64, {1, 1, 1, 1, 0, 2}),
                          array_of(h5::DType::F64, {1, 1.0005, 1.002, 1.01, 0, 0}));
  EXPECT_EQ(r.share_1e3, 1.0 - 3.0 / 6.0);
  EXPECT_EQ(r.share_5e3, 1.0 - 2.0 / 6.0);
  EXPECT_EQ(r.over_torch, 4);
}

// torch's tolerance for fp32 is rtol 1.3e-6, atol 1e-5: b = 1000, a = b + 2^-6 (0.0156: fp32's
// spacing at 1000 is 2^-14, so a is exact) is outside (0.0156 > 1e-5 + 1.3e-3 = 0.00131);
// a = b + 2^-10 (0.00098) is inside.
TEST(CompareArrays, TorchToleranceFp32Exact) {
  auto out = compare_arrays("t", array_of(h5::DType::F32, {1000 + std::ldexp(1.0, -6)}),
                            array_of(h5::DType::F32, {1000}));
  EXPECT_EQ(out.over_torch, 1);
  auto in = compare_arrays("t", array_of(h5::DType::F32, {1000 + std::ldexp(1.0, -10)}),
                           array_of(h5::DType::F32, {1000}));
  EXPECT_EQ(in.over_torch, 0);
  EXPECT_TRUE(within(in, *parse_tolerance("torch")));
  EXPECT_FALSE(within(in, *parse_tolerance("bitwise")));
  EXPECT_FALSE(within(in, *parse_tolerance("ulp:15")));  // 2^-10 / 2^-14 = 16 ulps
  EXPECT_TRUE(within(in, *parse_tolerance("ulp:16")));
}

// fp16 tensors: 1.0 against 1 + 2^-10 (the next fp16 value) is one ulp; NaN against a number is
// a hard mismatch (ulp "inf", outside every tolerance).
TEST(CompareArrays, Fp16IsComparedInItsOwnUlpsExact) {
  // fp16 bits: 1 = 0x3c00, 1 + 2^-10 = 0x3c01, 0.5 = 0x3800, a quiet NaN 0x7e00.
  auto r = compare_arrays("t", bits_of(h5::DType::F16, {0x3c00, 0x3800}),
                          bits_of(h5::DType::F16, {0x3c01, 0x3800}));
  EXPECT_EQ(r.dtype, "float16");
  EXPECT_EQ(r.ulp_dtype, "fp16");
  EXPECT_EQ(r.max_ulp, 1u);
  EXPECT_EQ(r.wrong, 1);
  auto nan = compare_arrays("t", bits_of(h5::DType::F16, {0x7e00}), bits_of(h5::DType::F16, {0x3c00}));
  EXPECT_EQ(nan.max_ulp, kInfiniteUlp);
  EXPECT_FALSE(within(nan, *parse_tolerance("ulp:1000")));
  EXPECT_FALSE(within(nan, *parse_tolerance("torch")));
}

TEST(Tolerance, PresetsParseExact) {
  EXPECT_EQ(to_string(*parse_tolerance("bitwise")), "bitwise");
  EXPECT_EQ(to_string(*parse_tolerance("torch")), "torch");
  EXPECT_EQ(parse_tolerance("ulp:37")->ulps, 37u);
  for (const char* bad : {"ulp:", "ulp:-1", "ulp:1x", "exact", "ulp:99999999999999999999", ""})
    EXPECT_FALSE(parse_tolerance(bad).has_value()) << bad;
  // The refusal's message comes from the preset table, in the one form every option uses.
  EXPECT_EQ(tolerance_kinds().unknown_message(tolerance_kinds().option(), "exact"),
            "unknown --tol 'exact'; accepted: bitwise, ulp:K, torch");
  EXPECT_FALSE(parse_tolerance("ulp:K").has_value());  // the form's name is not a value
}

TEST(UlpDtypes, TheTableRoundTripsAndRefusesWithTheAcceptedNames) {
  const auto& t = ulp_dtypes();
  EXPECT_EQ(t.names(), "bf16, fp16, fp32, fp64");
  for (const auto d : t.values()) {
    EXPECT_EQ(t.parse(t.name(d)), d);
    EXPECT_STREQ(t.name(d), short_name(d));  // the name printed beside a ulp count
  }
  try {
    t.parse("fp8");
    ADD_FAILURE() << "fp8 parsed";
  } catch (const parity::spec::BadInput& e) {
    EXPECT_STREQ(e.what(), "unknown --ulp-dtype 'fp8'; accepted: bf16, fp16, fp32, fp64");
  }
}

}  // namespace
}  // namespace parity::compare
