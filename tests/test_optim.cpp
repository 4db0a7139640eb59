// Tests for the optimizer and clipping (kernels/optim.h): AdamW's one rounding per step on
// bf16 parameters (torchtitan's training.dtype = "bfloat16"), and the total gradient norm taken
// in fp32 for bf16 gradients, in both reduction orders. Every expected value is worked out by
// hand in the comment next to it.
//
// The tests named *Bitwise* are bitwise: the inputs are chosen so that each expected value is
// exact, or lies far from a rounding boundary of the stored dtype (the margin is stated next
// to it). AdamWLoop.MatchesReadableSequence is a tolerance test; its bound is derived there.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/adamw_loop.h"
#include "kernels/optim.h"

namespace k = parity::kernels;

namespace {

at::Tensor bf16(std::vector<float> v) {
  auto t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kFloat));
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
  return t.to(at::kBFloat16);
}

float value(const at::Tensor& t, int64_t i = 0) { return t[i].item().to<float>(); }

// One AdamW step on a bf16 parameter p = 1 with gradient g = 0.5, lr 0.0019, wd 0.1, betas
// (0.9, 0.95), eps 1e-8, step 1, constant schedule without warmup. In fp32 (torch's fused
// AdamW on bf16 tensors):
//   p * (1 - lr wd)               = 1 - 0.00019                       = 0.99981
//   m = lerp(0, 0.5, 0.1)         = 0.05;   v = 0.05 * 0.5^2          = 0.0125
//   denom = sqrt(0.0125) / sqrt(1 - 0.95) + 1e-8                      = 0.5 + 1e-8
//   step_size = lr / (1 - 0.9)    = 0.019;  update = 0.019 * 0.05 / denom = 0.0019 (1 - 2e-8)
//   p = 0.99981 - 0.0019          = 0.99791
// and stored once in bf16, whose spacing on [0.5, 1) is 2^-8: the neighbours are
// 0.99609375 (distance 0.00182) and 1 (0.00209), so p = 0.99609375; the margin to the
// midpoint 0.998046875 is 1.4e-4, far above fp32's rounding of these few operations (1e-7).
// Rounded op by op in bf16 instead, the decay would give bf16(0.99981) = 1 and then
// bf16(1 - 0.0019) = bf16(0.9981) = 1 (0.0019 from 1, 0.0020 from 0.99609375): the parameter
// would not move.
TEST(AdamWBf16, OneStepRoundsOnceBitwise) {
  k::AdamWConfig c;
  c.lr = 0.0019;
  c.warmup_steps = 0;
  c.schedule = k::LrSchedule::Constant;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  std::vector<at::Tensor> params{bf16({1.0f})};
  k::AdamW opt(c, params);
  opt.step(params, {bf16({0.5f})}, 1);
  ASSERT_EQ(params[0].scalar_type(), at::kBFloat16);
  EXPECT_EQ(value(params[0]), 0.99609375f);

}

