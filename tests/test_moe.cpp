// Tests for the latent MoE (kernels/moe.h): finite-difference gradient checks (fp64) with
// respect to the input and every weight, with the top-k selection checked unchanged at every
// perturbed point; the output against a per-token loop over the chosen experts with no
// dispatch (tolerance); the training forward's selection and counts (bitwise and exact).
// The balancer's estimate is checked against hand-worked histograms in test_torchtitan.
//
// The bitwise checks are the tests named *Bitwise* or *Exact*; every other test is a
// tolerance test whose bound is derived next to it. All inputs come from fixed seeds.
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

#include "kernels/config.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "tests/fd_check.h"

namespace k = parity::kernels;

namespace {

using namespace parity::testing;

// E = 4 experts, top-2, latent L = 6 on D = 16, expert hidden F = 8, one shared expert of
// width Hs = 8; the debugmodel's SiTU-GLU betas and eps.
k::ModelConfig moe_config() {
  k::ModelConfig c;
  c.dim = 16;
  c.n_experts = 4;
  c.top_k = 2;
  c.n_shared = 1;
  c.expert_hidden = 8;
  c.latent_dim = 6;
  c.balance_bins = 50;
  return c;
}

struct MoeSetup {
  at::Tensor x;  // [B,T,D]
  k::MoeWeights w;
  k::MoeBuffers b;
  k::ModelConfig c = moe_config();
  std::vector<at::Tensor> weights() const {
    return {w.gate, w.w13, w.w2, w.shared_w13, w.shared_w2, w.routed_down, w.routed_norm,
            w.routed_up};
  }
};

const std::vector<std::string> kNames{"x",         "gate",        "w13",         "w2",
                                      "shared_w13", "shared_w2",  "routed_down", "routed_norm",
                                      "routed_up"};

k::MoeWeights as_weights(const std::vector<at::Tensor>& a) {
  k::MoeWeights w;
  w.gate = a[0];
  w.w13 = a[1];
  w.w2 = a[2];
  w.shared_w13 = a[3];
  w.shared_w2 = a[4];
  w.routed_down = a[5];
  w.routed_norm = a[6];
  w.routed_up = a[7];
  return w;
}

// Weights N(0, 0.4^2) (pre-activations O(1)), router N(0, 0.5^2), routed_norm 1 + N(0, 0.2^2),
// and an expert bias of +-0.15 so that it changes some selections (checked by the tests that
// rely on it).
MoeSetup moe_setup(at::ScalarType dt, uint64_t seed) {
  MoeSetup m;
  const auto& c = m.c;
  const int64_t B = 2, T = 6, D = c.dim, E = c.n_experts, F = c.expert_hidden, L = c.latent_dim,
                Hs = c.n_shared * F;
  auto gen = at::detail::createCPUGenerator(seed);
  auto n = [&](std::vector<int64_t> s, double sd) {
    return (sd * at::randn(s, gen, f64())).to(dt);
  };
  m.x = n({B, T, D}, 1.0);
  m.w.gate = n({E, D}, 0.5);
  m.w.w13 = n({E, 2, F, L}, 0.6);
  m.w.w2 = n({E, L, F}, 0.4);
  m.w.shared_w13 = n({2, Hs, D}, 0.4);
  m.w.shared_w2 = n({D, Hs}, 0.4);
  m.w.routed_down = n({L, D}, 0.4);
  m.w.routed_norm = (1.0 + 0.2 * at::randn({L}, gen, f64())).to(dt);
  m.w.routed_up = n({D, L}, 0.4);
  m.b.expert_bias = at::tensor({0.15, -0.15, 0.0, 0.15}, at::TensorOptions().dtype(at::kFloat));
  m.b.tokens_per_expert = at::zeros({E}, at::TensorOptions().dtype(at::kFloat));
  m.b.histogram = at::zeros({E, c.balance_bins}, at::TensorOptions().dtype(at::kInt));
  return m;
}

// The experts each token selects, by the header's rule, in fp64, as a sorted [N, k] index.
at::Tensor selection(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& bias,
                     int64_t top_k) {
  auto xd = x.to(at::kDouble).reshape({-1, x.size(-1)});
  auto s = at::sigmoid(at::matmul(xd, gate.to(at::kDouble).t())) + bias.to(at::kDouble);
  return std::get<0>(std::get<1>(s.topk(top_k, -1)).sort(-1));
}

// The smallest gap, over tokens, between the k-th and (k+1)-th biased score.
double min_selection_gap(const MoeSetup& m) {
  auto xd = m.x.to(at::kDouble).reshape({-1, m.x.size(-1)});
  auto s = at::sigmoid(at::matmul(xd, m.w.gate.to(at::kDouble).t())) +
           m.b.expert_bias.to(at::kDouble);
  auto sorted = std::get<0>(s.sort(-1, /*descending=*/true));
  const int64_t K = m.c.top_k;
  return (sorted.select(1, K - 1) - sorted.select(1, K)).min().item<double>();
}

// The inputs select robustly: every top-k gap is >= 1e-3, which a perturbation of norm
// h = 1e-5 of x or of the router (moving a score by at most h max(||gate||_2, ||x_t||_2) / 4
// < 1e-4) cannot close, and the fp32 scores (error ~1e-6) cannot flip. And the bias matters:
// it changes at least one token's selection relative to the unbiased scores.
void expect_robust_selection(const MoeSetup& m) {
  ASSERT_GE(min_selection_gap(m), 1e-3) << "pick another seed: a top-k gap is too small";
  auto unbiased = selection(m.x, m.w.gate, at::zeros_like(m.b.expert_bias), m.c.top_k);
  auto biased = selection(m.x, m.w.gate, m.b.expert_bias, m.c.top_k);
  ASSERT_FALSE(torch::equal(unbiased, biased)) << "the expert bias changes no selection";
}

TEST(LatentMoe, CentralDifferencesFp64) {
  auto m = moe_setup(at::kDouble, 23);
  expect_robust_selection(m);
  const auto base = selection(m.x, m.w.gate, m.b.expert_bias, m.c.top_k);
  const auto b = m.b;
  const auto c = m.c;
  std::vector<at::Tensor> in{m.x};
  for (const auto& t : m.weights()) in.push_back(t);
  // A forward-only pass: the same selection as training (SelectionBitwise below), and the
  // buffers are left alone at every perturbed point.
  TensorFn f = [b, c](const std::vector<at::Tensor>& a) {
    return k::moe(a[0], as_weights({a.begin() + 1, a.end()}), b, c, /*training=*/false);
  };
  int64_t points = 0, flipped = 0;
  PointHook same_selection = [&](const std::vector<at::Tensor>& a) {
    ++points;
    if (!torch::equal(selection(a[0], a[1], b.expert_bias, c.top_k), base)) ++flipped;
  };
  auto r = directional_fd(f, in, kNames, 24, 3, same_selection);
  EXPECT_EQ(flipped, 0) << "the selection changed at " << flipped << " of " << points
                        << " perturbed points; the difference quotient is meaningless there";
  EXPECT_GT(points, 0);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] latent moe fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

// The training forward chooses with the sorted top-(k+1)'s first k, a forward-only pass with
// the top-k: the same experts in the same order, so the outputs are bitwise equal. The
// training pass counts every routed token (sum N k, exact in fp32) and puts every (token,
// expert) pair's required bias into the histogram (N per expert, exact integers).
TEST(LatentMoe, TrainingSelectionBitwiseAndCountsExact) {
  auto m = moe_setup(at::kFloat, 23);
  auto y_eval = k::moe(m.x, m.w, m.b, m.c, /*training=*/false);
  EXPECT_EQ(m.b.histogram.sum().item<int64_t>(), 0) << "a forward-only pass observed";
  EXPECT_EQ(m.b.tokens_per_expert.sum().item<double>(), 0.0);
  auto y_train = k::moe(m.x, m.w, m.b, m.c, /*training=*/true);
  EXPECT_TRUE(torch::equal(y_eval, y_train));
  const int64_t N = m.x.numel() / m.c.dim;
  EXPECT_EQ(m.b.tokens_per_expert.sum().item<double>(), double(N * m.c.top_k));
  // tokens_per_expert[e] = how many tokens chose e, by the fp64 selection.
  auto chosen = selection(m.x, m.w.gate, m.b.expert_bias, m.c.top_k).reshape({-1});
  auto want = at::bincount(chosen, {}, m.c.n_experts).to(at::kFloat);
  EXPECT_TRUE(torch::equal(m.b.tokens_per_expert, want));
  auto per_expert = m.b.histogram.sum(1, false, at::kLong);
  EXPECT_TRUE(torch::equal(per_expert, at::full({m.c.n_experts}, N, at::kLong)));
}

// Dispatch and combine have no atomics and a fixed order: the output and the input gradient
// are bitwise equal with 1 and 4 intra-op threads.
TEST(LatentMoe, ThreadCountBitwise) {
  auto run = [](int threads) {
    k::pin_threads(threads);
    auto m = moe_setup(at::kFloat, 23);
    auto x = m.x.clone().requires_grad_(true);
    auto y = k::moe(x, m.w, m.b, m.c, true);
    y.pow(2).sum().backward();
    return std::make_pair(y.detach(), x.grad());
  };
  auto [y1, g1] = run(1);
  auto [y4, g4] = run(4);
  k::pin_threads(1);
  EXPECT_TRUE(torch::equal(y1, y4));
  EXPECT_TRUE(torch::equal(g1, g4));
}

// The latent MoE against a per-token loop: for each token, its chosen experts (by the
// header's rule, in long double), weights = unbiased scores / (their sum + 1e-20), the
// weighted sum of the experts' SiTU-GLU on the latent z = routed_down x, then
// routed_up(RMSNorm(., routed_norm)), plus the shared SiTU-GLU on x. No dispatch, no sorting.
//
// Bound per element against the exact value (the long double loop's own error is
// negligible). SiTU-GLU's halves obey |A(a)| <= |a|, |A'| <= 1.1 and |B(u)| <= |u|, |B'| <= 1,
// so every expert term behaves like a SwiGLU term of the previous MoE test:
//   routed_l: |r - r_exact| <= e_l = (1.1 g1 + w_err) M_l,
//     M_l = sum_j w_j |W2_e| (Ma * Mu), Ma = |W13_e,0| Mz, Mu = |W13_e,1| Mz, Mz = |Wd||x|,
//     g1 = gamma_{D + L + F + 2k + 16} (the down, gate/up and w2 dots, SiTU's 12 roundings,
//     the weight multiply, the k-slot sum), w_err = 2 gamma_{D+4} Lambda + gamma_{k+4} the
//     weights' relative error (Lambda = max_e |gate_e||x|, as before);
//   RMSNorm: n = g r / rms(r), whose Jacobian has 2-norm <= max|g| sqrt(L) / ||r||_2, plus its
//     own rounding gamma_{L+8} |n|:  ||dn||_2 <= max|g| sqrt(L) ||e||_2 / ||r||_2 + gamma_{L+8} ||n||_2;
//   routed_up: |dy_d| <= ||Wu_d||_2 ||dn||_2 + gamma_L (|Wu||n|)_d;
//   shared: 1.1 gamma_{D + Hs + 14} (|Ws2| (|Ws13_0||x| * |Ws13_1||x|))_d;
//   the final sum: gamma_1 (|y_routed| + |y_shared|).
class LatentMoeLoop : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(LatentMoeLoop, MatchesPerTokenLoop) {
  const auto dt = GetParam();
  auto m = moe_setup(dt, 23);
  expect_robust_selection(m);
  auto y = k::moe(m.x, m.w, m.b, m.c, /*training=*/false);
  ASSERT_EQ(y.scalar_type(), dt);
  ASSERT_EQ(y.sizes(), m.x.sizes());

