// The oracle's arithmetic (compare/oracle.h) on gradients small enough to work out by hand:
// distances, the rounding floor, the micro-batch fit and its names, and each defect named (or
// not) by judge_run. Every expected value is derived in the comment beside it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "compare/oracle.h"

namespace parity::compare {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

TEST(OracleDistance, IsTheRelativeL2DistanceWithZeroAndNonFiniteCases) {
  // ||(0,4) - (3,4)|| = 3, ||(3,4)|| = 5.
  EXPECT_DOUBLE_EQ(relative_distance({0, 4}, {3, 4}), 0.6);
  EXPECT_EQ(relative_distance({0, 0}, {0, 0}), 0);
  EXPECT_EQ(relative_distance({1e-30, 0}, {0, 0}), kInf);  // nothing to be relative to
  EXPECT_EQ(relative_distance({std::nan(""), 4}, {3, 4}), kInf);
  EXPECT_EQ(relative_distance({kInf, 4}, {3, 4}), kInf);
  EXPECT_EQ(relative_scalar(std::nan(""), 1), kInf);
  EXPECT_DOUBLE_EQ(relative_scalar(1.5, 2), 0.25);
}

TEST(OracleDistance, RoundingFloorIsTheSpacingOverRootTwelve) {
  // Four values at 1.0: spacing 2^-23 in fp32, 2^-7 in bf16, 2^-52 in fp64; variance 4 s^2 / 12 over a squared
  // norm of 4 gives s / sqrt(12).
  const std::vector<double> ones(4, 1.0);
  EXPECT_DOUBLE_EQ(rounding_floor(ones, h5::DType::F32), std::ldexp(1.0, -23) / std::sqrt(12.0));
  EXPECT_DOUBLE_EQ(rounding_floor(ones, h5::DType::BF16), std::ldexp(1.0, -7) / std::sqrt(12.0));
  EXPECT_DOUBLE_EQ(rounding_floor(ones, h5::DType::F64), std::ldexp(1.0, -52) / std::sqrt(12.0));
  EXPECT_EQ(rounding_floor({0, 0}, h5::DType::F32), 0);
  // max |g - t| = 2^-22 at a scale of 1.0 (fp32 spacing 2^-23): 2 ulps.
  EXPECT_DOUBLE_EQ(scale_ulps({1 + std::ldexp(1.0, -22), 0.5}, {1, 0.5}, h5::DType::F32), 2);
}

TEST(OracleWeights, NamesMissingScaledDoubledAndCleanWeights) {
  std::vector<double> named;
  EXPECT_EQ(name_weights({1.01, 0.99, 1, 1}, 0.05, named), "");
  EXPECT_EQ(named, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(name_weights({1, 1, 0.002, 1}, 0.05, named), "micro-batch 2 missing");
  EXPECT_EQ(named, (std::vector<double>{1, 1, 0, 1}));
  EXPECT_EQ(name_weights({4.01, 3.99, 4, 4}, 0.05, named),
            "all gradients x 4.00 (the micro-batch count)");
  EXPECT_EQ(named, (std::vector<double>{4, 4, 4, 4}));
  EXPECT_EQ(name_weights({0, 0, 0, 1}, 0.05, named),
            "micro-batches 0, 1, 2 missing (only micro-batch 3 kept)");
  EXPECT_EQ(name_weights({1, 2, 1, 1}, 0.05, named), "micro-batch 1 counted twice");
  EXPECT_EQ(name_weights({1, 0.5, 1, 1}, 0.05, named), "micro-batch 1 weighted 0.50");
  EXPECT_EQ(named, (std::vector<double>{1, 0.5, 1, 1}));
}

// Three tensors, two micro-batches. c0 and c1 are the micro-batches' terms; the truth is their
// sum: a = (3, 5), b = (2, 2, 2), c = (1, 1, 1) (b and c share a shape).
struct Fixture {
  GradLayout layout{{"a", "b", "c"}, {{2}, {3}, {3}}};
  GradSet c0{{{1, 2}, {1, 0, 1}, {0.5, 0.5, 0}}};
  GradSet c1{{{2, 3}, {1, 2, 1}, {0.5, 0.5, 1}}};
  GradSet truth{{{3, 5}, {2, 2, 2}, {1, 1, 1}}};
  std::vector<GradSet> mbs{c0, c1};
  OracleInputs in() const {
    OracleInputs i;
    i.layout = &layout;
    i.truth = &truth;
    i.floor = {1e-6, 1e-6, 1e-6};
    i.per_microbatch = &mbs;
    i.margin = 64;
    return i;
  }
};

TEST(OracleWeights, LeastSquaresRecoversExactWeights) {
  Fixture f;
  GradSet g = f.truth;  // c0 + 0.5 c1
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < g.values[i].size(); ++k)
      g.values[i][k] = f.c0.values[i][k] + 0.5 * f.c1.values[i][k];
  const auto in = f.in();
  const auto w = microbatch_weights(in, g);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(w[0], 1, 1e-12);
  EXPECT_NEAR(w[1], 0.5, 1e-12);
}

TEST(OracleJudge, TheTruthWithinTheFloorIsConsistent) {
  Fixture f;
  GradSet g = f.truth;
  g.values[0][0] *= 1 + 1e-5;  // distance 3e-5/5.83 = 5.1e-6: 5x the floor, under 64x
  const auto r = judge_run(f.in(), g);
  EXPECT_EQ(r.consistent, 3);
  EXPECT_TRUE(r.defects.empty());
  EXPECT_NEAR(r.mb_weights.at(0), 1, 1e-4);
}

TEST(OracleJudge, AMissingMicroBatchIsNamedWithAPerfectFit) {
  Fixture f;
  const auto r = judge_run(f.in(), f.c1);  // micro-batch 0 left out
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].text, "micro-batch 0 missing");
  EXPECT_NEAR(r.defects[0].fit, 1, 1e-12);
  EXPECT_EQ(r.wrong, 3);  // every tensor has a part from micro-batch 0
  EXPECT_EQ(r.tensors[1].verdict, TruthVerdict::Wrong);
}