// torch's fused CPU AdamW writes the first moment's lerp as one fused multiply-add
// (kernels/adamw_loop.h); the unfused form rounds the product first. On bf16 elements whose
// lerp cancels, the two store different moments. Step 2 of torchtitan's settings (lr 8e-4,
// wd 0.1, betas (0.9, 0.95), eps 1e-8), worked in exact binary arithmetic:
//   w = fp32(1 - 0.9) = 13421773 2^-27 (0.100000001490116...);
//   m = -0.09375 = -3 2^-5 and g = 0.84375 = 27 2^-5 (both bf16), so g - m = 0.9375 exactly;
//   w (g - m) = 13421773 (15/16) 2^-27 = (12582912 + 0.1875) 2^-27 = 0.09375 + 3 2^-31.
//   fused:   m' = fma(w, g - m, m) = 3 2^-31 (exact, and a bf16: 3 has two bits);
//   unfused: fp32(w (g - m)) = 0.09375 (the spacing there is 2^-27, 0.1875 of it is dropped),
//            and m' = -0.09375 + 0.09375 = 0.
// The other two stores, with v = 0 and p = 1:
//   v' = (fp32(0.05) g) g = 0.0355957... = 145.80 2^-12, stored as the bf16 146 2^-12 =
//        0.03564453125 (0.3 of a spacing from the midpoint; fp32's error is 1e-7 relative);
//   p' = 1 (1 - 8e-5) + (-8e-4 / 0.19) m' / (sqrt(v') / sqrt(1 - 0.95^2) + 1e-8)
//      = 0.99992 - 2e-11, stored as 1 (the bf16 neighbours are 1 and 1 - 2^-8; the midpoint is
//        1.9e-3 away).
// With beta1 = 0.1 the lerp takes its other side, fma(w - 1, g - m, g) with w = fp32(0.9) =
// 15099494 2^-24 and w - 1 = -838861 2^-23 (exact): m = -1.96875, g = 0.21875 = 29360128 2^-27,
// g - m = 2.1875 = 35/16, (w - 1)(g - m) = -29360135 2^-27:
//   fused:   m' = -7 2^-27 exactly;
//   unfused: fp32((w - 1)(g - m)) is a tie between -14680067 2^-26 and -14680068 2^-26, rounded
//            to the even -29360136 2^-27, so m' = -8 2^-27 = -2^-24.
TEST(AdamWLoop, FusedLerpRoundsOnceBitwise) {
  namespace al = k::adamw_loop;
  auto bits = [](float x) { return c10::BFloat16(x).x; };
  auto val = [](uint16_t b) { return static_cast<float>(c10::BFloat16(b, c10::BFloat16::from_bits())); };
  const double lr = 8e-4, wd = 0.1, b2 = 0.95;
  auto constants = [&](double b1) {
    const double bc1 = 1 - b1 * b1, bc2 = 1 - b2 * b2;
    return al::Constants{1 - lr * wd, 1 - b1, b2, 1 - b2, std::sqrt(bc2), 1e-8, -lr / bc1};
  };
  uint16_t p = bits(1.0f), g = bits(0.84375f), m = bits(-0.09375f), v = bits(0.0f);
  al::update(constants(0.9), &p, &g, &m, &v, 0, 1);
  EXPECT_EQ(val(m), std::ldexp(3.0f, -31)) << "the unfused lerp gives 0";
  EXPECT_EQ(val(v), 0.03564453125f);
  EXPECT_EQ(val(p), 1.0f);

  p = bits(1.0f), g = bits(0.21875f), m = bits(-1.96875f), v = bits(0.0f);
  al::update(constants(0.1), &p, &g, &m, &v, 0, 1);
  EXPECT_EQ(val(m), std::ldexp(-7.0f, -27)) << "the unfused lerp gives -2^-24";
}

// The total norm of bf16 gradients is taken in fp32. g = [1, 1]: the sum of squares 2 is
// exact and the root is the correctly rounded fp32 sqrt(2) = 1.41421353816986083984375; in bf16
// it would be 1.4140625.
TEST(TotalGradNorm, Bf16GradientsNormInFp32Bitwise) {
  const auto n = k::total_grad_norm({bf16({1.0f, 1.0f})}, k::ClipOrder::Single, {});
  ASSERT_EQ(n.scalar_type(), at::kFloat);
  EXPECT_EQ(n.item<float>(), std::sqrt(2.0f));
}

