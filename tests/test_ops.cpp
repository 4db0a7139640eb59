// Tests for the ops (kernels/ops.h): rms_norm, cross_entropy_sum and causal_attention against
// scalar loops of their formulas (tolerance); embed_tokens is a gather (bitwise).
//
// The bitwise checks are the tests named *Bitwise*; every other test is a tolerance test whose
// bound is derived next to it. All inputs come from fixed seeds.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/mla.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "tests/fd_check.h"

namespace k = parity::kernels;

namespace {

using namespace parity::testing;

// ---------------------------------------------------------------------------------------
// rms_norm against its formula.

class RmsNorm : public ::testing::TestWithParam<at::ScalarType> {};

// Bound, relative per element against the exact value y = w x / sqrt(mean(x^2) + eps):
// mean(x^2) sums D positive terms (no cancellation): relative error <= gamma_{D+2}; the
// reciprocal square root halves it and adds <= 2 roundings; x * r and * w one each. So
// |y - y_exact| <= gamma_{D/2 + 6} |y_exact| <= gamma_{D+8} |y_exact| in the acc dtype. In
// bf16 the statistics run in fp32 and two bf16 roundings follow (the cast of the normalised
// value and the product with w, exact in fp32 and rounded once to bf16):
// (2 u_bf16 + gamma^fp32_{D+8}) (1 + 2 u_bf16) |y_exact|.
TEST_P(RmsNorm, MatchesFormula) {
  const auto dt = GetParam();
  const int64_t rows = 7, D = 64;
  const double eps = 1e-6;
  auto gen = at::detail::createCPUGenerator(9);
  // Row scales from 1e-3 to 1e3 (eps matters for the smallest), and one zero row.
  auto scale = at::pow(10.0, at::linspace(-3, 3, rows, f64())).unsqueeze(-1);
  auto x = (at::randn({rows, D}, gen, f64()) * scale).to(dt);
  x[3].zero_();
  auto w = (1.0 + 0.2 * at::randn({D}, gen, f64())).to(dt);
  auto y = k::rms_norm(x, w, eps);
  ASSERT_EQ(y.scalar_type(), dt);
  ASSERT_EQ(y.sizes(), x.sizes());

  auto xd = x.to(at::kDouble).contiguous(), wd = w.to(at::kDouble).contiguous();
  auto yd = y.to(at::kDouble).contiguous();
  const double* xp = xd.data_ptr<double>();
  const double* wp = wd.data_ptr<double>();
  const double* yp = yd.data_ptr<double>();
  const double rel = dt == at::kDouble   ? gamma(D + 8, kU64)
                     : dt == at::kFloat ? gamma(D + 8, kU32)
                                        : (2 * kUbf16 + gamma(D + 8, kU32)) * (1 + 2 * kUbf16);
  const double u = dt == at::kDouble ? kU64 : dt == at::kFloat ? kU32 : kUbf16;
  int64_t wrong = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    long double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += (long double)xp[r * D + d] * xp[r * D + d];
    const long double inv = 1.0L / std::sqrt(ss / D + (long double)eps);
    for (int64_t d = 0; d < D; ++d) {
      const long double ref = (long double)wp[d] * xp[r * D + d] * inv;
      const double diff = std::abs(yp[r * D + d] - (double)ref);
      if (diff > rel * std::abs((double)ref)) ++wrong;
      if (ref != 0) worst = std::max(worst, diff / std::abs((double)ref) / u);
    }
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << rows * D;
  EXPECT_TRUE(torch::equal(y[3], at::zeros({D}, y.options())));
  std::cout << "[ observed ] rms_norm " << dtype_name(dt) << ": max rel err / u = " << worst
            << " (bound " << rel / u << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNorm,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------------------
// cross_entropy_sum against its formula, and embed_tokens (a pure gather: bitwise).

// Bound: per token the loss is lse - z_label with lse = m + log(sum_v exp(z_v - m)): the
// V positive terms carry a relative error <= gamma_{V+2} (exp and the sum), which the log
// turns into an absolute error of the same size; the subtraction and the sum over the N
// tokens add gamma_{N+1} (|lse| + |z_label|) per token. So
//   |L - L_exact| <= sum_t gamma_{V+N+4} (1 + |lse_t| + |z_t,label|).
class CrossEntropy : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(CrossEntropy, SumMatchesFormula) {
  const auto dt = GetParam();
  const int64_t B = 2, T = 3, V = 50;
  auto gen = at::detail::createCPUGenerator(15);
  auto logits = (3.0 * at::randn({B, T, V}, gen, f64())).to(dt);
  auto labels = at::randint(V, {B, T}, gen, at::TensorOptions().dtype(at::kLong));
  auto loss = k::cross_entropy_sum(logits, labels);
  ASSERT_EQ(loss.dim(), 0);
  ASSERT_EQ(loss.scalar_type(), dt == at::kDouble ? at::kDouble : at::kFloat);
  auto z = logits.to(at::kDouble).reshape({-1, V}).contiguous();
  auto lab = labels.reshape({-1}).contiguous();
  long double ref = 0, mag = 0;
  for (int64_t t = 0; t < B * T; ++t) {
    const double* zt = z.data_ptr<double>() + t * V;
    const long double m = *std::max_element(zt, zt + V);
    long double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp((long double)zt[v] - m);
    const long double lse = m + std::log(se);
    const long double zl = zt[lab.data_ptr<int64_t>()[t]];
    ref += lse - zl;
    mag += 1 + std::abs(lse) + std::abs(zl);
  }
  const double u = dt == at::kDouble ? kU64 : kU32;
  const double bound = gamma(V + B * T + 4, u) * (double)mag;
  const double diff = std::abs(loss.item<double>() - (double)ref);
  EXPECT_LE(diff, bound);
  std::cout << "[ observed ] cross_entropy_sum " << dtype_name(dt) << ": |diff| / (u M) = "
            << diff / (u * (double)mag) << " (bound " << bound / (u * (double)mag) << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossEntropy,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(EmbedTokens, GathersRowsBitwise) {
  auto gen = at::detail::createCPUGenerator(16);
  auto w = at::randn({11, 5}, gen, at::TensorOptions().dtype(at::kFloat));
  auto tokens = at::randint(11, {2, 7}, gen, at::TensorOptions().dtype(at::kLong));
  auto x = k::embed_tokens(tokens, w);
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 7, 5}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 7; ++t)
      EXPECT_TRUE(torch::equal(x[b][t], w[tokens[b][t].item<int64_t>()])) << b << "," << t;
}

// ---------------------------------------------------------------------------------------
// causal_attention against a scalar loop (fp64).
//
// Bound per element: scores are dk-long dots (abs error <= gamma_{dk+1} |q|.|k| scale);
// a logit change delta moves each softmax weight by a relative factor <= 2 delta; then the
// t+1-term weighted sum of v adds gamma_{T+2}. So
//   |o - o_exact| <= (gamma_{T+2} + 2 gamma_{dk+1} max_s |q_t|.|k_s| scale) sum_s p_s |v_s|.
TEST(CausalAttention, MatchesScalarLoopFp64) {
  const int64_t B = 1, H = 2, T = 6, dk = 5, dv = 3;
  const double scale = 1.0 / std::sqrt(double(dk));
  auto gen = at::detail::createCPUGenerator(13);
  auto q = at::randn({B, H, T, dk}, gen, f64());
  auto kk = at::randn({B, H, T, dk}, gen, f64());
  auto v = at::randn({B, H, T, dv}, gen, f64());
  auto o = k::causal_attention(q, kk, v, scale);
  ASSERT_EQ(o.sizes(), (std::vector<int64_t>{B, H, T, dv}));
  auto qa = q.accessor<double, 4>(), ka = kk.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = o.accessor<double, 4>();
  double worst = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<long double> s(t + 1);
      long double smax = -1e300L, z = 0, absqk = 0;
      for (int64_t j = 0; j <= t; ++j) {
        long double dot = 0, ad = 0;
        for (int64_t c = 0; c < dk; ++c) {
          dot += (long double)qa[0][h][t][c] * ka[0][h][j][c];
          ad += std::abs((long double)qa[0][h][t][c] * ka[0][h][j][c]);
        }
        s[j] = dot * scale;
        smax = std::max(smax, s[j]);
        absqk = std::max(absqk, ad * scale);
      }
      for (int64_t j = 0; j <= t; ++j) z += std::exp(s[j] - smax);
      for (int64_t c = 0; c < dv; ++c) {
        long double ref = 0, mag = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const long double p = std::exp(s[j] - smax) / z;
          ref += p * va[0][h][j][c];
          mag += p * std::abs(va[0][h][j][c]);
        }
        const double bound =
            (gamma(T + 2, kU64) + 2 * gamma(dk + 1, kU64) * (double)absqk) * (double)mag;
        const double diff = std::abs(oa[0][h][t][c] - (double)ref);
        EXPECT_LE(diff, bound) << "h " << h << " t " << t << " c " << c;
        worst = std::max(worst, diff / (kU64 * (double)mag));
      }
    }
  std::cout << "[ observed ] causal_attention fp64: max |diff| / (u sum p|v|) = " << worst
            << "\n";
}

}  // namespace