// A wide floor (a bf16 run's): the run without micro-batch 0 lies within 64 floors of the truth
// on every tensor (distances 0.38, 0.41, 0.41 against a margin of 64 x 0.05 = 3.2), yet the named
// model (weights 0, 1) fits it exactly, so the defect is named, not passed as CONSISTENT.
TEST(OracleJudge, ADefectInsideAWideFloorIsStillNamed) {
  Fixture f;
  auto in = f.in();
  in.floor = {0.05, 0.05, 0.05};
  const auto r = judge_run(in, f.c1);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].text, "micro-batch 0 missing");
  EXPECT_EQ(r.wrong, 3);
  EXPECT_EQ(r.consistent, 0);
}

TEST(OracleJudge, ScaledGradientsAreTheMicroBatchCount) {
  Fixture f;
  GradSet g = f.truth;
  for (auto& v : g.values)
    for (double& x : v) x *= 2;
  const auto r = judge_run(f.in(), g);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].text, "all gradients x 2.00 (the micro-batch count)");
  EXPECT_EQ(r.wrong, 3);
}

TEST(OracleJudge, AZeroedAndASwappedPairAreNamed) {
  Fixture f;
  GradSet zeroed = f.truth;
  zeroed.values[0] = {0, 0};
  auto r = judge_run(f.in(), zeroed);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].text, "gradient of a zeroed");
  EXPECT_EQ(r.wrong, 1);
  EXPECT_EQ(r.consistent, 2);

  GradSet swapped = f.truth;
  std::swap(swapped.values[1], swapped.values[2]);
  r = judge_run(f.in(), swapped);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].text, "gradients of b and c swapped");
  EXPECT_EQ(r.wrong, 2);
}

TEST(OracleJudge, AMissingTermIsFoundAmongCandidatesAndADuplicatedOneToo) {
  Fixture f;
  // Two candidate terms; the run lacks the second (t2) and, separately, holds the first twice.
  Term t1{"deposit one", {{{0.1, 0}, {0, 0, 0}, {0, 0, 0.2}}}};
  Term t2{"deposit two", {{{0, 0.3}, {0.1, 0.1, 0}, {0, 0, 0}}}};
  auto source = [&]() {
    auto left = std::make_shared<std::vector<Term>>(std::vector<Term>{t1, t2});
    return [left](const std::vector<size_t>&, const GradSet&) -> std::optional<Term> {
      if (left->empty()) return std::nullopt;
      Term t = left->front();
      left->erase(left->begin());
      return t;
    };
  };
  GradSet missing = f.truth;
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < missing.values[i].size(); ++k) missing.values[i][k] -= t2.contribution.values[i][k];
  auto r = judge_run(f.in(), missing, source());
  ASSERT_EQ(r.defects.size(), 1u) << (r.notes.empty() ? "" : r.notes[0]);
  EXPECT_EQ(r.defects[0].text, "deposit two missing");
  EXPECT_EQ(r.wrong, 2);  // a and b; c holds none of it

  GradSet both = f.truth;  // t1 twice and t2 missing: a set of two
  for (size_t i = 0; i < 3; ++i)
    for (size_t k = 0; k < both.values[i].size(); ++k)
      both.values[i][k] += t1.contribution.values[i][k] - t2.contribution.values[i][k];
  r = judge_run(f.in(), both, source());
  ASSERT_EQ(r.defects.size(), 1u) << (r.notes.empty() ? "" : r.notes[0]);
  EXPECT_EQ(r.defects[0].text, "deposit one duplicated; deposit two missing");
}

TEST(OracleJudge, UnexplainedAndNonFiniteTensorsAreSuspect) {
  Fixture f;
  GradSet g = f.truth;
  g.values[2] = {1, 1.5, 1};  // not zero, not another tensor, not a micro-batch mix
  g.values[0][1] = std::nan("");
  const auto r = judge_run(f.in(), g);
  EXPECT_EQ(r.tensors[0].verdict, TruthVerdict::Suspect);
  EXPECT_EQ(r.tensors[2].verdict, TruthVerdict::Suspect);
  EXPECT_EQ(r.tensors[1].verdict, TruthVerdict::Consistent);
  EXPECT_EQ(r.suspect, 2);
}

}  // namespace
}  // namespace parity::compare
