// Tests for the ops (kernels/ops.h): rms_norm (and its loop against the ATen form),
// cross_entropy_sum, causal_attention, SiTU-GLU (the readable form, and the fused loops of
// situ_glu_rows with their tanh, forward and backward, against the exact values),
// the L2 normalisation and KimiRMSNormGated against scalar loops of their formulas
// (tolerance); fp64 finite-difference gradient checks of the SiTU-GLU FFN and
// KimiRMSNormGated; embed_tokens is a gather (bitwise); the fp32 product (kernels/gemm.h)
// and project() on it against one fused multiply-add chain per element (bitwise), and
// against fp64 (tolerance); the bf16 product likewise, against its chain of pairs of k
// (bitwise) and fp64 (tolerance), and project(), batched_project() and grouped_project() on
// it thread-count free (bitwise).
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
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/loop_elems.h"
#include "kernels/mla.h"
#include "kernels/ops.h"
#include "kernels/vector_kernels.h"
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

// The value of sum(f(x, w) * R) and its gradients w.r.t. x and w.
std::vector<at::Tensor> norm_and_grads(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& x, const at::Tensor& w, const at::Tensor& R) {
  auto xl = x.detach().clone().requires_grad_(true), wl = w.detach().clone().requires_grad_(true);
  auto y = f(xl, wl);
  (y.to(at::kDouble) * R).sum().backward();
  return {y.detach(), xl.grad(), wl.grad()};
}

// rms_norm (the loop Function on CPU) against rms_norm_ops (ATen), fp64, forward and both
// gradients. Bound, per row, first order in u: each evaluation forms r within (D + 4) u (a
// D-long sum in its own order, the divide, the add, the root and its reciprocal), so
//   y:   |diff| <= 2 (D + 6) u |y|;
//   dx_j = r dn_j - x_j r^3 c / D, dn = dy w, c = sum_k dn_k x_k: both terms are at most
//        r sum_k |dn_k| (|x_k r| <= sqrt D), each within (D + 10) u: 4 (D + 10) u r sum|dn|;
//   dw_k: a sum over the N rows of dy_k n_k in different orders, each term within (D + 6) u:
//        2 (N + D + 6) u sum_rows |dy_k n_k|.
TEST(RmsNormLoop, MatchesOpsFp64) {
  const int64_t N = 12, D = 40;
  const double eps = 1e-6, u = kU64;
  auto gen = at::detail::createCPUGenerator(31);
  auto x = at::randn({3, N / 3, D}, gen, f64()) * 2.0;
  auto w = 1.0 + 0.2 * at::randn({D}, gen, f64());
  auto R = at::randn({3, N / 3, D}, gen, f64());
  auto loop = norm_and_grads([&](auto& a, auto& b) { return k::rms_norm(a, b, eps); }, x, w, R);
  auto ops = norm_and_grads([&](auto& a, auto& b) { return k::rms_norm_ops(a, b, eps); }, x, w, R);
  auto r = 1.0 / at::sqrt(x.pow(2).mean(-1, true) + eps);
  auto n = x * r;
  auto within = [](const at::Tensor& diff, const at::Tensor& bound) {
    return (diff.abs() - bound).max().item<double>() <= 0.0;
  };
  EXPECT_TRUE(within(loop[0] - ops[0], 2 * (D + 6) * u * (n * w).abs())) << "y";
  EXPECT_TRUE(within(loop[1] - ops[1], 4 * (D + 10) * u * r * (R * w).abs().sum(-1, true)))
      << "dx";
  EXPECT_TRUE(within(loop[2] - ops[2],
                     2 * (N + D + 6) * u * (R * n).abs().reshape({-1, D}).sum(0)))
      << "dw";
}

// In bf16 and fp32 the loop rounds where rms_norm_ops' autograd does (the normalised row, the
// product with w; dy w and dy n before use), so the two differ only through r and the sums'
// order: within the fp64 bound above with u = 2^-24, plus one spacing of the element type
// wherever a rounding of nearly equal values falls on different sides (2 u_S |value|).
class RmsNormLoopDtypes : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(RmsNormLoopDtypes, MatchesOps) {
  const auto dt = GetParam();
  const int64_t N = 12, D = 40;
  const double eps = 1e-6, u = kU32, us = dt == at::kBFloat16 ? kUbf16 : kU32;
  auto gen = at::detail::createCPUGenerator(32);
  auto x = (at::randn({N, D}, gen, f64()) * 2.0).to(dt);
  auto w = (1.0 + 0.2 * at::randn({D}, gen, f64())).to(dt);
  auto R = at::randn({N, D}, gen, f64());
  auto loop = norm_and_grads([&](auto& a, auto& b) { return k::rms_norm(a, b, eps); }, x, w, R);
  auto ops = norm_and_grads([&](auto& a, auto& b) { return k::rms_norm_ops(a, b, eps); }, x, w, R);
  auto xd = x.to(at::kDouble), wd = w.to(at::kDouble), Rs = R.to(dt).to(at::kDouble);
  auto r = 1.0 / at::sqrt(xd.pow(2).mean(-1, true) + eps);
  auto n = xd * r;
  auto y_ref = (n * wd).abs();
  auto dx_size = r * (Rs * wd).abs().sum(-1, true);
  auto dw_size = (Rs * n).abs().sum(0);
  auto check = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& bound,
                  const char* what) {
    auto diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs();
    EXPECT_LE((diff - bound).max().item<double>(), 0.0) << what;
  };
  check(loop[0], ops[0], (2 * (D + 6) * u + 4 * us) * y_ref, "y");
  check(loop[1], ops[1], (4 * (D + 10) * u + 8 * us) * dx_size, "dx");
  check(loop[2], ops[2], (2 * (N + D + 6) * u + 4 * us) * dw_size, "dw");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNormLoopDtypes, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Bitwise: the loop's forward and gradients do not depend on the thread count (each row is
// one loop iteration; dw sums its rows in order).
class RmsNormLoopThreadsBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(RmsNormLoopThreadsBitwise, ThreadCountFree) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(33);
  auto x = at::randn({2, 300, 256}, gen, f64()).to(dt);
  auto w = (1.0 + 0.2 * at::randn({256}, gen, f64())).to(dt);
  auto R = at::randn({2, 300, 256}, gen, f64());
  auto run = [&] {
    return norm_and_grads([](auto& a, auto& b) { return k::rms_norm(a, b, 1e-6); }, x, w, R);
  };
  expect_thread_count_free(run);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNormLoopThreadsBitwise,
                         ::testing::Values(at::kFloat, at::kBFloat16),
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
// SiTU-GLU, the L2 normalisation and KimiRMSNormGated against scalar loops (tolerance).

double unit_roundoff(at::ScalarType dt) {
  return dt == at::kDouble ? kU64 : dt == at::kFloat ? kU32 : kUbf16;
}