  using LD = long double;
  auto D64 = [](const at::Tensor& t) { return t.to(at::kDouble).contiguous(); };
  auto x = D64(m.x).reshape({-1, m.x.size(-1)}), gate = D64(m.w.gate), w13 = D64(m.w.w13),
       w2 = D64(m.w.w2), s13 = D64(m.w.shared_w13), s2 = D64(m.w.shared_w2),
       down = D64(m.w.routed_down), rnorm = D64(m.w.routed_norm), up = D64(m.w.routed_up),
       bias = D64(m.b.expert_bias);
  auto yd = D64(y).reshape({-1, m.x.size(-1)});
  const auto& c = m.c;
  const int64_t N = x.size(0), D = c.dim, E = c.n_experts, F = c.expert_hidden,
                L = c.latent_dim, Hs = c.n_shared * F, K = c.top_k;
  const double u = dt == at::kDouble ? kU64 : kU32;
  auto P = [](const at::Tensor& t) { return t.data_ptr<double>(); };
  auto A = [](LD a) { return 4 * std::tanh(a / 4) / (1 + std::exp(-a)); };
  auto Bf = [](LD v) { return 25 * std::tanh(v / 25); };
  // out += wt * W2 situ(W13[0] in, W13[1] in) for a [2,H,I] w13 and an [O,H] w2; mag gets
  // the same with absolute values (Ma * Mu through |W2|), from the input's magnitude.
  auto situ_into = [&](const double* W13, const double* W2, int64_t H, int64_t I, int64_t O,
                       const std::vector<LD>& in, const std::vector<LD>& in_mag, LD wt,
                       std::vector<LD>& out, std::vector<LD>& mag) {
    for (int64_t h = 0; h < H; ++h) {
      LD a = 0, v = 0, ma = 0, mv = 0;
      for (int64_t i = 0; i < I; ++i) {
        a += (LD)W13[h * I + i] * in[i];
        v += (LD)W13[(H + h) * I + i] * in[i];
        ma += std::abs((LD)W13[h * I + i]) * in_mag[i];
        mv += std::abs((LD)W13[(H + h) * I + i]) * in_mag[i];
      }
      const LD act = A(a) * Bf(v);
      for (int64_t o = 0; o < O; ++o) {
        out[o] += wt * W2[o * H + h] * act;
        mag[o] += wt * std::abs((LD)W2[o * H + h]) * ma * mv;
      }
    }
  };

