// Tests for the optimizer and clipping (kernels/optim.h): AdamW's one rounding per step on
// bf16 parameters (torchtitan's training.dtype = "bfloat16"), and the total gradient norm taken
// in fp32 for bf16 gradients, in both reduction orders. Every expected value is worked out by
// hand in the comment next to it.
//
// Every test here is bitwise (named *Bitwise*): the inputs are chosen so that each expected
// value is exact, or lies far from a rounding boundary of the stored dtype (the margin is
// stated next to it).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

// The total norm of bf16 gradients is taken in fp32. g = [1, 1]: the sum of squares 2 is
// exact and the root is the correctly rounded fp32 sqrt(2) = 1.41421353816986083984375; in bf16
// it would be 1.4140625.
TEST(TotalGradNorm, Bf16GradientsNormInFp32Bitwise) {
  const auto n = k::total_grad_norm({bf16({1.0f, 1.0f})}, k::ClipOrder::Single, {});
  ASSERT_EQ(n.scalar_type(), at::kFloat);
  EXPECT_EQ(n.item<float>(), std::sqrt(2.0f));
}

// Both orders on [3, 4] and [12] (bf16, exact): single: norms 5 and 12, sqrt(25 + 144) = 13;
// per-rank with ranks {0, 1}: the squares 25 and 144 summed in rank order, root 13. A
// third tensor [1, 1] on rank 0 gives single sqrt(25 + 144 + 2) = sqrt(171) and per-rank
// sqrt(sqrt(27)^2 + 144): sqrt(27) is inexact, so the two orders may differ in the last place;
// both must be fp32 and within one ulp of sqrt(171) = 13.076696830622...
TEST(TotalGradNorm, BothOrdersBitwise) {
  std::vector<at::Tensor> g{bf16({3.0f, 4.0f}), bf16({12.0f})};
  const auto single = k::total_grad_norm(g, k::ClipOrder::Single, {});
  const auto per_rank = k::total_grad_norm(g, k::ClipOrder::PerRank, {0, 1});
  ASSERT_EQ(single.scalar_type(), at::kFloat);
  ASSERT_EQ(per_rank.scalar_type(), at::kFloat);
  EXPECT_EQ(single.item<float>(), 13.0f);
  EXPECT_EQ(per_rank.item<float>(), 13.0f);

  g.push_back(bf16({1.0f, 1.0f}));
  const float want = static_cast<float>(std::sqrt(171.0));  // correctly rounded
  const float ulp = std::nextafter(want, 100.0f) - want;
  EXPECT_EQ(k::total_grad_norm(g, k::ClipOrder::Single, {}).item<float>(), want);
  EXPECT_NEAR(k::total_grad_norm(g, k::ClipOrder::PerRank, {0, 1, 0}).item<float>(), want, ulp);
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

}  // namespace