// Bound, relative per element against the exact (beta tanh(g/beta) sigmoid(g)) (lb tanh(u/lb))
// of the given inputs, beta = 4 and lb = 25. The op runs in acc (fp32 or fp64): g/beta exact
// (a power of two), tanh <= 1 ulp (libm and SLEEF's u10 forms), * beta exact; sigmoid is
// exp (1 ulp), 1 + . (1) and a reciprocal or division (1), each relative error passing
// through with a factor <= 1 (d log sigmoid / d log(1 + e^-g) = -1); then the products (2),
// u/25 (1), tanh (1, condition number x tanh'(x) / tanh(x) <= 1), * 25 (1): at most 10
// roundings, gamma_10 in acc, taken as gamma_12. bf16 adds one cast to bf16:
// (u_bf16 + gamma^fp32_12) (1 + u_bf16).
class SituGlu : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(SituGlu, MatchesFormula) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(31);
  // Spread N(0, 6^2): the gate's tanh saturates at |g| >> 4, the up half stays mostly linear.
  auto gate = (6.0 * at::randn({9, 40}, gen, f64())).to(dt);
  auto up = (20.0 * at::randn({9, 40}, gen, f64())).to(dt);
  auto y = k::situ_glu(gate, up, 4.0, 25.0);
  ASSERT_EQ(y.scalar_type(), dt);
  const double acc_u = dt == at::kDouble ? kU64 : kU32;
  const double rel = dt == at::kBFloat16 ? (kUbf16 + gamma(12, kU32)) * (1 + kUbf16)
                                         : gamma(12, acc_u);
  auto g = gate.to(at::kDouble).contiguous(), u = up.to(at::kDouble).contiguous();
  auto yd = y.to(at::kDouble).contiguous();
  int64_t wrong = 0;
  double worst = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    using LD = long double;
    const LD gi = g.data_ptr<double>()[i], ui = u.data_ptr<double>()[i];
    const LD ref = 4 * std::tanh(gi / 4) / (1 + std::exp(-gi)) * (25 * std::tanh(ui / 25));
    const double diff = std::abs(yd.data_ptr<double>()[i] - (double)ref);
    if (diff > rel * std::abs((double)ref)) ++wrong;
    if (ref != 0) worst = std::max(worst, diff / std::abs((double)ref) / unit_roundoff(dt));
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << g.numel();
  std::cout << "[ observed ] situ_glu " << dtype_name(dt) << ": max rel err / u = " << worst
            << " (bound " << rel / unit_roundoff(dt) << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SituGlu,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The loops' tanh (loop_elems::fixed_tanh) against the exact value (long double): relative
// error within 10u of the result's type (u its unit roundoff), over both signs and the whole
// range where tanh is not yet +-1, and its edges. Bound: m = e^(-2|x|) - 1 within 4u
// (fixed_expm1_neg: n = 0 leaves r = x exact, Horner's roundings weigh below 2u and the last
// product u; n != 0 adds 2^n p, exact, to 2^n - 1, exact, where |2^n p| <= 0.21 |m|, and one
// rounding); 0 - m is exact; m + 2 within 4u |m| / (2 + m) + u <= 5u (|m| < 1 <= 2 + m); the
// division u: 4u + 5u + u. (Its header asks for files built without FMA contraction; this one
// is built for plain x86-64, which has no FMA to contract into.)
template <class A>
void expect_fixed_tanh_within_ten_u(A lo, A hi, int64_t points) {
  const double u = sizeof(A) == 4 ? kU32 : kU64;
  double worst = 0;
  A worst_x = 0;
  for (int64_t i = 0; i <= points; ++i) {
    const A x = lo + (hi - lo) * A(i) / A(points);
    const long double exact = std::tanh((long double)x);
    const A got = k::loop_elems::fixed_tanh(x);
    const double err = exact == 0 ? double(got != 0) : double(std::fabs((got - exact) / exact)) / u;
    if (err > worst) worst = err, worst_x = x;
  }
  EXPECT_LE(worst, 10.0) << "at x = " << worst_x;
  std::cout << "[ observed ] fixed_tanh<" << (sizeof(A) == 4 ? "float" : "double") << "> worst "
            << worst << " u at " << worst_x << " (bound 10 u)\n";
}

TEST(FixedTanh, WithinTenUnitRoundoffsOfExact) {
  expect_fixed_tanh_within_ten_u<float>(-10.0f, 10.0f, 400001);
  expect_fixed_tanh_within_ten_u<float>(-1e-3f, 1e-3f, 20001);
  expect_fixed_tanh_within_ten_u<float>(-1e-30f, 1e-30f, 2001);
  expect_fixed_tanh_within_ten_u<double>(-20.0, 20.0, 400001);
  expect_fixed_tanh_within_ten_u<double>(-1e-3, 1e-3, 20001);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(k::loop_elems::fixed_tanh(0.0f), 0.0f);
  EXPECT_EQ(k::loop_elems::fixed_tanh(20.0f), 1.0f);
  EXPECT_EQ(k::loop_elems::fixed_tanh(-200.0f), -1.0f);
  EXPECT_EQ(k::loop_elems::fixed_tanh(inf), 1.0f);
  EXPECT_EQ(k::loop_elems::fixed_tanh(-inf), -1.0f);
  EXPECT_EQ(k::loop_elems::fixed_tanh(-1e300), -1.0);
  EXPECT_TRUE(std::isnan(k::loop_elems::fixed_tanh(std::nanf(""))));
  EXPECT_TRUE(std::isnan(k::loop_elems::fixed_tanh(std::nan(""))));
}

// situ_glu_rows (the fused loops) against the exact values (long double), forward and
// backward, with beta = 4 and lb = 25 (so g / beta and beta t are exact). Bounds, in the
// accumulation type's u (fp32 for bf16), with fixed_tanh within 10u (above) and fixed_exp
// within 2 ulp = 4u:
//   y: tanh(g/4) 10u; sigma 6u (exp 4u passed through 1 + e^-g with a factor <= 1, the sum and
//      the division u each); (4t) s u; u/25 u, through tanh's condition number <= 1; tanh
//      10u; 25 tu u; a b u: 30u relative, taken as 32u.
//   dg = dy b ((1 - t^2) s + (4t) (s (1 - s))): b carries 13u and dy b 14u; t^2 21u, so
//      1 - t^2 is off by <= 22u (1 + t^2) absolute (its own rounding included); times s
//      (6u): 30u (1 + t^2) s; s (1 - s) within 14u s, times 4t (10u): 25u 4|t| s; the sum
//      u more: <= 31u M, M = (1 + t^2) s + 4|t| s (>= the derivative's size); times dy b:
//      <= 46u |dy b| M, taken as 48u.
//   du = dy a (1 - tu^2): a carries 17u and dy a 18u; tu 13u, 1 - tu^2 off by <= 28u
//      (1 + tu^2): <= 47u |dy a| (1 + tu^2), taken as 48u.
// bf16 adds one rounding of the result: (k u_fp32 + u_bf16) (1 + u_bf16) of the same sizes.
class SituGluRows : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(SituGluRows, ForwardAndBackwardMatchExact) {
  const auto dt = GetParam();
  const int64_t N = 9, H = 40;
  auto gen = at::detail::createCPUGenerator(37);
  // As SituGlu: the gate's tanh saturates at |g| >> 4, the up half stays mostly linear.
  auto gate = 6.0 * at::randn({N, H}, gen, f64()), up = 20.0 * at::randn({N, H}, gen, f64());
  auto gu = at::cat({gate, up}, -1).to(dt).requires_grad_(true);
  auto dy = at::randn({N, H}, gen, f64()).to(dt);
  auto y = k::situ_glu_rows(gu, 4.0, 25.0);
  ASSERT_EQ(y.scalar_type(), dt);
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{N, H}));
  y.backward(dy);
  const double ua = dt == at::kDouble ? kU64 : kU32;
  const double us = dt == at::kBFloat16 ? kUbf16 : 0.0;
  const double rel_y = (32 * ua + us) * (1 + us), rel_d = (48 * ua + us) * (1 + us);
  auto G = gu.detach().to(at::kDouble).contiguous(), D = dy.to(at::kDouble).contiguous();
  auto Y = y.detach().to(at::kDouble).contiguous();
  auto dG = gu.grad().to(at::kDouble).contiguous();
  int64_t wrong_y = 0, wrong_dg = 0, wrong_du = 0;
  double worst[3] = {0, 0, 0};  // error / bound of y, d gate, d up
  const auto note = [&](int i, long double err, long double bound) {
    if (bound > 0) worst[i] = std::max(worst[i], double(err / bound));
    return err > bound;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      using LD = long double;
      const LD g = G[n][h].item<double>(), u = G[n][H + h].item<double>();
      const LD d = D[n][h].item<double>();
      const LD t = std::tanh(g / 4), s = 1 / (1 + std::exp(-g)), tu = std::tanh(u / 25);
      const LD a = 4 * t * s, b = 25 * tu;
      const LD y_ref = a * b;
      const LD dg_ref = d * b * ((1 - t * t) * s + 4 * t * s * (1 - s));
      const LD du_ref = d * a * (1 - tu * tu);
      const LD M = (1 + t * t) * s + 4 * std::fabs(t) * s;
      wrong_y += note(0, std::fabs(Y[n][h].item<double>() - y_ref), rel_y * std::fabs(y_ref));
      wrong_dg += note(1, std::fabs(dG[n][h].item<double>() - dg_ref), rel_d * std::fabs(d * b) * M);
      wrong_du += note(2, std::fabs(dG[n][H + h].item<double>() - du_ref),
                       rel_d * std::fabs(d * a) * (1 + tu * tu));
    }
  std::cout << "[ observed ] situ_glu_rows " << dtype_name(dt) << ": worst error / bound: y "
            << worst[0] << ", d gate " << worst[1] << ", d up " << worst[2] << "\n";
  EXPECT_EQ(wrong_y, 0) << "y: #wrong of " << N * H;
  EXPECT_EQ(wrong_dg, 0) << "d gate: #wrong of " << N * H;
  EXPECT_EQ(wrong_du, 0) << "d up: #wrong of " << N * H;
}

