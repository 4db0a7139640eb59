// Tests for the ops, MLA, MoE and the whole model (kernels/ops.h, mla.h, moe.h, model.h).
//
//   * rms_norm, cross_entropy_sum and causal_attention against scalar loops of their
//     formulas (tolerance); embed_tokens is a gather (bitwise).
//   * mla against its DESIGN composition (fp64, tolerance).
//   * Finite-difference gradient checks (fp64) of mla and moe w.r.t. their input and every
//     weight; for MoE the top-k selection is checked unchanged at every perturbed point.
//   * MoE output against a per-token loop over the chosen experts, no dispatch (tolerance).
//   * Model (flavor tiny): the layer wiring equals the DESIGN pseudo-code (bitwise);
//     causality (changing token t leaves the logits at positions < t unchanged up to
//     reduction order, fp64); and in fp64 the loss and parameter gradients of a 2-row
//     batch equal the sums over the rows run one at a time.
//
// The bitwise checks are the tests named *Bitwise*; every other test is a tolerance test
// whose bound is derived next to it. All inputs come from fixed seeds.
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
#include "kernels/mla.h"
#include "kernels/model.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "tests/fd_check.h"
#include "kernels/params.h"
#include "kernels/threads.h"

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

// ---------------------------------------------------------------------------------------
// MLA finite differences (fp64).

TEST(Mla, CentralDifferencesFp64) {
  const int64_t B = 2, T = 6, D = 16;
  const k::MlaDims d{/*n_heads=*/2, /*q_lora=*/8, /*kv_lora=*/8, /*qk_nope=*/4,
                     /*qk_rope=*/4, /*v_head=*/4, /*norm_eps=*/1e-6};
  const int64_t H = d.n_heads, dk = d.qk_nope + d.qk_rope;
  auto gen = at::detail::createCPUGenerator(17);
  auto n = [&](std::vector<int64_t> s, double sd) { return sd * at::randn(s, gen, f64()); };
  // Projections N(0, 0.4^2): scores and gates O(1), away from the linear regime.
  std::vector<at::Tensor> in{n({B, T, D}, 1.0),
                             n({d.q_lora, D}, 0.4),
                             1.0 + n({d.q_lora}, 0.2),
                             n({H * dk, d.q_lora}, 0.4),
                             n({d.kv_lora + d.qk_rope, D}, 0.4),
                             1.0 + n({d.kv_lora}, 0.2),
                             n({H * (d.qk_nope + d.v_head), d.kv_lora}, 0.4),
                             n({H * d.v_head, D}, 0.4),
                             n({D, H * d.v_head}, 0.4)};
  const std::vector<std::string> names{"x",       "wq_a",  "q_norm", "wq_b", "wkv_a",
                                       "kv_norm", "wkv_b", "gate",   "wo"};
  TensorFn f = [d](const std::vector<at::Tensor>& a) {
    k::MlaWeights w{a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]};
    return k::mla(a[0], w, d);
  };
  auto r = directional_fd(f, in, names, 18);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] mla fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