  const double g1 = gamma(D + L + F + 2 * K + 16, u), g_norm = gamma(L + 8, u),
               g_up = gamma(L, u), g_shared = gamma(D + Hs + 14, u), g_sum = gamma(1, u);
  LD gmax = 0;
  for (int64_t l = 0; l < L; ++l) gmax = std::max(gmax, std::abs((LD)P(rnorm)[l]));
  int64_t wrong = 0;
  double worst = 0;
  for (int64_t t = 0; t < N; ++t) {
    std::vector<LD> xt(P(x) + t * D, P(x) + (t + 1) * D), xmag(D);
    for (int64_t d = 0; d < D; ++d) xmag[d] = std::abs(xt[d]);
    // Router and selection.
    std::vector<LD> score(E);
    LD lambda = 0;
    for (int64_t e = 0; e < E; ++e) {
      LD z = 0, lam = 0;
      for (int64_t d = 0; d < D; ++d) {
        z += (LD)P(gate)[e * D + d] * xt[d];
        lam += std::abs((LD)P(gate)[e * D + d] * xt[d]);
      }
      score[e] = 1 / (1 + std::exp(-z));
      lambda = std::max(lambda, lam);
    }
    std::vector<int64_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return score[a] + P(bias)[a] > score[b] + P(bias)[b];
    });
    LD wsum = 0;
    for (int64_t j = 0; j < K; ++j) wsum += score[idx[j]];
    // The latent and the routed experts.
    std::vector<LD> z(L, 0), zmag(L, 0);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t d = 0; d < D; ++d) {
        z[l] += (LD)P(down)[l * D + d] * xt[d];
        zmag[l] += std::abs((LD)P(down)[l * D + d]) * xmag[d];
      }
    std::vector<LD> r(L, 0), rmag(L, 0);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = idx[j];
      situ_into(P(w13) + e * 2 * F * L, P(w2) + e * L * F, F, L, L, z, zmag,
                score[e] / (wsum + 1e-20L), r, rmag);
    }
    // RMSNorm and routed_up, with the error carried as in the header.
    const double w_err = 2 * gamma(D + 4, u) * (double)lambda + gamma(K + 4, u);
    LD ss = 0, e2 = 0;
    for (int64_t l = 0; l < L; ++l) {
      ss += r[l] * r[l];
      const LD el = (1.1L * g1 + w_err) * rmag[l];
      e2 += el * el;
    }
    const LD inv = 1 / std::sqrt(ss / L + (LD)c.norm_eps);
    std::vector<LD> nrm(L);
    LD n2 = 0;
    for (int64_t l = 0; l < L; ++l) {
      nrm[l] = (LD)P(rnorm)[l] * r[l] * inv;
      n2 += nrm[l] * nrm[l];
    }
    const LD dn = gmax * std::sqrt((LD)L) * std::sqrt(e2) / std::sqrt(ss) + g_norm * std::sqrt(n2);
    std::vector<LD> ys(D, 0), smag(D, 0);
    situ_into(P(s13), P(s2), Hs, D, D, xt, xmag, 1, ys, smag);
    for (int64_t d = 0; d < D; ++d) {
      LD yr = 0, wrow = 0, upmag = 0;
      for (int64_t l = 0; l < L; ++l) {
        const LD w = P(up)[d * L + l];
        yr += w * nrm[l];
        wrow += w * w;
        upmag += std::abs(w * nrm[l]);
      }
      const LD ref = yr + ys[d];
      const LD bound = std::sqrt(wrow) * dn + g_up * upmag + 1.1L * g_shared * smag[d] +
                       g_sum * (std::abs(yr) + std::abs(ys[d]));
      const double diff = std::abs(P(yd)[t * D + d] - (double)ref);
      if (diff > (double)bound) ++wrong;
      worst = std::max(worst, diff / (double)bound);
    }
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << N * D;
  std::cout << "[ observed ] latent moe " << dtype_name(dt)
            << " vs per-token loop: max |diff| / bound = " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LatentMoeLoop, ::testing::Values(at::kFloat, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