// --grad-norm-dtype bf16 takes the norm as torch's clip_grad_norm_ does on bf16 gradients:
// in bf16 (spacing 2^-7 on [1, 2)). g = [1, 1]: sqrt(2) = 1.41421356 = 181.02 2^-7, stored as
// 181 2^-7 = 1.4140625; the norm of that single norm is itself. Per rank, with [1, 1] on rank 0
// and [1] on rank 1: 1.4140625^2 = 1.99957275390625 = 255.95 2^-7 rounds to 2; 2 + 1 = 3;
// sqrt(3) = 1.7320508 = 221.70 2^-7 rounds to 222 2^-7 = 1.734375 (in fp32 it would be
// 1.7320508). Every margin is at least 0.02 of a bf16 spacing, far above fp32's accumulation
// error on three terms (1e-7 relative).
TEST(TotalGradNorm, Bf16NormTakenInBf16Bitwise) {
  const auto bf = k::GradNormDtype::BF16;
  const auto n = k::total_grad_norm({bf16({1.0f, 1.0f})}, k::ClipOrder::Single, {}, bf);
  ASSERT_EQ(n.scalar_type(), at::kBFloat16);
  EXPECT_EQ(n.to(at::kFloat).item<float>(), 1.4140625f);
  const auto r = k::total_grad_norm({bf16({1.0f, 1.0f}), bf16({1.0f})}, k::ClipOrder::PerRank,
                                    {0, 1}, bf);
  ASSERT_EQ(r.scalar_type(), at::kBFloat16);
  EXPECT_EQ(r.to(at::kFloat).item<float>(), 1.734375f);
}

// Both orders on [3, 4] and [12] (bf16, exact): single: norms 5 and 12, sqrt(25 + 144) = 13;
// per-rank with ranks {0, 1}: the squares 25 and 144 summed in rank order, root 13.
// A third tensor [10, 12] on rank 0 separates the orders, worked in fp32 by hand:
//   its norm is fl(sqrt(244)) = 15.6204996..., whose square rounds to 244.0000153;
//   single:   sqrt(25 + 144 + 244.0000153) = sqrt(413.0000153) = 20.3224018..., which rounds
//             to the fp32 20.32240104675293 (the neighbours are 2^-19 = 1.9e-6 apart);
//   per-rank: rank 0 is sqrt(25 + 244.0000153) = fl(16.4012203...), whose square rounds to
//             269.0000305; + 144 is 413.0000305, whose root 20.3224022... rounds to the next
//             fp32 up, 20.322402954101562: one ulp above the single order, exactly.
TEST(TotalGradNorm, BothOrdersBitwise) {
  std::vector<at::Tensor> g{bf16({3.0f, 4.0f}), bf16({12.0f})};
  const auto single = k::total_grad_norm(g, k::ClipOrder::Single, {});
  const auto per_rank = k::total_grad_norm(g, k::ClipOrder::PerRank, {0, 1});
  ASSERT_EQ(single.scalar_type(), at::kFloat);
  ASSERT_EQ(per_rank.scalar_type(), at::kFloat);
  EXPECT_EQ(single.item<float>(), 13.0f);
  EXPECT_EQ(per_rank.item<float>(), 13.0f);

  g.push_back(bf16({10.0f, 12.0f}));
  const float want = 20.32240104675293f;
  EXPECT_EQ(k::total_grad_norm(g, k::ClipOrder::Single, {}).item<float>(), want);
  EXPECT_EQ(k::total_grad_norm(g, k::ClipOrder::PerRank, {0, 1, 0}).item<float>(),
            std::nextafter(want, 100.0f));
}

// Clipping scales by min(1, max_norm / (norm + 1e-6)) and keeps the gradients' dtype: with
// max_norm 1e6 the factor clamps to 1 and nothing moves.
TEST(ClipGrads, FactorOneLeavesGradientsBitwise) {
  std::vector<at::Tensor> g{bf16({3.0f, 4.0f}), bf16({12.0f})};
  const auto before = std::vector<at::Tensor>{g[0].clone(), g[1].clone()};
  const auto norm = k::total_grad_norm(g, k::ClipOrder::Single, {});
  k::clip_grads(g, norm, 1e6);
  EXPECT_TRUE(at::equal(g[0], before[0]));
  EXPECT_TRUE(at::equal(g[1], before[1]));
  ASSERT_EQ(g[0].scalar_type(), at::kBFloat16);
}