// MLA against its DESIGN composition, re-derived here from the text (fp64): RMSNorm as
// w * x / sqrt(mean(x^2) + eps), the causal softmax written out with an explicit mask.
//
// Bound: both evaluations are chains of at most six contractions (q_lora, dk, kv_lora,
// T, H*v, D long, all <= 16 here) with a few element-wise ops each, so each is within
// gamma_{6*16+30} ~ 1.4e-14 of the exact value relative to the absolute-value magnitude;
// the max-norm relative figure can exceed that by the cancellation factor of the last
// projection, sum|W||a| / max|y| (< 30 for these weights), so 1e-12 leaves a factor > 2.
// A wrong formula (the rope part not shared, the scale of nope only, the gate after wo)
// moves the output by O(1).
TEST(Mla, MatchesDesignCompositionFp64) {
  const int64_t B = 2, T = 7, D = 16;
  const k::MlaDims d{2, 8, 8, 4, 4, 4, 1e-6};
  const int64_t H = d.n_heads, dk = d.qk_nope + d.qk_rope;
  auto gen = at::detail::createCPUGenerator(19);
  auto n = [&](std::vector<int64_t> s, double sd) { return sd * at::randn(s, gen, f64()); };
  auto x = n({B, T, D}, 1.0);
  k::MlaWeights w{n({d.q_lora, D}, 0.4),         1.0 + n({d.q_lora}, 0.2),
                  n({H * dk, d.q_lora}, 0.4),     n({d.kv_lora + d.qk_rope, D}, 0.4),
                  1.0 + n({d.kv_lora}, 0.2),      n({H * (d.qk_nope + d.v_head), d.kv_lora}, 0.4),
                  n({H * d.v_head, D}, 0.4),      n({D, H * d.v_head}, 0.4)};
  auto lin = [](const at::Tensor& a, const at::Tensor& W) { return at::matmul(a, W.t()); };
  auto rms = [&](const at::Tensor& a, const at::Tensor& g) {
    return g * a / at::sqrt(a.pow(2).mean(-1, true) + d.norm_eps);
  };
  auto q = lin(rms(lin(x, w.wq_a), w.q_norm), w.wq_b).reshape({B, T, H, dk});
  auto kv_a = lin(x, w.wkv_a);
  auto latent = kv_a.slice(-1, 0, d.kv_lora);
  auto k_rope = kv_a.slice(-1, d.kv_lora, d.kv_lora + d.qk_rope);       // [B,T,rope]
  auto kv = lin(rms(latent, w.kv_norm), w.wkv_b).reshape({B, T, H, d.qk_nope + d.v_head});
  auto k_nope = kv.slice(-1, 0, d.qk_nope);
  auto v = kv.slice(-1, d.qk_nope, d.qk_nope + d.v_head);
  auto kk = at::cat({k_nope, k_rope.unsqueeze(2).expand({B, T, H, d.qk_rope})}, -1);
  auto scores = at::einsum("bthc,bshc->bhts", {q, kk}) / std::sqrt(double(dk));
  auto future = at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1);
  auto p = at::softmax(scores.masked_fill(future, -INFINITY), -1);
  auto attn = at::einsum("bhts,bshc->bthc", {p, v}).reshape({B, T, H * d.v_head});
  auto ref = lin(attn * at::sigmoid(lin(x, w.gate)), w.wo);

  auto y = k::mla(x, w, d);
  ASSERT_EQ(y.sizes(), ref.sizes());
  const double e = ((y - ref).abs().max() / ref.abs().max()).item<double>();
  EXPECT_LE(e, 1e-12);
  std::cout << "[ observed ] mla fp64 vs DESIGN composition: " << e << " (bound 1e-12)\n";
}

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

// ---------------------------------------------------------------------------------------
// The whole model, flavor tiny.

// tiny's parameters from init_params(cfg, 0) in dtype dt, with every AttnRes pseudo-query
// (*_res_proj.weight, zero at init) replaced by N(0, 0.5^2) so the reads are not uniform.
k::NamedTensors tiny_params(const k::ModelConfig& cfg, at::ScalarType dt) {
  auto p = k::init_params(cfg, 0);
  auto gen = at::detail::createCPUGenerator(31);
  std::vector<at::Tensor> ts;
  for (size_t i = 0; i < p.size(); ++i) {
    const auto& name = p.names()[i];
    const bool pseudo_query = name.find("_res_proj.weight") != std::string::npos;
    ts.push_back(pseudo_query ? 0.5 * at::randn(p[i].sizes(), gen, f64()) : p[i]);
    ts.back() = ts.back().to(dt);
  }
  return k::NamedTensors(p.names(), ts);
}

k::NamedTensors cast(const k::NamedTensors& t, at::ScalarType dt) {
  std::vector<at::Tensor> ts;
  for (auto& x : t.tensors()) ts.push_back(x.to(dt));
  return k::NamedTensors(t.names(), ts);
}