// Against the readable form (situ_glu of the two halves, its gradients by autograd): both
// within their bounds of the exact values (SituGlu: gamma_12; above: 32u), so within the sum
// of the two of each other, relative to |y|: the forward within (44u_acc + 2 u_s)(1 + u_s).
// The gradients' readable bound is not derived, so they are checked against exact above.
TEST_P(SituGluRows, ForwardMatchesTheReadableForm) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(38);
  auto gu = at::cat({6.0 * at::randn({2, 7, 24}, gen, f64()),
                     20.0 * at::randn({2, 7, 24}, gen, f64())}, -1).to(dt);
  auto fused = k::situ_glu_rows(gu, 4.0, 25.0).to(at::kDouble);
  auto readable = k::situ_glu(gu.narrow(-1, 0, 24), gu.narrow(-1, 24, 24), 4.0, 25.0);
  ASSERT_EQ(readable.sizes(), fused.sizes());
  const double ua = dt == at::kDouble ? kU64 : kU32;
  const double us = dt == at::kBFloat16 ? kUbf16 : 0.0;
  const double rel = (44 * ua + 2 * us) * (1 + us);
  auto diff = (fused - readable.to(at::kDouble)).abs();
  auto bound = rel * readable.to(at::kDouble).abs();
  EXPECT_LE((diff - bound).max().item<double>(), 0.0);
  EXPECT_FALSE(fused.isnan().any().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SituGluRows,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Bitwise: the fused loops' output and gradient do not depend on the thread count (each row
// one loop iteration), and a NaN in one element comes out as NaN there, not as a number.
class SituGluRowsThreadsBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(SituGluRowsThreadsBitwise, ThreadCountFree) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(39);
  auto gu = (4.0 * at::randn({600, 256}, gen, f64())).to(dt);
  auto dy = at::randn({600, 128}, gen, f64()).to(dt);
  auto run = [&] {
    auto x = gu.clone().requires_grad_(true);
    auto y = k::situ_glu_rows(x, 4.0, 25.0);
    y.backward(dy);
    return std::vector<at::Tensor>{y.detach(), x.grad()};
  };
  expect_thread_count_free(run);
  auto poisoned = gu.clone();
  poisoned[3][5] = std::nan("");
  auto y = k::situ_glu_rows(poisoned, 4.0, 25.0);
  EXPECT_TRUE(y[3][5].isnan().item<bool>());
  EXPECT_EQ(y.isnan().sum().item<int64_t>(), 1);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SituGluRowsThreadsBitwise,
                         ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Bound, relative per element against x / sqrt(sum x^2 + eps), eps 1e-6: the sum of D
// squares (no cancellation) gamma_{D+1}, + eps (1), sqrt halves it and adds 1, the reciprocal
// 1, the product 1: gamma_{D/2 + 5} <= gamma_{D+5} in acc; bf16 adds one cast:
// (u_bf16 + gamma^fp32_{D+5}) (1 + u_bf16).
class L2Normalize : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(L2Normalize, MatchesFormula) {
  const auto dt = GetParam();
  const int64_t rows = 6, D = 32;
  const double eps = 1e-6;
  auto gen = at::detail::createCPUGenerator(32);
  // Row norms from 1e-4 (eps dominates) to 1e2.
  auto scale = at::pow(10.0, at::linspace(-4, 2, rows, f64())).unsqueeze(-1);
  auto x = (at::randn({rows, D}, gen, f64()) * scale / std::sqrt(double(D))).to(dt);
  auto y = k::l2_normalize(x, eps);
  ASSERT_EQ(y.scalar_type(), dt);
  const double acc_u = dt == at::kDouble ? kU64 : kU32;
  const double rel = dt == at::kBFloat16 ? (kUbf16 + gamma(D + 5, kU32)) * (1 + kUbf16)
                                         : gamma(D + 5, acc_u);
  auto xd = x.to(at::kDouble).contiguous(), yd = y.to(at::kDouble).contiguous();
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    long double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += (long double)xd[r][d].item<double>() * xd[r][d].item<double>();
    const long double inv = 1.0L / std::sqrt(ss + (long double)eps);
    for (int64_t d = 0; d < D; ++d) {
      const long double ref = xd[r][d].item<double>() * inv;
      if (std::abs(yd[r][d].item<double>() - (double)ref) > rel * std::abs((double)ref)) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << rows * D;
  // The smallest row has norm ~1e-4, so eps = 1e-6 = (1e-3)^2 keeps it well below unit norm.
  EXPECT_LT(y[0].to(at::kDouble).norm().item<double>(), 0.2);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, L2Normalize,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Bound, relative per element against w x / sqrt(mean x^2 + eps) * sigmoid(gate), eps 1e-5:
// the RMS statistics as in RmsNorm (gamma_{D+8} in acc), the weight and the gate's sigmoid
// (3 roundings, factor <= 1 as above) and the product (1): gamma_{D+12} in acc; bf16 adds one
// cast: (u_bf16 + gamma^fp32_{D+12}) (1 + u_bf16).
class RmsNormGated : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(RmsNormGated, MatchesFormula) {
  const auto dt = GetParam();
  const int64_t rows = 5, K = 16;
  const double eps = 1e-5;
  auto gen = at::detail::createCPUGenerator(33);
  auto scale = at::pow(10.0, at::linspace(-3, 2, rows, f64())).unsqueeze(-1);
  auto x = (at::randn({rows, K}, gen, f64()) * scale).to(dt);
  auto gate = (3.0 * at::randn({rows, K}, gen, f64())).to(dt);
  auto w = (1.0 + 0.2 * at::randn({K}, gen, f64())).to(dt);
  auto y = k::rms_norm_gated(x, gate, w, eps);
  ASSERT_EQ(y.scalar_type(), dt);
  const double acc_u = dt == at::kDouble ? kU64 : kU32;
  const double rel = dt == at::kBFloat16 ? (kUbf16 + gamma(K + 12, kU32)) * (1 + kUbf16)
                                         : gamma(K + 12, acc_u);
  auto xd = x.to(at::kDouble), gd = gate.to(at::kDouble), wd = w.to(at::kDouble);
  auto yd = y.to(at::kDouble);
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    long double ss = 0;
    for (int64_t c = 0; c < K; ++c) ss += std::pow((long double)xd[r][c].item<double>(), 2);
    const long double inv = 1.0L / std::sqrt(ss / K + (long double)eps);
    for (int64_t c = 0; c < K; ++c) {
      const long double ref = (long double)wd[c].item<double>() * xd[r][c].item<double>() * inv /
                              (1 + std::exp(-(long double)gd[r][c].item<double>()));
      if (std::abs(yd[r][c].item<double>() - (double)ref) > rel * std::abs((double)ref)) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "#wrong of " << rows * K;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNormGated,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------------------
// fp64 finite differences (fd_check.h's kFdTol, derived there) of the SiTU-GLU FFN with
// respect to x, the stacked w13 and w2, and of KimiRMSNormGated with respect to x, the gate
// and the weight.

TEST(SituGluFfn, CentralDifferencesFp64) {
  const int64_t D = 12, H = 10;
  auto gen = at::detail::createCPUGenerator(34);
  // Pre-activations O(1) to O(5): the gate's tanh(g/4) and sigmoid both curve.
  auto x = 2.0 * at::randn({2, 5, D}, gen, f64());
  auto w13 = 0.6 * at::randn({2, H, D}, gen, f64());
  auto w2 = 0.3 * at::randn({D, H}, gen, f64());
  TensorFn f = [](const std::vector<at::Tensor>& a) {
    return k::glu_ffn(a[0], a[1], a[2], 4.0, 25.0);
  };
  auto r = directional_fd(f, {x, w13, w2}, {"x", "w13", "w2"}, 35);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] situ-glu ffn fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

// The FFN reads w13[0] as the gate and w13[1] as the up projection (torchtitan's stacked
// layout): swapping them changes the output by O(1) (tolerance 1e-3 against O(1) values).
TEST(SituGluFfn, GateIsTheFirstHalf) {
  const int64_t D = 6, H = 4;
  auto gen = at::detail::createCPUGenerator(36);
  auto x = at::randn({3, D}, gen, f64());
  auto w13 = at::randn({2, H, D}, gen, f64());
  auto w2 = at::randn({D, H}, gen, f64());
  auto y = k::glu_ffn(x, w13, w2, 4.0, 25.0);
  auto want = k::project(k::situ_glu(k::project(x, w13[0]), k::project(x, w13[1]), 4.0, 25.0),
                         w2);
  auto swapped = at::stack({w13[1], w13[0]});
  EXPECT_LE((y - want).abs().max().item<double>(), 1e-12);
  EXPECT_GT((k::glu_ffn(x, swapped, w2, 4.0, 25.0) - y).abs().max().item<double>(), 1e-3);
}

TEST(RmsNormGated, CentralDifferencesFp64) {
  auto gen = at::detail::createCPUGenerator(37);
  auto x = at::randn({3, 4, 8}, gen, f64());
  auto gate = 2.0 * at::randn({3, 4, 8}, gen, f64());
  auto w = 1.0 + 0.3 * at::randn({8}, gen, f64());
  TensorFn f = [](const std::vector<at::Tensor>& a) {
    return k::rms_norm_gated(a[0], a[1], a[2], 1e-5);
  };
  auto r = directional_fd(f, {x, gate, w}, {"x", "gate", "w"}, 38);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] rms_norm_gated fd rel err " << r.worst << " (bound " << kFdTol
            << ")\n";
}

// The kernel choice of kernels/vector_kernels.h, case by case: AVX-512 kernels are asked for
// only on an AVX-512 CPU, OpenBLAS's only when it picked an AVX2 core, and never over what
// the user set.
TEST(VectorKernels, AskForAvx512KernelsOnlyWhereTheyRunAndNobodyChose) {
  using k::choose_vector_kernels;
  struct Case {
    std::string core;
    bool avx512, user_core, user_capability;
    std::string want_core, want_capability;
  };
  const std::vector<Case> cases = {
      {"Haswell", true, false, false, "SkylakeX", "avx512"},  // Zen 4/5 under 0.3.21
      {"Zen", true, false, false, "SkylakeX", "avx512"},
      {"SkylakeX", true, false, false, "", "avx512"},          // already AVX-512
      {"Cooperlake", true, false, false, "", "avx512"},
      {"SapphireRapids", true, false, false, "", "avx512"},
      {"", true, false, false, "", "avx512"},                  // not OpenBLAS
      {"Haswell", false, false, false, "", ""},                // an AVX2 machine
      {"Zen", false, false, false, "", ""},
      {"Haswell", true, true, false, "", "avx512"},            // the user chose the core
      {"Haswell", true, false, true, "SkylakeX", ""},          // ... or ATen's kernels
      {"Haswell", true, true, true, "", ""},
  };
  for (const auto& c : cases) {
    const auto got = choose_vector_kernels(c.core, c.avx512, c.user_core, c.user_capability);
    EXPECT_EQ(got.openblas_coretype, c.want_core)
        << c.core << " avx512 " << c.avx512 << " user " << c.user_core << c.user_capability;
    EXPECT_EQ(got.aten_capability, c.want_capability)
        << c.core << " avx512 " << c.avx512 << " user " << c.user_core << c.user_capability;
  }
}


// ---------------------------------------------------------------------------------------
// The fp32 product (kernels/gemm.h). Its contract is one fused multiply-add chain per element
// along k in ascending order from zero; the reference below is that definition, one element
// at a time, written here independently of the kernel.

// A [rows, cols] float matrix with the given strides, in a buffer of its own.
struct Strided {
  std::vector<float> buf;
  parity::kernels::gemm::View view;
  float at(int64_t i, int64_t j) const { return view.p[i * view.rs + j * view.cs]; }
};

// layout 0: row-major; 1: column-major; 2: row-major inside a wider buffer (row stride
// cols + 7) starting 3 elements in, as a column slice of a larger matrix is.
Strided strided_normal(int64_t rows, int64_t cols, int layout, uint32_t seed) {
  Strided m;
  const int64_t ld = layout == 2 ? cols + 7 : 0, off = layout == 2 ? 3 : 0;
  m.buf.assign(layout == 2 ? off + rows * ld : rows * cols, std::nanf(""));
  uint32_t x = seed * 2654435761u + 1;
  auto next = [&x] {  // xorshift32, mapped to [-2, 2) with a few exact small integers
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return (x % 7 == 0) ? float(int(x % 5) - 2) : float(x % 100000) / 25000.0f - 2.0f;
  };
  int64_t rs = cols, cs = 1;
  if (layout == 1) rs = 1, cs = rows;
  if (layout == 2) rs = ld;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m.buf[off + i * rs + j * cs] = next();
  m.view = {m.buf.data() + off, rs, cs};
  return m;
}

float fma_chain(const Strided& a, const Strided& b, int64_t i, int64_t j, int64_t K) {
  float c = 0.0f;
  for (int64_t k = 0; k < K; ++k) c = std::fma(a.at(i, k), b.at(k, j), c);
  return c;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every instruction set this CPU runs, on shapes that cross each blocking edge (12 and 6 rows
// per tile, 32 and 16 columns, 256 values of k per block, 16 per packed transpose), each
// layout of A and B: the bits of the chain, element by element, and C's columns outside
// [j0, j1) untouched.
TEST(GemmBitwise, EveryInstructionSetGivesTheChainOfEachElement) {
  namespace g = parity::kernels::gemm;
  struct Shape {
    int64_t M, N, K;
  };
  const std::vector<Shape> shapes = {{1, 1, 1},    {1, 1, 0},    {12, 32, 16},  {13, 33, 17},
                                     {11, 31, 15}, {24, 64, 256}, {25, 65, 257}, {97, 70, 600},
                                     {6, 16, 513}, {200, 40, 48}};
  int checked_isas = 0;
  for (auto isa : {g::Isa::Avx512, g::Isa::Avx2, g::Isa::Scalar}) {
    if (!g::runs(isa)) {
      std::printf("[ note ] this CPU does not run gemm %s; not checked here\n", g::isa_name(isa));
      continue;
    }
    ++checked_isas;
    uint32_t seed = 1;
    for (const auto& s : shapes)
      for (int la = 0; la < 3; ++la)
        for (int lb = 0; lb < 3; ++lb) {
          const auto a = strided_normal(s.M, s.K, la, seed++);
          const auto b = strided_normal(s.K, s.N, lb, seed++);
          // The columns from j0 on only (j0 a panel edge where N allows), C 5 wider than N.
          const int64_t j0 = s.N > 32 ? 32 : 0, ldc = s.N + 5;
          std::vector<float> c(s.M * ldc, -7.5f);
          g::multiply(isa, s.M, s.N, s.K, a.view, b.view, c.data(), ldc, j0, s.N);
          int64_t bad = 0;
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const float want = (j >= j0 && j < s.N) ? fma_chain(a, b, i, j, s.K) : -7.5f;
              bad += !same_bits(c[i * ldc + j], want);
            }
          EXPECT_EQ(bad, 0) << g::isa_name(isa) << " M " << s.M << " N " << s.N << " K " << s.K
                            << " layouts " << la << lb;
        }
  }
  EXPECT_GE(checked_isas, 1);
}

// project() in fp32 on CPU runs the product forward and backward: y = x w^T, dx = dy w and
// dw = dy^T x, each element the chain of its definition; and one thread or two give the
// same bits.
TEST(GemmBitwise, ProjectForwardAndBackwardAreTheChains) {
  if (!parity::kernels::gemm::chosen_isa()) GTEST_SKIP() << "PARITY_GEMM=aten";
  const int64_t Bn = 2, T = 37, I = 45, O = 70, M = Bn * T;
  auto gen = at::detail::createCPUGenerator(7);
  auto x = at::randn({Bn, T, I}, gen).requires_grad_(true);
  auto w = at::randn({O, I}, gen).requires_grad_(true);
  auto dy = at::randn({Bn, T, O}, gen);
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    x.mutable_grad() = at::Tensor();
    w.mutable_grad() = at::Tensor();
    auto y = k::project(x, w);
    y.backward(dy);
    at::set_num_threads(1);
    return std::vector<at::Tensor>{y.detach().clone(), x.grad().clone(), w.grad().clone()};
  };
  const auto one = run(1), two = run(2);
  const auto X = x.detach().reshape({M, I}), W = w.detach(), DY = dy.reshape({M, O});
  auto chain = [](const at::Tensor& a, const at::Tensor& b, int64_t i, int64_t j) {
    float c = 0.0f;  // a [., K], b [K, .]
    for (int64_t k = 0; k < a.size(1); ++k)
      c = std::fma(a[i][k].item<float>(), b[k][j].item<float>(), c);
    return c;
  };
  const auto Wt = W.t(), DYt = DY.t();
  auto y = one[0].reshape({M, O}), dx = one[1].reshape({M, I}), dw = one[2];
  int64_t bad = 0;
  for (int64_t m = 0; m < M; m += 5)
    for (int64_t o = 0; o < O; o += 3) bad += !same_bits(y[m][o].item<float>(), chain(X, Wt, m, o));
  EXPECT_EQ(bad, 0) << "y";
  bad = 0;
  for (int64_t m = 0; m < M; m += 5)
    for (int64_t i = 0; i < I; i += 2) bad += !same_bits(dx[m][i].item<float>(), chain(DY, W, m, i));
  EXPECT_EQ(bad, 0) << "dx";
  bad = 0;
  for (int64_t o = 0; o < O; o += 3)
    for (int64_t i = 0; i < I; i += 2) bad += !same_bits(dw[o][i].item<float>(), chain(DYt, X, o, i));
  EXPECT_EQ(bad, 0) << "dw";
  for (int t = 0; t < 3; ++t) EXPECT_TRUE(at::equal(one[t], two[t])) << "output " << t;
}

// A product too narrow to split by column panels (20 columns: one panel) is split between
// threads by blocks of rows instead: y = x w^T with x [2000, 64] is 2.6M multiply-adds, so two
// threads split it, and with one panel only rows can be split. Its dx (two panels) and dw (20
// rows: blocks of 12 and 8) too. Every element is still the chain of its definition, and one
// thread or two give the same bits.
TEST(GemmBitwise, ProjectSplitsTheRowsOfANarrowProduct) {
  if (!parity::kernels::gemm::chosen_isa()) GTEST_SKIP() << "PARITY_GEMM=aten";
  const int64_t M = 2000, I = 64, O = 20;
  auto gen = at::detail::createCPUGenerator(17);
  auto x_base = at::randn({M, I}, gen), w_base = at::randn({O, I}, gen);
  auto dy = at::randn({M, O}, gen);
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    auto x = x_base.clone().requires_grad_(true), w = w_base.clone().requires_grad_(true);
    auto y = k::project(x, w);
    y.backward(dy);
    at::set_num_threads(1);
    return std::vector<at::Tensor>{y.detach().clone(), x.grad().clone(), w.grad().clone()};
  };
  const auto one = run(1), two = run(2);
  auto chain = [](const at::Tensor& a, const at::Tensor& b, int64_t i, int64_t j) {
    float c = 0.0f;  // a [., K], b [K, .]
    for (int64_t kk = 0; kk < a.size(1); ++kk)
      c = std::fma(a[i][kk].item<float>(), b[kk][j].item<float>(), c);
    return c;
  };
  for (int t = 0; t < 3; ++t) EXPECT_TRUE(at::equal(one[t], two[t])) << "output " << t;
  const auto W = w_base, X = x_base;
  int64_t bad = 0;
  for (int64_t m = 3; m < M; m += 97)  // rows of many blocks, both threads' shares
    for (int64_t o = 0; o < O; o += 3) bad += !same_bits(two[0][m][o].item<float>(), chain(X, W.t(), m, o));
  EXPECT_EQ(bad, 0) << "y";
  bad = 0;
  for (int64_t m = 5; m < M; m += 101)
    for (int64_t i = 0; i < I; i += 7) bad += !same_bits(two[1][m][i].item<float>(), chain(dy, W, m, i));
  EXPECT_EQ(bad, 0) << "dx";
  bad = 0;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = o % 5; i < I; i += 9) bad += !same_bits(two[2][o][i].item<float>(), chain(dy.t(), X, o, i));
  EXPECT_EQ(bad, 0) << "dw";
}

// batched_project() in fp32 on CPU: for every matrix of the batch, y = x w^T, dx = dy w and
// dw = dy^T x, each element the chain of its definition, with x and w strided views (the
// leading dims transposed, as attention's q, k and v are); and one thread or two give the
// same bits (the (matrix, panel) pairs split between them).
TEST(GemmBitwise, BatchedProjectIsTheChainOfEachMatrix) {
  if (!parity::kernels::gemm::chosen_isa()) GTEST_SKIP() << "PARITY_GEMM=aten";
  // O = 200: 7 column panels a matrix; the forward, dx and dw are each 2.0M multiply-adds,
  // over the 2^20 below which multiply_all stays on one thread, so two threads split them.
  const int64_t G0 = 2, G1 = 3, M = 37, I = 45, O = 200;
  auto gen = at::detail::createCPUGenerator(8);
  auto x_base = at::randn({G1, G0, M, I}, gen), w_base = at::randn({G1, G0, O, I}, gen);
  auto dy = at::randn({G0, G1, M, O}, gen);
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    auto xb = x_base.clone().requires_grad_(true), wb = w_base.clone().requires_grad_(true);
    auto y = k::batched_project(xb.transpose(0, 1), wb.transpose(0, 1));  // [G0, G1, M, O]
    y.backward(dy);
    at::set_num_threads(1);
    return std::vector<at::Tensor>{y.detach().clone(), xb.grad().transpose(0, 1).clone(),
                                   wb.grad().transpose(0, 1).clone()};
  };
  const auto one = run(1), two = run(2);
  const auto X = x_base.transpose(0, 1), W = w_base.transpose(0, 1);
  auto chain = [](const at::Tensor& a, const at::Tensor& b, int64_t i, int64_t j) {
    float c = 0.0f;  // a [., K], b [K, .]
    for (int64_t kk = 0; kk < a.size(1); ++kk)
      c = std::fma(a[i][kk].item<float>(), b[kk][j].item<float>(), c);
    return c;
  };
  int64_t bad_y = 0, bad_dx = 0, bad_dw = 0, checked = 0;
  for (int64_t g0 = 0; g0 < G0; ++g0)
    for (int64_t g1 = 0; g1 < G1; ++g1) {
      const auto x = X[g0][g1], w = W[g0][g1], d = dy[g0][g1];
      const auto y = one[0][g0][g1], dx = one[1][g0][g1], dw = one[2][g0][g1];
      for (int64_t m = g1; m < M; m += 7)
        for (int64_t o = g0; o < O; o += 9, ++checked)
          bad_y += !same_bits(y[m][o].item<float>(), chain(x, w.t(), m, o));
      for (int64_t m = g1; m < M; m += 7)
        for (int64_t i = g0; i < I; i += 8) bad_dx += !same_bits(dx[m][i].item<float>(), chain(d, w, m, i));
      for (int64_t o = g1; o < O; o += 9)
        for (int64_t i = g0; i < I; i += 8) bad_dw += !same_bits(dw[o][i].item<float>(), chain(d.t(), x, o, i));
    }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(bad_y, 0) << "y";
  EXPECT_EQ(bad_dx, 0) << "dx";
  EXPECT_EQ(bad_dw, 0) << "dw";
  for (int t = 0; t < 3; ++t) EXPECT_TRUE(at::equal(one[t], two[t])) << "output " << t;
}

// grouped_project(x, w, counts), or its readable form: project() on each group's rows, the
// results concatenated.
at::Tensor grouped_or_readable(const at::Tensor& x, const at::Tensor& w,
                               const std::vector<int64_t>& counts, bool readable) {
  if (!readable) return k::grouped_project(x, w, counts);
  const auto parts = x.split_with_sizes(counts);
  std::vector<at::Tensor> ys;
  for (size_t e = 0; e < counts.size(); ++e)
    if (counts[e] > 0) ys.push_back(k::project(parts[e], w[static_cast<int64_t>(e)]));
  return at::cat(ys, 0);
}

// grouped_project() in fp32 on CPU: each group's rows of y, of dx, and each group's dw, the
// chain of its definition on the group's rows (a group without rows: dw[e] = +0 and no rows);
// equal, bitwise, to project() on each group's rows (its readable form); and one thread or two
// give the same bits (the (group, panel) pairs split between them).
TEST(GemmBitwise, GroupedProjectIsTheChainOfEachGroup) {
  if (!parity::kernels::gemm::chosen_isa()) GTEST_SKIP() << "PARITY_GEMM=aten";
  // O = 400: 13 column panels a group. The forward, dx and dw are each 96 x 45 x 400 = 1.7M
  // multiply-adds, over the 2^20 below which multiply_all stays on one thread: two threads
  // split each.
  const std::vector<int64_t> counts{30, 0, 41, 25};
  const int64_t R = 96, I = 45, O = 400, E = 4;
  auto gen = at::detail::createCPUGenerator(9);
  auto x_base = at::randn({R, I}, gen), w_base = at::randn({E, O, I}, gen);
  auto dy = at::randn({R, O}, gen);
  auto run = [&](int threads, bool readable) {
    at::set_num_threads(threads);
    auto x = x_base.clone().requires_grad_(true), w = w_base.clone().requires_grad_(true);
    auto y = grouped_or_readable(x, w, counts, readable);
    y.backward(dy);
    at::set_num_threads(1);
    return std::vector<at::Tensor>{y.detach().clone(), x.grad().clone(), w.grad().clone()};
  };
  const auto one = run(1, false), two = run(2, false), readable = run(1, true);
  auto chain = [](const at::Tensor& a, const at::Tensor& b, int64_t i, int64_t j) {
    float c = 0.0f;  // a [., K], b [K, .]
    for (int64_t kk = 0; kk < a.size(1); ++kk)
      c = std::fma(a[i][kk].item<float>(), b[kk][j].item<float>(), c);
    return c;
  };
  int64_t bad_y = 0, bad_dx = 0, bad_dw = 0, checked = 0, start = 0;
  for (int64_t e = 0; e < E; start += counts[e], ++e) {
    const auto w = w_base[e], dw = one[2][e];
    if (counts[e] == 0) {
      EXPECT_TRUE(at::equal(dw, at::zeros_like(dw))) << "dw of the empty group " << e;
      EXPECT_FALSE(dw.signbit().any().item<bool>()) << "dw of the empty group " << e << " is +0";
      continue;
    }
    const auto x = x_base.narrow(0, start, counts[e]), d = dy.narrow(0, start, counts[e]);
    const auto y = one[0].narrow(0, start, counts[e]), dx = one[1].narrow(0, start, counts[e]);
    for (int64_t m = e; m < counts[e]; m += 5)
      for (int64_t o = e; o < O; o += 9, ++checked)
        bad_y += !same_bits(y[m][o].item<float>(), chain(x, w.t(), m, o));
    for (int64_t m = e; m < counts[e]; m += 5)
      for (int64_t i = e; i < I; i += 8) bad_dx += !same_bits(dx[m][i].item<float>(), chain(d, w, m, i));
    for (int64_t o = e; o < O; o += 9)
      for (int64_t i = e; i < I; i += 8) bad_dw += !same_bits(dw[o][i].item<float>(), chain(d.t(), x, o, i));
  }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(bad_y, 0) << "y";
  EXPECT_EQ(bad_dx, 0) << "dx";
  EXPECT_EQ(bad_dw, 0) << "dw";
  for (int t = 0; t < 3; ++t) {
    EXPECT_TRUE(at::equal(one[t], two[t])) << "output " << t << ": 1 vs 2 threads";
    EXPECT_TRUE(at::equal(one[t], readable[t])) << "output " << t << ": vs project() per group";
  }
}

// grouped_project() in bf16 and fp64 on CPU (ATen's products, written in place; bf16 on
// parity's product where it runs): y, dx and dw
// bitwise those of its readable form, project() on each group's rows, concatenated (randn
// operands: no product is exactly zero, so the readable form's sum of each group's dw with the
// other groups' zeros changes no sign); a group without rows gets dw[e] = +0.
TEST(GroupedProject, OtherDtypesAreProjectPerGroupBitwise) {
  const std::vector<int64_t> counts{7, 0, 12, 5};
  const int64_t R = 24, I = 40, O = 56, E = 4;
  for (auto dtype : {at::kBFloat16, at::kDouble}) {
    auto gen = at::detail::createCPUGenerator(11);
    const auto x_base = at::randn({R, I}, gen).to(dtype), w_base = at::randn({E, O, I}, gen).to(dtype);
    const auto dy = at::randn({R, O}, gen).to(dtype);
    auto run = [&](bool readable) {
      auto x = x_base.clone().requires_grad_(true), w = w_base.clone().requires_grad_(true);
      auto y = grouped_or_readable(x, w, counts, readable);
      if (!readable) {  // bf16 runs on parity's product where it runs (test_ops' bf16 tests)
        const bool ours = dtype == at::kBFloat16 && parity::kernels::gemm::bf16_chosen();
        EXPECT_NE(y.grad_fn()->name().find(ours ? "GroupedProjectFunction"
                                                : "AtenGroupedProjectFunction"),
                  std::string::npos)
            << y.grad_fn()->name();
      }
      y.backward(dy);
      return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad()};
    };
    const auto ours = run(false), readable = run(true);
    const auto bits = dtype == at::kDouble ? at::kLong : at::kShort;
    const char* names[] = {"y", "dx", "dw"};
    for (int t = 0; t < 3; ++t)
      EXPECT_TRUE(at::equal(ours[t].view(bits), readable[t].view(bits)))
          << names[t] << " in " << at::toString(dtype);
    const auto empty = ours[2][1];
    EXPECT_TRUE(at::equal(empty, at::zeros_like(empty))) << at::toString(dtype);
    EXPECT_FALSE(empty.signbit().any().item<bool>()) << "dw of the empty group is +0";
  }
}

// grouped_project() refuses counts that do not cover x's rows, naming them.
// An unread product (ProductValue::Unread, what a checkpointed layer's recompute asks of its
// FFN's last products) builds project()'s graph: its value is zero where parity's products run
// and project()'s elsewhere, and its gradients are project()'s, bit for bit, in every dtype.
TEST(ProjectUnread, GradientsAreProjectsBitwise) {
  auto gen = at::detail::createCPUGenerator(23);
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    const auto x0 = at::randn({2, 70, 48}, gen).to(dtype), w0 = at::randn({40, 48}, gen).to(dtype);
    const auto dy = at::randn({2, 70, 40}, gen).to(dtype);
    auto run = [&](k::ProductValue value) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto y = k::project(x, w, value);
      y.backward(dy);
      return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad()};
    };
    const auto read = run(k::ProductValue::Read), unread = run(k::ProductValue::Unread);
    const std::string what = c10::toString(dtype);
    EXPECT_TRUE(at::equal(read[0], k::project(x0, w0))) << what;
    EXPECT_GT(read[0].abs().max().item<double>(), 0.0) << what;
    EXPECT_EQ(unread[0].sizes(), read[0].sizes()) << what;
    const bool ours = (dtype == at::kFloat && k::gemm::chosen_isa()) ||
                      (dtype == at::kBFloat16 && k::gemm::bf16_chosen());
    if (ours)
      EXPECT_EQ(unread[0].abs().max().item<double>(), 0.0) << what << ": the multiply is skipped";
    else
      EXPECT_TRUE(at::equal(unread[0], read[0])) << what << ": ATen's product, computed";
    EXPECT_TRUE(at::equal(unread[1], read[1])) << what << ": dx";
    EXPECT_TRUE(at::equal(unread[2], read[2])) << what << ": dw";
  }
}

