// Tests for the MoE (kernels/moe.h): finite-difference gradient checks (fp64) with respect to
// the input and every weight, with the top-k selection checked unchanged at every perturbed
// point; and the output against a per-token loop over the chosen experts, no dispatch
// (tolerance).
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

#include "kernels/moe.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "tests/fd_check.h"

namespace k = parity::kernels;

namespace {

using namespace parity::testing;

// ---------------------------------------------------------------------------------------
// MoE.

struct MoeSetup {
  at::Tensor x;  // [B,T,D]
  k::MoeWeights w;
  int64_t top_k;
};

// E = 4 experts, top-2, one shared expert; weights N(0, 0.4^2), router N(0, 0.5^2), and a
// selection bias of +-0.15 so that it changes some selections (checked by the tests that
// rely on it).
MoeSetup moe_setup(at::ScalarType dt, uint64_t seed) {
  const int64_t B = 2, T = 6, D = 16, E = 4, He = 8, Hs = 8;
  auto gen = at::detail::createCPUGenerator(seed);
  auto n = [&](std::vector<int64_t> s, double sd) {
    return (sd * at::randn(s, gen, f64())).to(dt);
  };
  MoeSetup m;
  m.x = n({B, T, D}, 1.0);
  m.w.router = n({E, D}, 0.5);
  m.w.w1 = n({E, He, D}, 0.4);
  m.w.w3 = n({E, He, D}, 0.4);
  m.w.w2 = n({E, D, He}, 0.4);
  m.w.shared_w1 = n({Hs, D}, 0.4);
  m.w.shared_w3 = n({Hs, D}, 0.4);
  m.w.shared_w2 = n({D, Hs}, 0.4);
  m.w.selection_bias = at::tensor({0.15, -0.15, 0.0, 0.15}, f64()).to(dt);
  m.top_k = 2;
  return m;
}

// The experts each token selects, by the header's rule, in fp64, as a sorted [N, k] index.
at::Tensor selection(const at::Tensor& x, const at::Tensor& router, const at::Tensor& bias,
                     int64_t top_k) {
  auto xd = x.to(at::kDouble).reshape({-1, x.size(-1)});
  auto s = at::sigmoid(at::matmul(xd, router.to(at::kDouble).t())) + bias.to(at::kDouble);
  return std::get<0>(std::get<1>(s.topk(top_k, -1)).sort(-1));
}

// The smallest gap, over tokens, between the k-th and (k+1)-th biased score.
double min_selection_gap(const MoeSetup& m) {
  auto xd = m.x.to(at::kDouble).reshape({-1, m.x.size(-1)});
  auto s = at::sigmoid(at::matmul(xd, m.w.router.to(at::kDouble).t())) +
           m.w.selection_bias.to(at::kDouble);
  auto sorted = std::get<0>(s.sort(-1, /*descending=*/true));
  return (sorted.select(1, m.top_k - 1) - sorted.select(1, m.top_k)).min().item<double>();
}

// The inputs select robustly: every top-k gap is >= 1e-3, which a perturbation of
// norm h = 1e-5 of x or of the router (moving a score by at most
// h max(||router||_2, ||x_t||_2) / 4 < 1e-4) cannot close, and the fp32 scores (error
// ~1e-6) cannot flip. And the bias matters: it changes at least one
// token's selection relative to the unbiased scores.
void expect_robust_selection(const MoeSetup& m) {
  ASSERT_GE(min_selection_gap(m), 1e-3) << "pick another seed: a top-k gap is too small";
  auto unbiased = selection(m.x, m.w.router, at::zeros_like(m.w.selection_bias), m.top_k);
  auto biased = selection(m.x, m.w.router, m.w.selection_bias, m.top_k);
  ASSERT_FALSE(torch::equal(unbiased, biased)) << "the selection bias changes no selection";
}

TEST(Moe, CentralDifferencesFp64) {
  auto m = moe_setup(at::kDouble, 23);
  expect_robust_selection(m);
  const auto base = selection(m.x, m.w.router, m.w.selection_bias, m.top_k);
  const auto bias = m.w.selection_bias;
  const int64_t top_k = m.top_k;
  std::vector<at::Tensor> in{m.x,           m.w.router,    m.w.w1,       m.w.w3,
                             m.w.w2,        m.w.shared_w1, m.w.shared_w3, m.w.shared_w2};
  const std::vector<std::string> names{"x",  "router",    "w1",        "w3",
                                       "w2", "shared_w1", "shared_w3", "shared_w2"};
  TensorFn f = [bias, top_k](const std::vector<at::Tensor>& a) {
    k::MoeWeights w{a[1], a[2], a[3], a[4], a[5], a[6], a[7], bias};
    return k::moe(a[0], w, top_k);
  };
  int64_t points = 0, flipped = 0;
  PointHook same_selection = [&](const std::vector<at::Tensor>& a) {
    ++points;
    if (!torch::equal(selection(a[0], a[1], bias, top_k), base)) ++flipped;
  };
  auto r = directional_fd(f, in, names, 24, 3, same_selection);
  EXPECT_EQ(flipped, 0) << "the selection changed at " << flipped << " of " << points
                        << " perturbed points; the difference quotient is meaningless there";
  EXPECT_GT(points, 0);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] moe fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

// MoE against a per-token loop: for each token, its chosen experts (by the header's rule,
// computed here in long double), weights = unbiased scores normalised to sum 1, the
// weighted sum of the experts' SwiGLU plus the shared SwiGLU. No dispatch, no sorting.
//
// Bound per element, the kernel against the exact value (the long double loop's own error
// is < 2^-11 of it). Each term is silu(W1 x) * (W3 x) through W2: D-long dots, silu (a few
// roundings, |silu'| <= 1.1), a product, an He-long dot; the weighted k-slot sum adds
// 2k + 2; the shared expert D + Hs + 6 and one more addition. So with
//   M = sum_j w_j |W2_e| (A1 * A3) + |Ws2| (As1 * As3),  A1 = |W1_e||x|, A3 = |W3_e||x|
// (A1 bounds |W1 x| and |silu(W1 x)|), |y - y_exact| <= 1.1 gamma_{D + Hmax + 2k + 12} M.
// The weights carry a relative error <= 2 gamma_{D+4} Lambda + gamma_{k+4}, Lambda =
// max_e |W_r,e||x| (the score's absolute error gamma_{D+4} Lambda times sigmoid'/sigmoid
// <= 1, twice for the normalisation), which adds that factor times M.
class MoeLoop : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(MoeLoop, MatchesPerTokenLoop) {
  const auto dt = GetParam();
  auto m = moe_setup(dt, 23);
  expect_robust_selection(m);
  auto y = k::moe(m.x, m.w, m.top_k);
  ASSERT_EQ(y.scalar_type(), dt);
  ASSERT_EQ(y.sizes(), m.x.sizes());