at::Tensor logits_of(const k::Model& model, const k::NamedTensors& w, const k::NamedTensors& b,
                     const at::Tensor& tokens) {
  auto s = model.embed(w, tokens);
  for (int l = 0; l < model.config().n_layers; ++l) s = model.layer(l, w, b, s);
  return model.head_logits(w, s);
}

// The layer wiring of DESIGN.md section 4, re-derived here from its pseudo-code and run
// with the kernels' own ops and arguments (fp32, tiny, all 17 layers and the head): the
// loss is bitwise equal to Model::loss_sum, since the same ops run on the same values in
// the same order. A wiring slip (the stack committed before the read, prefix not reset
// when a block opens, the FFN reading the wrong stack) changes the loss by O(1).
at::Tensor loss_by_design(const k::ModelConfig& c, const k::NamedTensors& w,
                          const k::NamedTensors& buffers, const at::Tensor& tokens,
                          const at::Tensor& labels) {
  auto W = [&](const std::string& n) { return w.at(n); };
  auto x = k::embed_tokens(tokens, W("tok_embeddings.weight"));
  auto stack = x.new_empty({x.size(0), x.size(1), 0, x.size(2)});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "attention.";
    const bool opens = l % c.layers_per_block == 0;
    auto prefix = x;
    if (stack.size(2) > 0)
      x = k::attn_res(stack, prefix, W(p + "attn_res_proj.weight"),
                      W(p + "attn_res_norm.weight"), c.attn_res_eps);
    if (opens) stack = at::cat({stack, prefix.unsqueeze(2)}, 2);
    auto hin = k::rms_norm(x, W(p + "attention_norm.weight"), c.norm_eps);
    at::Tensor h;
    if (l % 4 == 3 || l == c.n_layers - 1) {  // MLA layers of the (3 KDA + 1 MLA) pattern
      h = k::mla(hin,
                 {W(a + "wq_a.weight"), W(a + "q_norm.weight"), W(a + "wq_b.weight"),
                  W(a + "wkv_a.weight"), W(a + "kv_norm.weight"), W(a + "wkv_b.weight"),
                  W(a + "gate.weight"), W(a + "wo.weight")},
                 {c.n_heads, c.q_lora, c.kv_lora, c.qk_nope, c.qk_rope, c.v_head, c.norm_eps});
    } else {
      h = k::kda(hin,
                 {W(a + "q_proj.weight"), W(a + "k_proj.weight"), W(a + "v_proj.weight"),
                  W(a + "q_conv.weight"), W(a + "k_conv.weight"), W(a + "v_conv.weight"),
                  W(a + "b_proj.weight"), W(a + "f_a.weight"), W(a + "f_b.weight"),
                  W(a + "A_log"), W(a + "dt_bias"), W(a + "o_norm.weight"),
                  W(a + "out_gate.weight"), W(a + "o_proj.weight")},
                 {c.n_heads, c.kda_head, c.kda_conv, c.kda_chunk, c.norm_eps});
    }
    prefix = opens ? h : prefix + h;
    h = k::attn_res(stack, prefix, W(p + "ffn_res_proj.weight"), W(p + "ffn_res_norm.weight"),
                    c.attn_res_eps);
    h = k::rms_norm(h, W(p + "ffn_norm.weight"), c.norm_eps);
    if (l == 0) {
      h = k::swiglu(h, W(p + "feed_forward.w1.weight"), W(p + "feed_forward.w3.weight"),
                    W(p + "feed_forward.w2.weight"));
    } else {
      k::MoeWeights mw{W(p + "moe.router.weight"),     W(p + "moe.experts.w1"),
                       W(p + "moe.experts.w3"),        W(p + "moe.experts.w2"),
                       W(p + "moe.shared.w1.weight"),  W(p + "moe.shared.w3.weight"),
                       W(p + "moe.shared.w2.weight"),  buffers.at(p + "moe.selection_bias")};
      h = k::moe(h, mw, c.top_k);
    }
    x = prefix + h;
  }
  auto h = k::attn_res(stack, x, W("output_res_proj.weight"), W("output_res_norm.weight"),
                       c.attn_res_eps);
  auto logits = k::project(k::rms_norm(h, W("norm.weight"), c.norm_eps), W("output.weight"));
  EXPECT_EQ(stack.size(2), c.n_blocks());
  return k::cross_entropy_sum(logits, labels);
}