TEST(GroupedProject, RejectsCountsThatDoNotSumToTheRows) {
  auto x = at::zeros({5, 3}), w = at::zeros({2, 4, 3});
  EXPECT_THROW(k::grouped_project(x, w, {2, 2}), c10::Error);
  EXPECT_THROW(k::grouped_project(x, w, {6, -1}), c10::Error);
  EXPECT_THROW(k::grouped_project(x, w, {5}), c10::Error);
  EXPECT_EQ(k::grouped_project(x, w, {5, 0}).sizes(), (at::IntArrayRef{5, 4}));
}

// The product against fp64, on every instruction set here. Bound: a sequential chain of K
// fused multiply-adds rounds once per step, so |c - a.b| <= gamma_K sum_k |a_k b_k| with
// gamma_K = K u / (1 - K u), u = 2^-24 (each partial sum's error compounds at most K times).
// The fp64 reference adds at most gamma_K in 2^-53 on top, below 1e-10 of the bound here.
TEST(Gemm, WithinTheChainBoundOfFp64) {
  namespace g = parity::kernels::gemm;
  const int64_t M = 33, N = 47, K = 700;
  auto gen = at::detail::createCPUGenerator(11);
  auto a = at::randn({M, K}, gen), b = at::randn({K, N}, gen);
  const auto exact = at::mm(a.to(at::kDouble), b.to(at::kDouble));
  const auto scale = at::mm(a.abs().to(at::kDouble), b.abs().to(at::kDouble));
  const double u = std::ldexp(1.0, -24), gamma = K * u / (1 - K * u);
  for (auto isa : {g::Isa::Avx512, g::Isa::Avx2, g::Isa::Scalar}) {
    if (!g::runs(isa)) continue;
    auto c = at::empty({M, N});
    g::multiply(isa, M, N, K, {a.data_ptr<float>(), K, 1}, {b.data_ptr<float>(), N, 1},
                c.data_ptr<float>(), N, 0, N);
    const auto err = (c.to(at::kDouble) - exact).abs();
    EXPECT_TRUE(at::all(err <= gamma * scale * (1 + 1e-10)).item<bool>()) << g::isa_name(isa);
    // And the bound is not vacuous: the error is not zero everywhere.
    EXPECT_GT(err.max().item<double>(), 0.0) << g::isa_name(isa);
  }
}