  auto D64 = [](const at::Tensor& t) { return t.to(at::kDouble).contiguous(); };
  auto x = D64(m.x).reshape({-1, m.x.size(-1)}), router = D64(m.w.router), w1 = D64(m.w.w1),
       w3 = D64(m.w.w3), w2 = D64(m.w.w2), s1 = D64(m.w.shared_w1), s3 = D64(m.w.shared_w3),
       s2 = D64(m.w.shared_w2), bias = D64(m.w.selection_bias);
  auto yd = D64(y).reshape({-1, m.x.size(-1)});
  const int64_t N = x.size(0), D = x.size(1), E = router.size(0), He = w1.size(1),
                Hs = s1.size(0), top_k = m.top_k;
  const double u = dt == at::kDouble ? kU64 : kU32;
  const double g_body = 1.1 * gamma(D + std::max(He, Hs) + 2 * top_k + 12, u);

  using LD = long double;
  // out[d] += sum_h W2[d][h] silu(W1[h] . x) (W3[h] . x), and the abs magnitude alongside.
  auto swiglu_into = [&](const double* W1, const double* W3, const double* W2, int64_t Hd,
                         const double* xt, LD wt, std::vector<LD>& out, std::vector<LD>& mag) {
    for (int64_t h = 0; h < Hd; ++h) {
      LD a = 0, b = 0, aa = 0, ab = 0;
      for (int64_t c = 0; c < D; ++c) {
        a += (LD)W1[h * D + c] * xt[c];
        b += (LD)W3[h * D + c] * xt[c];
        aa += std::abs((LD)W1[h * D + c] * xt[c]);
        ab += std::abs((LD)W3[h * D + c] * xt[c]);
      }
      const LD act = a / (1 + std::exp(-a)) * b;
      for (int64_t d = 0; d < D; ++d) {
        out[d] += wt * W2[d * Hd + h] * act;
        mag[d] += wt * std::abs((LD)W2[d * Hd + h]) * aa * ab;
      }
    }
  };

  int64_t wrong = 0;
  double worst = 0, bound_rel_max = 0;
  const double* xp = x.data_ptr<double>();
  for (int64_t t = 0; t < N; ++t) {
    const double* xt = xp + t * D;
    std::vector<LD> score(E), lam(E, 0);
    for (int64_t e = 0; e < E; ++e) {
      LD z = 0;
      for (int64_t c = 0; c < D; ++c) {
        z += (LD)router.data_ptr<double>()[e * D + c] * xt[c];
        lam[e] += std::abs((LD)router.data_ptr<double>()[e * D + c] * xt[c]);
      }
      score[e] = 1 / (1 + std::exp(-z));
    }
    std::vector<int64_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return score[a] + bias.data_ptr<double>()[a] > score[b] + bias.data_ptr<double>()[b];
    });
    LD wsum = 0;
    for (int64_t j = 0; j < top_k; ++j) wsum += score[idx[j]];
    std::vector<LD> ref(D, 0), mag(D, 0);
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = idx[j];
      swiglu_into(w1.data_ptr<double>() + e * He * D, w3.data_ptr<double>() + e * He * D,
                  w2.data_ptr<double>() + e * D * He, He, xt, score[e] / wsum, ref, mag);
    }
    swiglu_into(s1.data_ptr<double>(), s3.data_ptr<double>(), s2.data_ptr<double>(), Hs, xt,
                1, ref, mag);
    const double lambda = (double)*std::max_element(lam.begin(), lam.end());
    const double rel = g_body + 2 * gamma(D + 4, u) * lambda + gamma(top_k + 4, u);
    bound_rel_max = std::max(bound_rel_max, rel);
    for (int64_t d = 0; d < D; ++d) {
      const double diff = std::abs(yd[t][d].item<double>() - (double)ref[d]);
      if (diff > rel * (double)mag[d]) ++wrong;
      worst = std::max(worst, diff / (u * (double)mag[d]));
    }
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << N * D;
  std::cout << "[ observed ] moe " << dtype_name(dt) << " vs per-token loop: max |diff| / (u M) = "
            << worst << " (bound " << bound_rel_max / u << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeLoop, ::testing::Values(at::kFloat, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