// The element loop (AdamWConfig::loop, the CPU default) against the readable ATen sequence,
// two steps on 1000 random elements (a tail after every vector width), fp32, bf16 and fp64.
//
// Step 1 starts from zero moments: m = 0 + w g and v = 0 b2 + ((1 - b2) g) g are single
// products whether or not an addition is fused with them, and the rest (the decay, sqrt, the
// divides, the final add) offers nothing to fuse, so step 1 agrees bitwise.
// Step 2, from identical states, may differ where ATen's lerp or addcmul fuses a product into
// its sum. Bound, per element, first order in u (the acc roundoff), each evaluation against
// the exact step: m2 = m1 + w (g - m1) within 3u (|m1| + |g|); v2 (all terms >= 0) within
// 4u v2; den = sqrt(v2) / bc2 + eps within 5u den; the update s m2 / den within
// |s| / den (3u (|m1| + |g|) + 3u |m2|) + 6u |upd|; p2 = p1 decay + upd within
// u (|p1 decay| + |p2|) more. The two differ by at most twice that; in bf16 the stores may
// then round to neighbours, one bf16 spacing 2^-7 |p2| more. The bound is evaluated on fp64
// copies of the inputs, with a factor 1.1 for second-order terms and for m1 and v1 being
// known only to their own rounding (2^-8 relative in bf16).
class AdamWLoop : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(AdamWLoop, MatchesReadableSequence) {
  const auto dt = GetParam();
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  k::AdamWConfig c;
  c.lr = 3e-3;
  c.warmup_steps = 0;
  c.schedule = k::LrSchedule::Constant;
  auto gen = at::detail::createCPUGenerator(77);
  auto p0 = (0.1 * at::randn({1000}, gen, f64)).to(dt);
  auto g1 = (0.01 * at::randn({1000}, gen, f64)).to(dt);
  auto g2 = (0.01 * at::randn({1000}, gen, f64)).to(dt);
  std::vector<at::Tensor> a{p0.clone()}, b{p0.clone()};
  auto cr = c;
  cr.loop = false;
  k::AdamW loop(c, a), readable(cr, b);
  loop.step(a, {g1}, 1);
  readable.step(b, {g1}, 1);
  ASSERT_EQ(a[0].scalar_type(), dt);
  EXPECT_TRUE(at::equal(a[0], b[0])) << "step 1";
  const auto p1 = a[0].to(at::kDouble);
  loop.step(a, {g2}, 2);
  readable.step(b, {g2}, 2);

  const double u = dt == at::kDouble ? 0x1p-53 : 0x1p-24;
  const double w = 1 - c.beta1, s = -c.lr / (1 - c.beta1 * c.beta1);
  const double bc2 = std::sqrt(1 - c.beta2 * c.beta2);
  auto G1 = g1.to(at::kDouble), G2 = g2.to(at::kDouble);
  auto m1 = w * G1, v1 = (1 - c.beta2) * G1 * G1;
  auto m2 = m1 + w * (G2 - m1), v2 = c.beta2 * v1 + (1 - c.beta2) * G2 * G2;
  auto den = at::sqrt(v2) / bc2 + c.eps;
  auto upd = s * m2 / den;
  auto pd = p1 * (1 - c.lr * c.weight_decay);
  auto p2 = pd + upd;
  auto one = std::abs(s) / den * (3 * u * (m1.abs() + G2.abs()) + 3 * u * m2.abs()) +
             6 * u * upd.abs() + u * (pd.abs() + p2.abs());
  auto bound = 1.1 * (2 * one + (dt == at::kBFloat16 ? 0x1p-7 * p2.abs() : 0 * p2));
  auto diff = (a[0].to(at::kDouble) - b[0].to(at::kDouble)).abs();
  EXPECT_LE((diff - bound).max().item<double>(), 0.0);
  std::cout << "[ observed ] step 2, elements that differ: " << diff.ne(0).sum().item<int64_t>()
            << " of 1000\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamWLoop,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) {
                           return std::string(info.param == at::kFloat    ? "fp32"
                                              : info.param == at::kDouble ? "fp64"
                                                                          : "bf16");
                         });

}  // namespace