// ---------------------------------------------------------------------------------------
// The bf16 product (kernels/gemm.h, on AVX-512 BF16). Its contract: each element one chain of
// fp32 fused multiply-adds from +0, a pair of k at a time (k = 2p + 1, then k = 2p), an odd
// K's last pair completed by a zero product, denormal inputs read as zero and denormal results
// flushed to zero. The reference below is that definition, written here from it.

uint16_t bf16_bits(float x) {  // x is a bf16 value (its low 16 bits zero)
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// A [rows, cols] bf16 matrix (the strided_normal layouts, the values rounded to bf16).
struct Strided16 {
  std::vector<uint16_t> buf;
  parity::kernels::gemm::View16 view;
  float at(int64_t i, int64_t j) const {
    const uint32_t u = uint32_t(view.p[i * view.rs + j * view.cs]) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
};

Strided16 strided_bf16(int64_t rows, int64_t cols, int layout, uint32_t seed) {
  const auto m = strided_normal(rows, cols, layout, seed);
  Strided16 b;
  b.buf.resize(m.buf.size());
  for (size_t i = 0; i < m.buf.size(); ++i)
    b.buf[i] = bf16_bits(c10::BFloat16(m.buf[i]));  // round to nearest even; NaN stays NaN
  b.view = {b.buf.data() + (m.view.p - m.buf.data()), m.view.rs, m.view.cs};
  return b;
}

float pair_chain(const std::function<float(int64_t)>& a, const std::function<float(int64_t)>& b,
                 int64_t K) {
  float c = 0.0f;
  auto step = [&](int64_t k) {
    const float x = k < K ? flush(a(k)) : 0.0f, y = k < K ? flush(b(k)) : 0.0f;
    c = flush(std::fma(x, y, c));
  };
  for (int64_t p = 0; 2 * p < K; ++p) {
    step(2 * p + 1);
    step(2 * p);
  }
  return c;
}

bool skip_without_bf16() {
  if (parity::kernels::gemm::runs_bf16()) return false;
  std::printf("[ note ] this CPU has no AVX-512 BF16: the bf16 product is not checked here\n");
  return true;
}

// Shapes across every blocking edge (12 rows and 32 columns a tile, 512 values of k a block,
// 16 pairs a packed transpose, odd K), each layout of A and B: the bits of the chain, element
// by element, and C's columns outside [j0, j1) untouched.
TEST(GemmBf16Bitwise, EachElementIsItsChainOfPairs) {
  if (skip_without_bf16()) GTEST_SKIP();
  namespace g = parity::kernels::gemm;
  struct Shape {
    int64_t M, N, K;
  };
  const std::vector<Shape> shapes = {{1, 1, 1},     {1, 1, 0},     {12, 32, 32},  {13, 33, 33},
                                     {11, 31, 31},  {24, 64, 512}, {25, 65, 513}, {97, 70, 1100},
                                     {6, 16, 1027}, {200, 40, 48}};
  uint32_t seed = 101;
  for (const auto& s : shapes)
    for (int la = 0; la < 3; ++la)
      for (int lb = 0; lb < 3; ++lb) {
        const auto a = strided_bf16(s.M, s.K, la, seed++);
        const auto b = strided_bf16(s.K, s.N, lb, seed++);
        const int64_t j0 = s.N > 32 ? 32 : 0, ldc = s.N + 5;
        std::vector<float> c(s.M * ldc, -7.5f);
        g::multiply_bf16(s.M, s.N, s.K, a.view, b.view, c.data(), ldc, j0, s.N);
        int64_t bad = 0;
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const float want =
                (j >= j0 && j < s.N)
                    ? pair_chain([&](int64_t k) { return a.at(i, k); },
                                 [&](int64_t k) { return b.at(k, j); }, s.K)
                    : -7.5f;
            bad += !same_bits(c[i * ldc + j], want);
          }
        EXPECT_EQ(bad, 0) << "M " << s.M << " N " << s.N << " K " << s.K << " layouts " << la
                          << lb;
      }
}

// The bf16 product against fp64. Bound: a chain of K fp32 fused multiply-adds (an odd K's zero
// product adds nothing) rounds once per step on exact bf16 products, so
// |c - a.b| <= gamma_K sum_k |a_k b_k|, gamma_K = K u / (1 - K u), u = 2^-24, as for the fp32
// chain (the randn operands keep every partial sum far above fp32's denormals, so the flush
// never acts). project() then rounds to bf16 once: |y - a.b| <= u_bf16 |c| + |c - a.b|, with
// u_bf16 = 2^-8 and |c| <= |a.b| + gamma_K sum |a b|.
TEST(GemmBf16, WithinTheChainBoundOfFp64) {
  if (skip_without_bf16()) GTEST_SKIP();
  namespace g = parity::kernels::gemm;
  const int64_t M = 33, N = 47, K = 701;
  auto gen = at::detail::createCPUGenerator(12);
  auto a = at::randn({M, K}, gen).to(at::kBFloat16), b = at::randn({K, N}, gen).to(at::kBFloat16);
  const auto A = a.to(at::kDouble), B = b.to(at::kDouble);
  const auto exact = at::mm(A, B), scale = at::mm(A.abs(), B.abs());
  const double u = std::ldexp(1.0, -24), gamma = K * u / (1 - K * u), ub = std::ldexp(1.0, -8);
  auto c = at::empty({M, N});
  auto view = [](const at::Tensor& t) {
    return g::View16{reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()), t.stride(0),
                     t.stride(1)};
  };
  g::multiply_bf16(M, N, K, view(a), view(b), c.data_ptr<float>(), N, 0, N);
  const auto err = (c.to(at::kDouble) - exact).abs();
  EXPECT_TRUE(at::all(err <= gamma * scale * (1 + 1e-10)).item<bool>());
  EXPECT_GT(err.max().item<double>(), 0.0) << "the bound is not vacuous";
  // project(): y = a b = a (b^T)^T in bf16, rounded once.
  auto y = k::project(a, b.t().contiguous()).to(at::kDouble);
  const auto y_err = (y - exact).abs();
  const auto y_bound = ub * (exact.abs() + gamma * scale) + gamma * scale;
  EXPECT_TRUE(at::all(y_err <= y_bound * (1 + 1e-10)).item<bool>());
  EXPECT_GT(y_err.max().item<double>(), 0.0);
}