TEST(ModelWiring, LossEqualsDesignPseudoCodeBitwise) {
  auto cfg = k::flavor("tiny");
  ASSERT_GT(cfg.n_shared, 0);
  auto w = tiny_params(cfg, at::kFloat);
  auto b = k::init_buffers(cfg);
  auto gen = at::detail::createCPUGenerator(45);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {2, 16}, gen, li);
  auto labels = at::randint(cfg.vocab, {2, 16}, gen, li);
  auto ref = loss_by_design(cfg, w, b, tokens, labels);
  auto loss = k::Model(cfg).loss_sum(w, b, tokens, labels);
  EXPECT_TRUE(torch::equal(loss, ref))
      << "model " << loss.item<double>() << " vs design " << ref.item<double>();
}

// Causality: changing token t must not change the logits at positions < t, and must change
// them at positions >= t (so the test can fail).
//
// Not bitwise: the rows of a position < t go through the same ops on the same values, but
// the MoE runs each expert on the run of tokens that chose it, and a change at t can alter
// how many tokens an expert gets; a GEMM over a 1-row segment takes a different BLAS path
// (gemv) than over several rows and rounds differently (measured on this BLAS: rows of
// x @ W^T differ in the last bits between M = 1 and M >= 2). So earlier positions may move
// by reduction-order differences only. Bound, fp64, relative to max |logits|: every op is
// a contraction of depth <= 64 (dim 32, dense hidden 64, H*K 32, T 16) within
// 2 gamma_64 = 1.4e-14 of the exact value in the abs-value scale; tiny runs <= 16 such ops
// per layer over 17 layers and the head, and the normalised residual reads keep the
// per-layer growth O(1): 18 * 16 * 2 gamma_64 = 4.1e-12. A leak (a mask off by one, a chunk
// reading the next chunk) moves earlier logits by O(1e-2) or more. Run for t inside a chunk
// (5) and at a chunk start (8; tiny's chunk is 8), with both AttnRes and both KDA forms.
TEST(ModelCausality, LaterTokenLeavesEarlierLogitsFp64) {
  auto cfg = k::flavor("tiny");
  ASSERT_EQ(cfg.n_layers, 17);
  ASSERT_EQ(cfg.kda_chunk, 8);
  auto w = tiny_params(cfg, at::kDouble);
  auto b = cast(k::init_buffers(cfg), at::kDouble);
  const int64_t T = 16;
  const double bound = 18 * 16 * 2 * gamma(64, kU64);
  auto gen = at::detail::createCPUGenerator(41);
  auto tokens = at::randint(cfg.vocab, {1, T}, gen, at::TensorOptions().dtype(at::kLong));
  double worst = 0;
  for (auto opts : {k::ModelOptions{}, k::ModelOptions{k::AttnResImpl::Plain,
                                                       k::KdaImpl::Recurrent}}) {
    k::Model model(cfg, opts);
    auto base = logits_of(model, w, b, tokens);
    ASSERT_EQ(base.sizes(), (std::vector<int64_t>{1, T, cfg.vocab}));
    const double scale = base.abs().max().item<double>();
    for (int64_t t : {5, 8}) {
      SCOPED_TRACE("changed token at " + std::to_string(t));
      auto changed = tokens.clone();
      changed[0][t] = (changed[0][t].item<int64_t>() + 1) % cfg.vocab;
      auto moved = logits_of(model, w, b, changed);
      const double before =
          (moved.narrow(1, 0, t) - base.narrow(1, 0, t)).abs().max().item<double>() / scale;
      EXPECT_LE(before, bound);
      worst = std::max(worst, before);
      for (int64_t s = t; s < T; ++s) {
        const double after = (moved.select(1, s) - base.select(1, s)).abs().max().item<double>();
        EXPECT_GT(after / scale, 1e-6) << "position " << s << " did not see the change";
      }
    }
  }
  std::cout << "[ observed ] causality fp64: max |change before t| / max|logits| = " << worst
            << " (bound " << bound << ")\n";
}

