// The closed form's arithmetic and formulas, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "compare/exact_math.h"

namespace parity::compare {
namespace {

TEST(Dyadic, ArithmeticIsExact) {
  const auto a = Dyadic::from_double(0.375);  // 3/8
  const auto b = Dyadic::from_double(-2.5);   // -5/2
  EXPECT_EQ((a + b).str(), "-17/8");
  EXPECT_EQ((a * b).str(), "-15/16");
  EXPECT_EQ((a - a).str(), "0");
  EXPECT_TRUE((a - a).is_zero());
  EXPECT_EQ(Dyadic(12).str(), "12");
  EXPECT_EQ(Dyadic::pow2(-3).str(), "1/8");
  EXPECT_EQ(Dyadic(6), Dyadic::from_double(6.0));
  // 2^60 + 1 is beyond a double; the sum keeps every bit.
  const auto big = Dyadic::pow2(60) + Dyadic(1);
  EXPECT_EQ(big.str(), "1152921504606846977");
  EXPECT_EQ(big.significand_bits(), 61);
}

TEST(Dyadic, SignificandBitsDecideWhichFormatsHoldAValue) {
  EXPECT_EQ(Dyadic(0).significand_bits(), 0);
  EXPECT_EQ(Dyadic(256).significand_bits(), 1);  // a power of two
  EXPECT_EQ(Dyadic(255).significand_bits(), 8);  // fits bf16
  EXPECT_EQ(Dyadic(257).significand_bits(), 9);  // does not
  EXPECT_EQ(Dyadic::from_double(1.0 + std::ldexp(1.0, -52)).significand_bits(), 53);
  EXPECT_EQ(Dyadic::from_double(0.1).significand_bits(), 52);  // 0x1.999999999999ap-4
  EXPECT_EQ(Dyadic::from_double(static_cast<double>(0.1f)).significand_bits(), 24);
  EXPECT_EQ(Dyadic::from_double(-0.0), Dyadic(0));
  EXPECT_THROW(Dyadic::from_double(NAN), std::invalid_argument);
  // Exact arithmetic gives the value back bit for bit, up to fp64's 53 significand bits.
  EXPECT_EQ(Dyadic::from_double(-17.0 / 8).to_double(), -17.0 / 8);
  EXPECT_EQ(Dyadic::from_double(1.0 + 0x1p-52).to_double(), 1.0 + 0x1p-52);
}

// Two layers, a block each (lpb 1), one token (0, label 0: w = +1), N = 1. Worked by hand:
//   E[0] = (1,2); add_0 = (1,0), read_0 = [2]; add_1 = (0,1), read_1 = [1,-1]; u = 3.
//   forward: s0 = (1,2); x = (1, 2*1) = (1,2); s1 = (1,2); x = (0, 1 + 1*1 - 1*1) = (0,1);
//            y = x + s0 + s1 = (2,5); loss = 5 + 3*2 = 11.
//   Differentiating loss = add1.b + r1[0] e.a + r1[1] add0.a + e.b + add0.b + r0 e.a
//                          + u (add1.a + e.a + add0.a) directly:
//   dE[0] = (r1[0] + r0 + u, 1) = (6,1); dadd_0 = (r1[1] + u, 1) = (2,1); dread_0 = [e.a] = [1];
//   dadd_1 = (u, 1) = (3,1); dread_1 = [e.a, add0.a] = [1,1]; du = y.a = 2; dE[1] = 0.
ExactParams hand_params() {
  ExactParams p;
  p.fqns = {"tok_embeddings.weight", "layers.0.add.weight", "layers.0.read.weight",
            "layers.1.add.weight", "layers.1.read.weight", "output.weight"};
  p.values = {{1, 2, 3, -1}, {1, 0}, {2}, {0, 1}, {1, -1}, {3}};
  return p;
}

std::vector<std::string> strs(const std::vector<Dyadic>& v) {
  std::vector<std::string> out;
  for (const auto& d : v) out.push_back(d.str());
  return out;
}

TEST(ExactModel, MatchesTheHandWorkedExample) {
  const ExactShape shape{2, 1, 2};
  auto p = hand_params();
  const std::vector<ExactMicrobatch> batch{{{0}, {0}}};
  EXPECT_EQ(exact_losses(shape, p, batch, 1).at(0).str(), "11");

  const auto st = exact_step(shape, p, batch, 1, Dyadic::pow2(-1));  // lr 1/2
  EXPECT_EQ(st.loss.str(), "11");
  using V = std::vector<std::string>;
  EXPECT_EQ(strs(st.grads[0]), (V{"6", "1", "0", "0"}));
  EXPECT_EQ(strs(st.grads[1]), (V{"2", "1"}));
  EXPECT_EQ(strs(st.grads[2]), (V{"1"}));
  EXPECT_EQ(strs(st.grads[3]), (V{"3", "1"}));
  EXPECT_EQ(strs(st.grads[4]), (V{"1", "1"}));
  EXPECT_EQ(strs(st.grads[5]), (V{"2"}));
  // p -= g / 2
  EXPECT_EQ(strs(p.values[0]), (V{"-2", "3/2", "3", "-1"}));
  EXPECT_EQ(strs(p.values[5]), (V{"2"}));
}

TEST(ExactModel, AnOddLabelFlipsTheSignAndNScalesIt) {
  const ExactShape shape{2, 1, 2};
  const auto p = hand_params();
  // Token 0 with an odd label: w = -1; N = 4: the loss is -11/4.
  EXPECT_EQ(exact_losses(shape, p, {{{0}, {1}}}, 4).at(0).str(), "-11/4");
}

TEST(ExactModel, RefusesWhatItCannotComputeExactly) {
  const ExactShape shape{2, 1, 2};
  auto p = hand_params();
  EXPECT_THROW(exact_losses(shape, p, {{{0}, {0}}}, 3), std::invalid_argument);  // 1/3
  EXPECT_THROW(exact_losses(shape, p, {{{2}, {0}}}, 1), std::out_of_range);      // vocab 2
}

}  // namespace
}  // namespace parity::compare