// project(), batched_project() and grouped_project() in bf16 on the bf16 product, forward and
// backward: each result is its chain rounded to bf16 (sampled), and one thread or two give the
// same bits (the products are large enough for multiply_all to split them).
TEST(GemmBf16Bitwise, ProductsAreTheirChainsAndThreadCountFree) {
  if (skip_without_bf16()) GTEST_SKIP();
  if (!parity::kernels::gemm::bf16_chosen()) GTEST_SKIP() << "PARITY_GEMM chose another product";
  const int64_t M = 300, I = 96, O = 80, E = 3;
  const std::vector<int64_t> counts{120, 0, 180};
  auto gen = at::detail::createCPUGenerator(21);
  const auto bf = [&](std::vector<int64_t> shape) {
    return at::randn(shape, gen).to(at::kBFloat16);
  };
  const auto x0 = bf({M, I}), w0 = bf({O, I}), dy0 = bf({M, O});
  const auto xb0 = bf({2, 3, 50, I}), wb0 = bf({2, 3, O, I}), dyb0 = bf({2, 3, 50, O});
  const auto wg0 = bf({E, O, I});
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    std::vector<at::Tensor> out;
    auto grad = [&](const at::Tensor& x0_, const at::Tensor& w0_, const at::Tensor& dy,
                    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f) {
      auto x = x0_.clone().requires_grad_(true), w = w0_.clone().requires_grad_(true);
      auto y = f(x, w);
      y.backward(dy);
      out.insert(out.end(), {y.detach().clone(), x.grad().clone(), w.grad().clone()});
    };
    grad(x0, w0, dy0, [](const at::Tensor& x, const at::Tensor& w) { return k::project(x, w); });
    grad(xb0, wb0, dyb0,
         [](const at::Tensor& x, const at::Tensor& w) { return k::batched_project(x, w); });
    grad(x0, wg0, dy0, [&](const at::Tensor& x, const at::Tensor& w) {
      return k::grouped_project(x, w, counts);
    });
    at::set_num_threads(1);
    return out;
  };
  const auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), 9u);
  for (size_t t = 0; t < one.size(); ++t) {
    EXPECT_EQ(one[t].scalar_type(), at::kBFloat16) << "output " << t;
    EXPECT_TRUE(at::equal(one[t], two[t])) << "output " << t << ": 1 vs 2 threads";
  }
  // project()'s y, dx and dw: the chain of each sampled element, rounded to bf16.
  auto rounded_chain = [](const at::Tensor& a, const at::Tensor& b, int64_t i, int64_t j) {
    const auto af = a.to(at::kFloat), bf = b.to(at::kFloat);  // exact
    const float c = pair_chain([&](int64_t k) { return af[i][k].item<float>(); },
                               [&](int64_t k) { return bf[k][j].item<float>(); }, a.size(1));
    return static_cast<float>(c10::BFloat16(c));
  };
  int64_t bad = 0, checked = 0;
  for (int64_t m = 1; m < M; m += 37)
    for (int64_t o = 2; o < O; o += 11, ++checked) {
      bad += !same_bits(one[0][m][o].item<float>(), rounded_chain(x0, w0.t(), m, o));
      const int64_t i = m % I;  // dw [O, I]
      bad += !same_bits(one[2][o][i].item<float>(), rounded_chain(dy0.t(), x0, o, i));
    }
  for (int64_t m = 3; m < M; m += 41)
    for (int64_t i = 1; i < I; i += 13, ++checked)
      bad += !same_bits(one[1][m][i].item<float>(), rounded_chain(dy0, w0, m, i));
  EXPECT_GT(checked, 50);
  EXPECT_EQ(bad, 0);
}

}  // namespace