// fp64: loss_sum over a 2-row batch equals the sum of loss_sum over each row alone, and so
// do the parameter gradients.
//
// The rows' computations are the same ops on the same values, except that every sum over
// tokens (the loss, each weight gradient's contraction over B*T tokens, the MoE experts'
// token segments) and any BLAS blocking that depends on the row count associate
// differently. Each such difference is <= 2 gamma_n sum|terms| with n <= the longest
// contraction (vocab = 2048 for the LM head, B*T = 32 over tokens), i.e. <= 5e-13 times
// sum|terms|; it propagates through 17 layers whose Jacobians are O(1) at init. The
// required 1e-12 relative (in the 2-norm over all parameters and for each parameter with
// a non-negligible gradient) is therefore met with the observed figure printed.
TEST(ModelBatch, LossAndGradsAreSumsOverRowsFp64) {
  auto cfg = k::flavor("tiny");
  auto w = tiny_params(cfg, at::kDouble);
  auto b = cast(k::init_buffers(cfg), at::kDouble);
  const int64_t T = 16;
  auto gen = at::detail::createCPUGenerator(43);
  auto li = at::TensorOptions().dtype(at::kLong);
  auto tokens = at::randint(cfg.vocab, {2, T}, gen, li);
  auto labels = at::randint(cfg.vocab, {2, T}, gen, li);
  k::Model model(cfg);

  auto loss_and_grads = [&](const at::Tensor& tok, const at::Tensor& lab) {
    std::vector<at::Tensor> leaves;
    for (auto& t : w.tensors()) leaves.push_back(t.detach().clone().requires_grad_(true));
    k::NamedTensors lw(w.names(), leaves);
    auto loss = model.loss_sum(lw, b, tok, lab);
    auto g = torch::autograd::grad({loss}, leaves, {}, false, false, true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = at::zeros_like(leaves[i]);
    return std::make_pair(loss.item<double>(), g);
  };
  auto [l_batch, g_batch] = loss_and_grads(tokens, labels);
  auto [l0, g0] = loss_and_grads(tokens.narrow(0, 0, 1), labels.narrow(0, 0, 1));
  auto [l1, g1] = loss_and_grads(tokens.narrow(0, 1, 1), labels.narrow(0, 1, 1));

  const double loss_rel = std::abs(l_batch - (l0 + l1)) / std::abs(l_batch);
  EXPECT_LE(loss_rel, 1e-12);

  double diff_sq = 0, norm_sq = 0, worst_param = 0;
  std::string worst_name;
  std::vector<double> norms;
  for (auto& g : g_batch) norms.push_back(g.norm().item<double>());
  const double total = std::sqrt(std::accumulate(norms.begin(), norms.end(), 0.0,
                                                 [](double a, double n) { return a + n * n; }));
  for (size_t i = 0; i < g_batch.size(); ++i) {
    const double d = (g_batch[i] - (g0[i] + g1[i])).norm().item<double>();
    diff_sq += d * d;
    norm_sq += norms[i] * norms[i];
    // A gradient below 1e-6 of the total is compared against that floor.
    const double rel = d / std::max(norms[i], 1e-6 * total);
    EXPECT_LE(rel, 1e-12) << w.names()[i];
    if (rel > worst_param) {
      worst_param = rel;
      worst_name = w.names()[i];
    }
  }
  const double grad_rel = std::sqrt(diff_sq / norm_sq);
  EXPECT_LE(grad_rel, 1e-12);
  EXPECT_GT(norm_sq, 0);
  std::cout << "[ observed ] batch vs rows fp64: loss rel " << loss_rel << ", grads rel (all) "
            << grad_rel << ", worst parameter " << worst_name << " " << worst_param
            << " (bound 1e-12)\n";
}

}  // namespace
