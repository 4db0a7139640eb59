// Tests for Kimi Delta Attention (kernels/kda.h).
//
//   * The fused prologue (causal_conv_fused with and without SiLU, heads_fused) and gates
//     (decay_pre_fused, rms_norm_gated_fused): tap order and the decay's element-wise steps
//     bitwise, gradients against autograd through the readable steps (fp64), thread-count
//     free bitwise; the loops' exp (loop_elems::fixed_exp) against the exact value.
//   * causal_depthwise_conv equals a hand-written loop in tap order, bitwise (fp32, bf16,
//     fp64): the header promises that fixed reduction order.
//   * kda_recurrent equals a scalar loop of the DESIGN recurrence (fp64, tolerance).
//   * Finite-difference gradient checks (fp64) of kda_recurrent, kda_chunked (w.r.t. q, k,
//     v, g, beta; T a multiple of the chunk, not a multiple, shorter than one chunk) and of
//     the whole mixer `kda` w.r.t. its input and every weight, for both core forms.
//   * Recurrent vs chunked, forward and gradients, in fp64 and fp32 within bounds derived
//     from the recurrence depth, with the observed figures printed; the mixer with either
//     core (fp64), and the mixer against its DESIGN composition (fp64).
//
// The bitwise checks are the tests named *Bitwise*; every other test is a tolerance test
// whose bound is derived next to it. All inputs come from fixed seeds.
#include "kernels/kda.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/kda_fused.h"
#include "kernels/loop_elems.h"
#include "kernels/ops.h"
#include "tests/fd_check.h"
#include "kernels/threads.h"

namespace k = parity::kernels;

namespace {

using namespace parity::testing;

// max |a - b| / max |b|: the relative figure of the recurrent-vs-chunked comparisons.
double max_rel(const at::Tensor& a, const at::Tensor& b) {
  auto ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  return ((ad - bd).abs().max() / bd.abs().max()).item<double>();
}

// ---------------------------------------------------------------------------------------
// Core inputs as the mixer makes them: q, k unit L2 norm per head (q then scaled by K^-1/2),
// v ~ N(0,1), g ~ U(-decay, 0), beta ~ U(0, 1). All fp64. The default decay, 5, is the
// mixer's range; there a chunk of 8 tokens decays the state by about e^-20, so nothing a
// form carries across a chunk boundary can show. kWeak (g ~ U(-0.1, 0)) keeps most of the
// state and its gradient across every boundary, so the tests that compare forms run both.
struct CoreInputs {
  at::Tensor q, k, v, g, beta;
  std::vector<at::Tensor> list() const { return {q, k, v, g, beta}; }
};

constexpr double kWeak = 0.1;

CoreInputs core_inputs(int64_t B, int64_t H, int64_t T, int64_t K, int64_t V, uint64_t seed,
                       double decay = 5.0) {
  auto gen = at::detail::createCPUGenerator(seed);
  CoreInputs c;
  c.q = k::l2_normalize(at::randn({B, H, T, K}, gen, f64()), 1e-6) / std::sqrt(double(K));
  c.k = k::l2_normalize(at::randn({B, H, T, K}, gen, f64()), 1e-6);
  c.v = at::randn({B, H, T, V}, gen, f64());
  c.g = -decay * at::rand({B, H, T, K}, gen, f64());
  c.beta = at::rand({B, H, T}, gen, f64());
  return c;
}

const std::vector<std::string> kCoreNames{"q", "k", "v", "g", "beta"};

// ---------------------------------------------------------------------------------------
// Causal depthwise conv: bitwise against a loop in tap order.

// y_t = sum_j w_j x_{t-J+1+j}, accumulated in tap order j = 0..J-1, zero history, in the
// element type T (each product and each sum rounded to T, as the tensor ops do). A float or
// double product goes through a volatile so that the compiler cannot fuse it with the sum
// (FMA contraction would round once instead of twice); c10::BFloat16 arithmetic rounds its
// float result to bf16 bits in every operator, which nothing can fuse.
template <class T>
T rounded_product(T a, T b) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return a * b;
  } else {
    volatile T p = a * b;
    return p;
  }
}

template <class T>
at::Tensor conv_loop(const at::Tensor& x, const at::Tensor& w) {
  const int64_t B = x.size(0), Tn = x.size(1), C = x.size(2), J = w.size(1);
  auto xc = x.contiguous(), wc = w.contiguous();
  auto y = at::empty_like(xc);
  const T* xp = xc.data_ptr<T>();
  const T* wp = wc.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < C; ++c) {
        T acc = T(0);
        for (int64_t j = 0; j < J; ++j) {
          const int64_t s = t - J + 1 + j;
          const T xv = s >= 0 ? xp[(b * Tn + s) * C + c] : T(0);
          const T prod = rounded_product<T>(wp[c * J + j], xv);
          acc = j == 0 ? prod : T(acc + prod);
        }
        yp[(b * Tn + t) * C + c] = acc;
      }
  return y;
}

class ConvBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(ConvBitwise, EqualsLoopInTapOrder) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(5);
  auto x = at::randn({2, 9, 6}, gen, f64()).to(dt);
  auto w = at::randn({6, 4}, gen, f64()).to(dt);
  auto y = k::causal_depthwise_conv(x, w);
  ASSERT_EQ(y.scalar_type(), dt);
  ASSERT_EQ(y.sizes(), x.sizes());
  at::Tensor ref = dt == at::kDouble  ? conv_loop<double>(x, w)
                   : dt == at::kFloat ? conv_loop<float>(x, w)
                                      : conv_loop<c10::BFloat16>(x, w);
  const int64_t wrong = y.ne(ref).sum().item<int64_t>();
  EXPECT_EQ(wrong, 0) << "#wrong " << wrong << " of " << y.numel();
  // Causality and the zero history, directly: y_0 depends only on x_0 (the last tap).
  EXPECT_TRUE(torch::equal(y.select(1, 0), (x.select(1, 0) * w.select(1, 3))));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ConvBitwise,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------------------
// The recurrence against a scalar loop of the DESIGN formula (fp64, long double loop).
//
// Bound: per token the kernel does a decay multiply (exp and a product, <= 3 roundings), a
// K-long dot k^T S, a subtraction, the beta product, the rank-1 update and its sum
// (<= K + 5), and the output dot (K): 2K + 8 roundings, each local error at most
// gamma_{2K+8} max|S| per element, so sqrt(K) gamma_{2K+8} max|S| in the 2-norm of a value
// column of S. The update S -> (I - beta k k^T) diag(exp g) S is non-expansive in that norm
// (||k|| = 1, beta in (0,1), exp g <= 1), so the local errors add over at most T tokens
// without amplification, and o_j = q . S_j with ||q||_2 = K^-1/2 gives
//   |o - o_exact| <= T gamma_{2K+8} max|S|   (first order; max|S| from the loop's state).
TEST(KdaRecurrent, MatchesScalarLoopFp64) {
  const int64_t B = 1, H = 2, T = 7, K = 3, V = 4;
  auto c = core_inputs(B, H, T, K, V, 21);
  auto o = k::kda_recurrent(c.q, c.k, c.v, c.g, c.beta);
  ASSERT_EQ(o.sizes(), (std::vector<int64_t>{B, H, T, V}));
  auto a = [](const at::Tensor& t) { return t.accessor<double, 4>(); };
  auto q = a(c.q), kk = a(c.k), v = a(c.v), g = a(c.g);
  auto beta = c.beta.accessor<double, 3>();
  auto oa = o.accessor<double, 4>();
  double worst = 0;
  for (int64_t h = 0; h < H; ++h) {
    std::vector<long double> S(K * V, 0.0L);  // S[i][j], i key channel, j value channel
    long double smax = 0;
    std::vector<std::vector<long double>> ref(T, std::vector<long double>(V));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) S[i * V + j] *= std::exp((long double)g[0][h][t][i]);
      for (int64_t j = 0; j < V; ++j) {
        long double kS = 0;  // (S^T k)_j
        for (int64_t i = 0; i < K; ++i) kS += S[i * V + j] * kk[0][h][t][i];
        const long double u = beta[0][h][t] * (v[0][h][t][j] - kS);
        for (int64_t i = 0; i < K; ++i) S[i * V + j] += kk[0][h][t][i] * u;
      }
      for (int64_t j = 0; j < V; ++j) {
        long double acc = 0;
        for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * q[0][h][t][i];
        ref[t][j] = acc;
      }
      for (auto s : S) smax = std::max(smax, std::abs(s));
    }
    const double bound = T * (2 * K + 8) * kU64 / (1 - (2 * K + 8) * kU64) * (double)smax;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < V; ++j) {
        const double diff = std::abs(oa[0][h][t][j] - (double)ref[t][j]);
        EXPECT_LE(diff, bound) << "h " << h << " t " << t << " j " << j;
        worst = std::max(worst, diff / (kU64 * (double)smax));
      }
  }
  std::cout << "[ observed ] kda_recurrent fp64 vs scalar loop: max |diff| / (u max|S|) = "
            << worst << " (bound " << T * (2 * K + 8) << ")\n";
}

// ---------------------------------------------------------------------------------------
// Finite differences of the core forms (fp64).

at::Tensor core_form(k::KdaImpl impl, const std::vector<at::Tensor>& x, int64_t C) {
  return k::kda_form(impl, x[0], x[1], x[2], x[3], x[4], C);
}

std::string form_name(k::KdaImpl impl) {
  std::string n = parity::spec::to_string(impl);
  n[0] = char(std::toupper(n[0]));
  return n;
}

using CoreCase = std::tuple<k::KdaImpl, int /*T*/, double /*decay*/>;

// "" for the mixer's decays, "_weak" for kWeak.
std::string decay_suffix(double decay) { return decay == kWeak ? "_weak" : ""; }

class KdaCoreGradCheck : public ::testing::TestWithParam<CoreCase> {};

TEST_P(KdaCoreGradCheck, CentralDifferencesFp64) {
  const auto [impl, T, decay] = GetParam();
  const int64_t B = 2, H = 2, K = 8, V = 8, C = 8;
  auto c = core_inputs(B, H, T, K, V, 40 + T, decay);
  TensorFn f = [impl = impl](const std::vector<at::Tensor>& x) {
    return core_form(impl, x, C);
  };
  auto r = directional_fd(f, c.list(), kCoreNames, 50 + T);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

// T = 16: two full chunks; T = 12: a padded last chunk; T = 5: shorter than one chunk;
// T = 56: the fused form's backward in four chunks (16, 16 | 16, 8) over two of its saved
// intervals (32 tokens), so both of its carries count: a state's gradient into the chunk
// before, and the state the second interval recomputes from its saved, non-zero one.
INSTANTIATE_TEST_SUITE_P(
    Forms, KdaCoreGradCheck,
    ::testing::Combine(::testing::Values(k::KdaImpl::Chunked, k::KdaImpl::Recurrent,
                                         k::KdaImpl::Fused),
                       ::testing::Values(16, 12, 5, 56), ::testing::Values(5.0, kWeak)),
    [](const auto& info) {
      return form_name(std::get<0>(info.param)) + "_T" + std::to_string(std::get<1>(info.param)) +
             decay_suffix(std::get<2>(info.param));
    });

// ---------------------------------------------------------------------------------------
// Finite differences of the whole mixer (fp64), w.r.t. x and every weight.

struct MixerSetup {
  at::Tensor x;
  std::vector<at::Tensor> weights;  // in KdaWeights field order
  k::KdaDims dims;
};

const std::vector<std::string> kMixerNames{
    "x",        "q_proj",   "k_proj",  "v_proj",      "q_conv",      "k_conv",
    "v_conv",   "beta",     "forget_a", "forget_b",   "A_log",       "dt_bias",
    "output_norm", "output_gate", "output_proj"};

k::KdaWeights as_weights(const std::vector<at::Tensor>& w) {
  return k::KdaWeights{w[0], w[1], w[2],  w[3],  w[4],  w[5],  w[6],
                       w[7], w[8], w[9], w[10], w[11], w[12], w[13]};
}

// Weights at a scale where every nonlinearity is exercised away from its linear regime:
// projections N(0, 0.3^2) (pre-activations O(1) for D = 16), conv taps U(-0.5, 0.5),
// A_log = log U(1, 16) (the model's range), dt_bias N(0, 0.5^2), o_norm 1 + N(0, 0.2^2).
MixerSetup mixer_setup(int64_t B, int64_t T, k::KdaImpl impl, uint64_t seed) {
  const int64_t D = 16, H = 2, K = 8, J = 4;
  auto gen = at::detail::createCPUGenerator(seed);
  auto n = [&](std::vector<int64_t> s, double sd) { return sd * at::randn(s, gen, f64()); };
  MixerSetup m;
  m.x = at::randn({B, T, D}, gen, f64());
  m.weights = {n({H * K, D}, 0.3),
               n({H * K, D}, 0.3),
               n({H * K, D}, 0.3),
               at::rand({H * K, 1, J}, gen, f64()) - 0.5,
               at::rand({H * K, 1, J}, gen, f64()) - 0.5,
               at::rand({H * K, 1, J}, gen, f64()) - 0.5,
               n({H, D}, 0.3),
               n({K, D}, 0.3),
               n({H * K, K}, 0.3),
               at::log(1.0 + 15.0 * at::rand({H}, gen, f64())),
               n({H, K}, 0.5),
               1.0 + n({K}, 0.2),
               n({H * K, D}, 0.3),
               n({D, H * K}, 0.3)};
  m.dims = k::KdaDims{H,    K,     J, /*chunk=*/8, /*l2norm_eps=*/1e-6, /*gate_bound=*/-5.0,
                      /*output_eps=*/1e-5, impl};
  return m;
}

class KdaMixerGradCheck : public ::testing::TestWithParam<k::KdaImpl> {};

TEST_P(KdaMixerGradCheck, CentralDifferencesFp64) {
  auto m = mixer_setup(2, 12, GetParam(), 60);
  std::vector<at::Tensor> inputs{m.x};
  inputs.insert(inputs.end(), m.weights.begin(), m.weights.end());
  const auto dims = m.dims;
  TensorFn f = [dims](const std::vector<at::Tensor>& a) {
    return k::kda(a[0], as_weights({a.begin() + 1, a.end()}), dims);
  };
  auto r = directional_fd(f, inputs, kMixerNames, 61, /*n_dirs=*/2);
  EXPECT_LE(r.worst, kFdTol) << "worst at " << r.where;
  std::cout << "[ observed ] fd rel err " << r.worst << " (bound " << kFdTol << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Forms, KdaMixerGradCheck,
                         ::testing::Values(k::KdaImpl::Chunked, k::KdaImpl::Recurrent,
                                           k::KdaImpl::Fused),
                         [](const auto& info) { return form_name(info.param); });

// ---------------------------------------------------------------------------------------
// Recurrent vs chunked.
//
// Bound, relative in the max norm (max |diff| / max |recurrent|), per form against the exact
// result, summing the roundings along the longest dependency chain (first order, u the
// unit roundoff of the dtype the core runs in), in units of u max|S|:
//   recurrent: per token 2K + 8 (see MatchesScalarLoopFp64); the update is non-expansive,
//              so over T tokens:                                  T (2K + 8)
//   chunked:   per chunk, the in-chunk log-decays G are cumulative sums of C terms of
//              size <= g_max = 5, so exp(G_t - G_i) carries a relative error up to
//              C * (C g_max) u from the cancellation G_t - G_i; then the K-long A and P
//              dots, the C-deep triangular solves, P U (C), W S (K), (K e^G)^T U (C) and
//              a few products:                        per chunk C^2 g_max + 2K + 3C + 8,
//              over ceil(T / C) chunks.
// The forms differ by at most the sum of the two (forward_depth). The errors scale with the
// state S, the figure with the output, so the relative bound is forward_depth u kappa with
// kappa = max|S| / max|o| (computed from an fp64 run of the recurrence; 5 to 13 here).
// The gradients run the adjoint of the same chains (every forward op once more) and dg
// also sums over the T later tokens through the cumulative decays: (2 forward_depth + T)
// u kappa, taking the forward kappa for the adjoint state too (it is driven by q_t R_t^T as
// the forward state is by k_t v_t^T; an assumption of this bound, not a proof).
// For T = 37, K = 16, C = 8, forward_depth = 3.4e3: with kappa ~ 7, ~1.4e-3 in fp32 and
// ~2.6e-12 in fp64 (below the 1e-10 the design asks for). That is a worst case; the
// printed observed figures sit about three orders below it. It is not vacuous: it is far
// below the O(1e-2) change a slip at one token gives (the test checks one such: a single
// token whose decay is dropped).
double forward_depth(int64_t T, int64_t K, int64_t C) {
  const double g_max = 5.0;
  const double n_chunks = double((T + C - 1) / C);
  return double(T) * (2 * K + 8) + n_chunks * (C * C * g_max + 2 * K + 3 * C + 8);
}

// max|S| / max|o| over the fp64 recurrence (S_t of every head and batch row).
double state_over_output(const CoreInputs& c) {
  const int64_t T = c.q.size(2);
  auto S = at::zeros({c.q.size(0), c.q.size(1), c.k.size(3), c.v.size(3)}, f64());
  double smax = 0, omax = 0;
  for (int64_t t = 0; t < T; ++t) {
    auto kt = c.k.select(2, t);
    S = c.g.select(2, t).exp().unsqueeze(-1) * S;
    auto kS = (kt.unsqueeze(-1) * S).sum(-2);
    auto upd = c.beta.select(2, t).unsqueeze(-1) * (c.v.select(2, t) - kS);
    S = S + kt.unsqueeze(-1) * upd.unsqueeze(-2);
    smax = std::max(smax, S.abs().max().item<double>());
    omax = std::max(omax, (c.q.select(2, t).unsqueeze(-1) * S).sum(-2).abs().max().item<double>());
  }
  return smax / omax;
}

struct Run {
  at::Tensor o;
  std::vector<at::Tensor> grads;  // q, k, v, g, beta
};

Run run_core(const CoreInputs& c, const at::Tensor& R, at::ScalarType dt, k::KdaImpl impl,
             int64_t C) {
  std::vector<at::Tensor> L;
  for (auto& t : c.list()) L.push_back(t.to(dt).requires_grad_(true));
  auto o = core_form(impl, L, C);
  auto g = torch::autograd::grad({(o * R.to(dt)).sum()}, L);
  return {o.detach(), g};
}

using FormsCase = std::tuple<at::ScalarType, int /*T*/, double /*decay*/>;
class KdaForms : public ::testing::TestWithParam<FormsCase> {};

TEST_P(KdaForms, RecurrentMatchesChunked) {
  const auto [dt, T, decay] = GetParam();
  const int64_t B = 2, H = 2, K = 16, V = 16, C = 8;
  auto c = core_inputs(B, H, T, K, V, 70 + T, decay);
  auto gen = at::detail::createCPUGenerator(71 + T);
  auto R = at::randn({B, H, T, V}, gen, f64());
  auto rec = run_core(c, R, dt, k::KdaImpl::Recurrent, C);
  auto chk = run_core(c, R, dt, k::KdaImpl::Chunked, C);
  ASSERT_EQ(chk.o.sizes(), rec.o.sizes());
  ASSERT_EQ(chk.o.scalar_type(), dt);

  const double u = dt == at::kDouble ? kU64 : kU32;
  const double kappa = state_over_output(c);
  const double fwd_bound = forward_depth(T, K, C) * u * kappa;
  const double grad_bound = (2 * forward_depth(T, K, C) + T) * u * kappa;
  if (dt == at::kDouble) {
    ASSERT_LT(fwd_bound, 1e-10);
    ASSERT_LT(grad_bound, 1e-10);
  }
  ASSERT_LT(grad_bound, 1e-2);  // not vacuous
  std::cout << "[ observed ] " << dtype_name(dt) << " T=" << T << " kappa " << kappa << "\n";

  const double of = max_rel(chk.o, rec.o);
  EXPECT_LE(of, fwd_bound) << "forward";
  std::cout << "[ observed ] " << dtype_name(dt) << " T=" << T << " o: " << of << " ("
            << of / u << " u; bound " << fwd_bound << ")\n";
  for (size_t i = 0; i < 5; ++i) {
    const double e = max_rel(chk.grads[i], rec.grads[i]);
    EXPECT_LE(e, grad_bound) << "d" << kCoreNames[i];
    std::cout << "[ observed ] " << dtype_name(dt) << " T=" << T << " d" << kCoreNames[i]
              << ": " << e << " (" << e / u << " u; bound " << grad_bound << ")\n";
  }

  // The bound can fail: dropping the decay of one token (g_t = 0 at t = T/2 for one head,
  // the kind of slip a chunk boundary invites) moves the output by far more.
  auto broken = c;
  broken.g = c.g.clone();
  broken.g[0][0][T / 2].zero_();
  auto moved = run_core(broken, R, dt, k::KdaImpl::Chunked, C);
  const double slip = max_rel(moved.o, rec.o);
  EXPECT_GT(slip, 10 * fwd_bound);
  std::cout << "[ observed ] " << dtype_name(dt) << " T=" << T << " one dropped decay moves o by "
            << slip << "\n";
}

// T = 37: not a multiple of the chunk (8); T = 5: shorter than one chunk; T = 32: four
// full chunks.
INSTANTIATE_TEST_SUITE_P(DtypesAndLengths, KdaForms,
                         ::testing::Combine(::testing::Values(at::kDouble, at::kFloat),
                                            ::testing::Values(37, 5, 32),
                                            ::testing::Values(5.0, kWeak)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_T" +
                                  std::to_string(std::get<1>(info.param)) +
                                  decay_suffix(std::get<2>(info.param));
                         });

// The mixer with either core gives the same output (fp64). The layers around the core are
// identical ops on identical inputs; the core's relative error e (bounded above) passes
// through the per-head RMSNorm, which can raise a max-norm relative error by at most
// max|o| / rms(o) <= sqrt(K), and through o_proj's H*K-long sums, which can raise it by at
// most sum|W||o| / max|y| <= H*K max|W| max|o| / max|y| (measured here, ~1 to 10). With
// e = forward_depth * u = 1.4e-13 for T = 21, K = 8, C = 8, a bound of 1e-10 leaves a factor
// 700 for those two amplifications (sqrt(8) * 16 = 45 in the worst case).
TEST(KdaMixer, ChunkedMatchesRecurrentFp64) {
  const int64_t T = 21;
  auto m = mixer_setup(2, T, k::KdaImpl::Chunked, 80);
  auto d_rec = m.dims;
  d_rec.impl = k::KdaImpl::Recurrent;
  auto yc = k::kda(m.x, as_weights(m.weights), m.dims);
  auto yr = k::kda(m.x, as_weights(m.weights), d_rec);
  ASSERT_EQ(yc.scalar_type(), at::kDouble);
  ASSERT_LT(forward_depth(T, m.dims.head_dim, m.dims.chunk) * kU64, 2e-13);
  const double e = max_rel(yc, yr);
  EXPECT_LE(e, 1e-10);
  std::cout << "[ observed ] mixer fp64 chunked vs recurrent: " << e << " (bound 1e-10)\n";
}

// The mixer against torchtitan's composition (docs/design.md section 10), re-derived here from the
// text (fp64): q, k, v projections, each through the causal depthwise conv (the loop above)
// and SiLU (x sigmoid(x)); q, k unit L2 norm per head (x / sqrt(sum x^2 + 1e-6)), q times
// K^-1/2; beta = sigmoid(beta(x)); g = -5 sigmoid(exp(A_log) (forget_b(forget_a(x)) +
// dt_bias)) per head and key channel; the core (the recurrence, checked against a scalar
// loop above); KimiRMSNormGated: per-head RMSNorm of o (eps 1e-5) with output_norm, times
// sigmoid(output_gate(x)); then output_proj.
//
// Bound: the two evaluations differ only in the association of a few element-wise
// expressions (SiLU, the L2 norm's eps placement, the RMSNorm) and in which core runs
// (chunked vs recurrent, relative difference <= forward_depth u = 1.4e-13 here). As in
// ChunkedMatchesRecurrentFp64, the RMSNorm and o_proj amplify a max-norm relative error by
// at most sqrt(K) * 16 = 45, so 1e-10 covers it with a factor > 10; a wrong formula (a
// missing K^-1/2, a decay without the -5, a gate on the wrong side) moves it by O(1).
TEST(KdaMixer, MatchesTorchtitanCompositionFp64) {
  const int64_t B = 2, T = 13;
  auto m = mixer_setup(B, T, k::KdaImpl::Chunked, 90);
  const auto& w = m.weights;
  const int64_t H = m.dims.n_heads, K = m.dims.head_dim, D = m.x.size(2);
  const auto& x = m.x;
  auto lin = [](const at::Tensor& a, const at::Tensor& W) { return at::matmul(a, W.t()); };
  auto silu = [](const at::Tensor& a) { return a * at::sigmoid(a); };
  auto heads = [&](const at::Tensor& a) { return a.reshape({B, T, H, K}).permute({0, 2, 1, 3}); };
  auto unit = [](const at::Tensor& a) {
    return a / at::sqrt(a.pow(2).sum(-1, true) + 1e-6);  // the kernel's l2norm eps, inside
  };
  auto taps = [](const at::Tensor& t) { return t.select(1, 0); };  // [C,1,J] -> [C,J]
  auto q = unit(heads(silu(conv_loop<double>(lin(x, w[0]), taps(w[3]))))) / std::sqrt(double(K));
  auto kk = unit(heads(silu(conv_loop<double>(lin(x, w[1]), taps(w[4])))));
  auto v = heads(silu(conv_loop<double>(lin(x, w[2]), taps(w[5]))));
  auto beta = at::sigmoid(lin(x, w[6])).permute({0, 2, 1});                  // [B,H,T]
  auto rate = at::exp(w[9]).repeat_interleave(K);                            // [H*K]
  auto g = heads(-5.0 * at::sigmoid(rate * (lin(lin(x, w[7]), w[8]) + w[10].reshape({H * K}))));
  auto o = k::kda_recurrent(q, kk, v, g, beta).permute({0, 2, 1, 3});       // [B,T,H,K]
  // KimiRMSNormGated: per head, eps 1e-5, times sigmoid(gate).
  o = o / at::sqrt(o.pow(2).mean(-1, true) + 1e-5) * w[11] *
      at::sigmoid(lin(x, w[12]).reshape({B, T, H, K}));
  auto ref = lin(o.reshape({B, T, H * K}), w[13]);
  ASSERT_EQ(ref.sizes(), (std::vector<int64_t>{B, T, D}));

  auto y = k::kda(m.x, as_weights(m.weights), m.dims);
  const double e = max_rel(y, ref);
  EXPECT_LE(e, 1e-10);
  std::cout << "[ observed ] mixer fp64 vs torchtitan's composition: " << e << " (bound 1e-10)\n";
}

// ---------------------------------------------------------------------------------------
// Fused vs recurrent.
//
// Worst-case bound (first order, relative in the max norm, u the unit roundoff of the dtype
// the core runs in). The fused forward runs the recurrence's own operations per token in
// the same order: the decay product, the K-long dot w = S'^T k (sequential over key
// channels), r = v - w, the beta product, the rank-1 update and the K-long output dot:
// 2K + 8 roundings, T (2K + 8) over the sequence (MatchesScalarLoopFp64), so the two forms
// differ by at most 2 T (2K + 8) u kappa. The per-token adjoint (kda_core::backward, and
// the autograd adjoint of the recurrent form, of the same depth): the state-gradient updates
// (q do^T, k dw^T, the decay: 3 products, 2 sums), du (a K-long dot: K / lanes vector steps
// and a lane tree, <= K roundings), dq, dk, dg, dbeta (V-long sums over value columns, by
// tiles of 32: <= V + V / 32): <= 2K + 2V + 8, over T tokens, plus the T-long path of dg
// through the later decays: adjoint_grad_depth = 2 * 2T(2K + 8) + T (2K + 2V + 8) + T, for
// the two adjoints together. The fused Function's backward is the chunked form
// (kda_core::backward_chunked), whose gradients run the chunked form's chains once more:
// 2 forward_depth(T, K, C) + T (RecurrentMatchesChunked). (It forms its in-chunk decays as
// products of the tokens' exp(g), each within 2 ulp (FixedExp): at most C (2 + 1) roundings
// against the C^2 g_max that forward_depth allows for exp(G_t - G_i), so the term still
// covers it.) Fused against the recurrent form's
// autograd, the gradients differ by at most (adjoint_grad_depth + chunked_grad_depth) u kappa.
double fused_fwd_depth(int64_t T, int64_t K) { return 2.0 * double(T) * (2 * K + 8); }
double adjoint_grad_depth(int64_t T, int64_t K, int64_t V) {
  return 2 * fused_fwd_depth(T, K) + double(T) * (2 * K + 2 * V + 8) + double(T);
}
double chunked_grad_depth(int64_t T, int64_t K, int64_t C) {
  return 2 * forward_depth(T, K, C) + double(T);
}
double fused_grad_depth(int64_t T, int64_t K, int64_t V, int64_t C) {
  return adjoint_grad_depth(T, K, V) + chunked_grad_depth(T, K, C);
}

// C is the chunk the fused backward runs in, for the bound: kda_form gives the fused form its
// own 32-token interval, inside which the backward takes chunks of 16, whatever a caller asks
// (and the recurrent form has none), so every case says 16.
struct FusedCase {
  const char* name;
  at::ScalarType dt;
  int64_t B, H, T, K, V, C;
  double decay = 5.0;
};

class KdaFused : public ::testing::TestWithParam<FusedCase> {};

// The test asserts the derived worst-case bound above, in every dtype. In fp64 it is above
// 1e-12 for every case here (debugmodel size: 2T(2K+8) = 1.3e5 roundings, 2.5e-10 on the
// output), so a figure of 1e-12 would be an acceptance number, not a bound: a reading above it
// would not show a wrong kernel. Whether the observed errors also meet 1e-12 is printed, with
// the probabilistic bound (independent rounding errors of mean zero: lambda sqrt(n) u with
// probability >= 1 - 2 exp(-lambda^2 / 2)), lambda = 8 (failure odds < 1e-13).
TEST_P(KdaFused, MatchesRecurrent) {
  const auto p = GetParam();
  auto c = core_inputs(p.B, p.H, p.T, p.K, p.V, 300 + p.T + p.K, p.decay);
  auto gen = at::detail::createCPUGenerator(301 + p.T);
  auto R = at::randn({p.B, p.H, p.T, p.V}, gen, f64());
  auto rec = run_core(c, R, p.dt, k::KdaImpl::Recurrent, p.C);
  auto fus = run_core(c, R, p.dt, k::KdaImpl::Fused, p.C);
  ASSERT_EQ(fus.o.sizes(), rec.o.sizes());
  ASSERT_EQ(fus.o.scalar_type(), p.dt);
  for (size_t i = 0; i < 5; ++i) ASSERT_EQ(fus.grads[i].sizes(), rec.grads[i].sizes());

  const double u = p.dt == at::kDouble ? kU64 : kU32;
  const double kappa = state_over_output(c);
  const double fwd_bound = fused_fwd_depth(p.T, p.K) * u * kappa;
  const double grad_bound = fused_grad_depth(p.T, p.K, p.V, p.C) * u * kappa;
  std::cout << "[ observed ] " << p.name << " kappa " << kappa << ", worst-case bounds o "
            << fwd_bound << " grads " << grad_bound << ", probabilistic (lambda 8) o "
            << 8 * std::sqrt(fused_fwd_depth(p.T, p.K)) * u * kappa << "\n";
  // Not vacuous: a misrouted term moves a gradient by O(1) of its scale (the largest bound
  // here, padded_fp32's, is 1.3e-2: the sum of the adjoint's and the chunked form's chains).
  ASSERT_LT(grad_bound, 5e-2);

  const double of = max_rel(fus.o, rec.o);
  EXPECT_LE(of, fwd_bound) << "forward";
  double worst_grad = 0;
  for (size_t i = 0; i < 5; ++i) worst_grad = std::max(worst_grad, max_rel(fus.grads[i], rec.grads[i]));
  if (p.dt == at::kDouble)
    std::cout << "[ observed ] " << p.name << " 1e-12 on the output and every gradient: "
              << (std::max(of, worst_grad) <= 1e-12 ? "met" : "not met") << "\n";
  std::cout << "[ observed ] " << p.name << " o: " << of << " (" << of / u << " u; bound "
            << fwd_bound << ")\n";
  for (size_t i = 0; i < 5; ++i) {
    const double e = max_rel(fus.grads[i], rec.grads[i]);
    EXPECT_LE(e, grad_bound) << "d" << kCoreNames[i];
    std::cout << "[ observed ] " << p.name << " d" << kCoreNames[i] << ": " << e << " ("
              << e / u << " u; bound " << grad_bound << ")\n";
  }

  // The bound can fail: one token's decay dropped moves the output by far more.
  auto broken = c;
  broken.g = c.g.clone();
  broken.g[0][0][p.T / 2].zero_();
  const double slip = max_rel(run_core(broken, R, p.dt, k::KdaImpl::Fused, p.C).o, rec.o);
  EXPECT_GT(slip, 10 * fwd_bound);
}

// T never a multiple of the chunk; key and value widths that are whole vectors (16 floats,
// 8 doubles) and widths that are not (the kernel pads them); debugmodel's heads (4 x 128) and
// tiny's (16); "_weak" cases with decays that carry across chunks.
INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaFused,
    ::testing::Values(FusedCase{"debugmodel_fp64", at::kDouble, 1, 4, 250, 128, 128, 16},
                      FusedCase{"tiny_fp64", at::kDouble, 2, 2, 37, 16, 16, 16},
                      FusedCase{"padded_fp64", at::kDouble, 2, 2, 21, 12, 20, 16},
                      FusedCase{"tiny_fp32", at::kFloat, 2, 2, 37, 16, 16, 16},
                      FusedCase{"padded_fp32", at::kFloat, 2, 2, 45, 24, 40, 16},
                      FusedCase{"short_fp32", at::kFloat, 1, 2, 5, 16, 16, 16},
                      FusedCase{"debugmodel_fp64_weak", at::kDouble, 1, 4, 250, 128, 128, 16,
                                kWeak},
                      FusedCase{"padded_fp64_weak", at::kDouble, 2, 2, 21, 12, 20, 16, kWeak},
                      FusedCase{"padded_fp32_weak", at::kFloat, 2, 2, 45, 24, 40, 16, kWeak}),
    [](const auto& info) { return std::string(info.param.name); });

bool same_bits(const Run& a, const Run& b) {
  if (!torch::equal(a.o, b.o)) return false;
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (!torch::equal(a.grads[i], b.grads[i])) return false;
  return true;
}

// Bitwise: two runs give the same bits, and so do 1 and 2 threads (each (row, head) is one
// thread's work, in a fixed order). fp32, debugmodel heads, two rows.
TEST(KdaFusedBitwise, RepeatableAndThreadCountFree) {
  auto c = core_inputs(2, 4, 100, 128, 128, 310);
  auto gen = at::detail::createCPUGenerator(311);
  auto R = at::randn({2, 4, 100, 128}, gen, f64());
  auto one = run_core(c, R, at::kFloat, k::KdaImpl::Fused, 16);
  auto again = run_core(c, R, at::kFloat, k::KdaImpl::Fused, 16);
  EXPECT_TRUE(same_bits(one, again)) << "two runs differ";
  parity::kernels::pin_threads(2);
  auto two = run_core(c, R, at::kFloat, k::KdaImpl::Fused, 16);
  parity::kernels::pin_threads(1);
  EXPECT_TRUE(same_bits(one, two)) << "1 and 2 threads differ";
}

// Bitwise: the chunk length (the saved states' interval) changes no bit of the output (the
// forward runs the recurrence token by token whatever it is). The gradients come from the
// chunked form over chunks of that length, so they change with it, each within the bound of
// KdaFused.MatchesRecurrent against the recurrent form's autograd (fp32, debugmodel heads,
// T = 100; lengths below, at, between and above T). With kappa from the fp64 recurrence,
// the largest bound here (C = 300 > T: one chunk of 100, C^2 g_max = 5e4 roundings) is
// about 2e-2 of the gradients' scale.
TEST(KdaFusedBitwise, ChunkLengthChangesNoBitOfTheOutput) {
  auto c = core_inputs(1, 4, 100, 128, 128, 320);
  c.g = c.g * 0.02;  // weak decays: every chunk boundary carries (ChunkedBackwardMatchesTheAdjoint)
  auto gen = at::detail::createCPUGenerator(321);
  auto R = at::randn({1, 4, 100, 128}, gen, f64());
  auto fused = [&](int64_t chunk) -> ::Run {
    std::vector<at::Tensor> L;
    for (auto& t : c.list()) L.push_back(t.to(at::kFloat).requires_grad_(true));
    auto o = k::kda_fused(L[0], L[1], L[2], L[3], L[4], chunk);
    auto g = torch::autograd::grad({(o * R.to(at::kFloat)).sum()}, L);
    return ::Run{o.detach(), g};
  };
  const auto rec = run_core(c, R, at::kDouble, k::KdaImpl::Recurrent, 16);
  const double kappa = state_over_output(c);
  const auto base = fused(16);
  for (int64_t chunk : {1, 7, 32, 100, 300}) {
    const auto other = fused(chunk);
    EXPECT_TRUE(torch::equal(base.o, other.o)) << "output, chunk " << chunk;
    const double bound = fused_grad_depth(100, 128, 128, std::min<int64_t>(chunk, 100)) * kU32 * kappa;
    for (size_t i = 0; i < 5; ++i)
      EXPECT_LE(max_rel(other.grads[i].to(at::kDouble), rec.grads[i]), bound)
          << "d" << kCoreNames[i] << ", chunk " << chunk;
  }
}

// The two backwards of kda_core on the same forward buffers: the per-token adjoint
// (kda_core::backward) and the chunked form (kda_core::backward_chunked, what the fused
// Function runs), fp64 and fp32, T not a multiple of the chunk, K and V padded and not. Bound:
// (adjoint_grad_depth + chunked_grad_depth) u kappa, as in KdaFused.MatchesRecurrent (the
// adjoint's depth stands for the per-token adjoint here). In fp64 the observed figure is
// printed: a few ulp of the gradients' scale.
TEST(KdaCore, ChunkedBackwardMatchesTheAdjoint) {
  struct Case {
    at::ScalarType dt;
    int64_t T, K, V, C;
  };
  // fp32 at small widths only: at K = V = 128 the worst-case bound exceeds 1e-2 (the fp64
  // cases cover those widths).
  for (const Case cs : {Case{at::kDouble, 70, 128, 128, 16}, Case{at::kDouble, 45, 24, 40, 16},
                        Case{at::kFloat, 37, 16, 16, 8}, Case{at::kFloat, 21, 12, 20, 8}}) {
    // Weak decays (g ~ U(-0.1, 0)): the state and its gradient then cross every chunk
    // boundary with most of their size (at the mixer's U(-5, 0) a chunk's decay is ~e^-40,
    // and a term carried across chunks could be dropped unseen).
    auto c = core_inputs(1, 1, cs.T, cs.K, cs.V, 340 + cs.T);
    c.g = c.g * 0.02;
    auto gen = at::detail::createCPUGenerator(341);
    const auto dout = at::randn({1, 1, cs.T, cs.V}, gen, f64()).to(cs.dt).contiguous();
    const bool fp64 = cs.dt == at::kDouble;
    const k::kda_core::Shape shape{cs.T, cs.K, cs.V, cs.C};
    auto as = [&](const at::Tensor& t) { return t.to(cs.dt).contiguous(); };
    const auto q = as(c.q), kk = as(c.k), v = as(c.v), g = as(c.g), beta = as(c.beta);
    auto o = at::empty_like(v), a = at::empty_like(g);
    auto states = at::empty({k::kda_core::state_elems(shape, fp64)}, q.options());
    auto r = at::empty({cs.T, k::kda_core::padded(cs.V, fp64)}, q.options());
    std::vector<at::Tensor> adj, chk;
    for (auto* out : {&adj, &chk})
      *out = {at::empty_like(q), at::empty_like(kk), at::empty_like(v), at::empty_like(g),
              at::empty_like(beta)};
    AT_DISPATCH_FLOATING_TYPES(cs.dt, "test", [&] {
      auto p = [](const at::Tensor& t) { return t.data_ptr<scalar_t>(); };
      k::kda_core::forward(shape, p(q), p(kk), p(v), p(g), p(beta), p(o), p(states), p(r), p(a));
      k::kda_core::backward(shape, p(q), p(kk), p(a), p(beta), p(states), p(r), p(dout),
                            p(adj[0]), p(adj[1]), p(adj[2]), p(adj[3]), p(adj[4]));
      k::kda_core::backward_chunked(shape, p(q), p(kk), p(a), p(beta), p(states), p(r),
                                    p(dout), p(chk[0]), p(chk[1]), p(chk[2]), p(chk[3]),
                                    p(chk[4]));
    });
    const double u = fp64 ? kU64 : kU32;
    const double bound = fused_grad_depth(cs.T, cs.K, cs.V, cs.C) * u * state_over_output(c);
    ASSERT_LT(bound, 1e-2);  // not vacuous
    for (size_t i = 0; i < 5; ++i) {
      const double e = max_rel(chk[i], adj[i]);
      EXPECT_LE(e, bound) << c10::toString(cs.dt) << " T " << cs.T << " d" << kCoreNames[i];
      EXPECT_GT(adj[i].abs().max().item<double>(), 0.0) << "d" << kCoreNames[i];
      if (fp64)
        std::cout << "[ observed ] chunked vs adjoint fp64 T " << cs.T << " d" << kCoreNames[i]
                  << ": " << e << " (" << e / u << " u; bound " << bound << ")\n";
    }
  }
}

// Bitwise: a forward no backward can follow (grad mode off, or no input requiring grad) saves
// no states and gives the output of the saving forward, bit for bit. fp32 and fp64, T = 100,
// V = 72 (not whole vectors).
TEST(KdaFusedBitwise, ForwardWithoutBackwardKeepsTheBits) {
  auto c = core_inputs(2, 2, 100, 64, 72, 330);
  for (auto dt : {at::kFloat, at::kDouble}) {
    std::vector<at::Tensor> L, plain;
    for (auto& t : c.list()) {
      L.push_back(t.to(dt).requires_grad_(true));
      plain.push_back(t.detach().to(dt));
    }
    const auto saving = k::kda_fused(L[0], L[1], L[2], L[3], L[4], 16);
    ASSERT_TRUE(saving.requires_grad());
    at::Tensor no_grad;
    {
      at::NoGradGuard guard;
      no_grad = k::kda_fused(L[0], L[1], L[2], L[3], L[4], 16);
    }
    const auto no_input = k::kda_fused(plain[0], plain[1], plain[2], plain[3], plain[4], 16);
    EXPECT_FALSE(no_grad.requires_grad());
    EXPECT_FALSE(no_input.requires_grad());
    EXPECT_TRUE(torch::equal(saving.detach(), no_grad)) << dt << ": grad mode off";
    EXPECT_TRUE(torch::equal(saving.detach(), no_input)) << dt << ": no input requires grad";
  }
}

// The mixer with the fused core matches the recurrent one (fp64); the bound is the one of
// ChunkedMatchesRecurrentFp64, with the fused depth 2T(2K+8) u = 1.1e-13 for T = 21, K = 8.
TEST(KdaMixer, FusedMatchesRecurrentFp64) {
  const int64_t T = 21;
  auto m = mixer_setup(2, T, k::KdaImpl::Fused, 81);
  auto d_rec = m.dims;
  d_rec.impl = k::KdaImpl::Recurrent;
  ASSERT_LT(fused_fwd_depth(T, m.dims.head_dim) * kU64, 2e-13);
  const double e = max_rel(k::kda(m.x, as_weights(m.weights), m.dims),
                           k::kda(m.x, as_weights(m.weights), d_rec));
  EXPECT_LE(e, 1e-10);
  std::cout << "[ observed ] mixer fp64 fused vs recurrent: " << e << " (bound 1e-10)\n";
}

// ---------------------------------------------------------------------------------------
// The fused prologue (causal_conv_fused, heads_fused), which kda() runs with --kda fused.

// A function of tensors with its gradients: the output and d sum(out * R) / d input_i.
std::vector<at::Tensor> value_and_grads(const std::function<at::Tensor(std::vector<at::Tensor>&)>& f,
                                        const std::vector<at::Tensor>& inputs,
                                        const at::Tensor& R) {
  std::vector<at::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  auto out = f(leaves);
  (out.to(at::kDouble) * R).sum().backward();
  std::vector<at::Tensor> r{out.detach()};
  for (const auto& t : leaves) r.push_back(t.grad());
  return r;
}

// Bitwise: in fp32 and fp64 the fused conv is causal_depthwise_conv (the same products and
// sums in tap order); in bf16 it is the fp32 tap-order loop rounded once.
class KdaPrepConvBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KdaPrepConvBitwise, MatchesTapOrder) {
  const auto dt = GetParam();
  auto gen = at::detail::createCPUGenerator(400);
  auto x = at::randn({2, 9, 70}, gen, f64()).to(dt);  // 70 channels: a tile and a tail
  auto w = at::randn({70, 4}, gen, f64()).to(dt);
  auto y = k::causal_conv_fused(x, w);
  ASSERT_EQ(y.scalar_type(), dt);
  at::Tensor ref = dt == at::kBFloat16
                       ? conv_loop<float>(x.to(at::kFloat), w.to(at::kFloat)).to(dt)
                       : k::causal_depthwise_conv(x, w);
  const int64_t wrong = y.ne(ref).sum().item<int64_t>();
  EXPECT_EQ(wrong, 0) << "#wrong " << wrong << " of " << y.numel();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KdaPrepConvBitwise,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// bf16 rounding point of the short convolution: SiLU applies to the fp32 sum and the result
// rounds once (attention-gym's causal_conv1d). One channel, taps (0, 0, 0, 1.0625), x_0 = 1.0625,
// all exact in bf16:
//   c_0 = 1.0625^2 = 1.12890625, 144.5 bf16 steps of 2^-7: rounding c first gives 1.125 (even)
//   silu(1.12890625) = 0.85304332..., 218.38 steps of 2^-8: rounded once, 218 * 2^-8 = 0.8515625
//   silu(1.125)      = 0.84927936..., 217.42 steps:                       217 * 2^-8 = 0.84765625
// Both well away from a tie, so fp32's own rounding of the SiLU cannot move them. Both forms:
// the fused loop and the readable composition kda() runs for --kda chunked and recurrent.
TEST(KdaPrep, Bf16ConvRoundsOnceAfterTheSilu) {
  const auto bf = at::kBFloat16;
  auto x = at::tensor({1.0625f, 0.0f}).view({1, 2, 1}).to(bf);
  auto w = at::tensor({0.0f, 0.0f, 0.0f, 1.0625f}).view({1, 4}).to(bf);
  const auto fused = k::causal_conv_fused(x, w, /*silu=*/true);
  ASSERT_EQ(fused.scalar_type(), bf);
  EXPECT_EQ(fused[0][0][0].item<float>(), 0.8515625f);  // not 0.84765625
  const auto readable = k::conv_silu(x, w);
  ASSERT_EQ(readable.scalar_type(), bf);
  EXPECT_EQ(readable[0][0][0].item<float>(), 0.8515625f);
}

// The conv's hand-written gradients against autograd through causal_depthwise_conv (fp64).
// Bound, element by element: dx is a sum of at most J products and dw of at most B T, in
// different orders in the two evaluations, so they differ by at most 2 gamma_n times the
// same sums of absolute values (n = B T, the longer), which the readable conv computes from
// |x|, |w| and |R|.
TEST(KdaPrep, ConvGradientsMatchAutogradFp64) {
  const int64_t B = 2, T = 11, C = 6, J = 4;
  auto gen = at::detail::createCPUGenerator(401);
  auto x = at::randn({B, T, C}, gen, f64()), w = at::randn({C, J}, gen, f64());
  auto R = at::randn({B, T, C}, gen, f64());
  auto fused = value_and_grads([](auto& a) { return k::causal_conv_fused(a[0], a[1]); },
                               {x, w}, R);
  auto readable = value_and_grads(
      [](auto& a) { return k::causal_depthwise_conv(a[0], a[1]); }, {x, w}, R);
  auto sizes = value_and_grads(
      [](auto& a) { return k::causal_depthwise_conv(a[0], a[1]); }, {x.abs(), w.abs()},
      R.abs());
  const double g = 2 * gamma(double(B * T), kU64);
  for (int i = 1; i <= 2; ++i) {
    auto excess = ((fused[i] - readable[i]).abs() - g * sizes[i]).max().item<double>();
    EXPECT_LE(excess, 0.0) << (i == 1 ? "dx" : "dw");
  }
  EXPECT_TRUE(fused[0].equal(readable[0]));
}

// The loops' exp against the exact value (long double): within 2 ulp of the result's type,
// over the whole finite range of both types, and its edges. Bound: 1/2 ulp from the last
// product's rounding (the power-of-two factors are exact); below 1.2 ulp from Horner's
// roundings (step i's rounding is weighed by r^i / i!, |r| <= ln2 / 2, a sum below 1.2); at
// most 0.35 ulp from rounding r = (x - n ln2_hi) - n ln2_lo (e^r moves by |dr| relative); the
// Taylor remainder below 0.05 ulp. (Its header asks for files built without FMA
// contraction; this one is built for plain x86-64, which has no FMA to contract into.)
template <class A>
void expect_fixed_exp_within_two_ulp(A lo, A hi, int64_t points) {
  double worst = 0;
  A worst_x = 0;
  for (int64_t i = 0; i <= points; ++i) {
    const A x = lo + (hi - lo) * A(i) / A(points);
    const long double exact = std::exp((long double)x);
    const A got = k::loop_elems::fixed_exp(x);
    const A near = A(exact);
    const long double ulp = (long double)std::nextafter(near, std::numeric_limits<A>::infinity()) - near;
    const double err = double(std::fabs((long double)got - exact) / ulp);
    if (err > worst) worst = err, worst_x = x;
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  std::cout << "[ observed ] fixed_exp<" << (sizeof(A) == 4 ? "float" : "double")
            << "> worst " << worst << " ulp at " << worst_x << "\n";
}

TEST(FixedExp, WithinTwoUlpOfExact) {
  expect_fixed_exp_within_two_ulp<float>(-87.33f, 88.72f, 400000);
  expect_fixed_exp_within_two_ulp<float>(-1e-3f, 1e-3f, 20000);
  expect_fixed_exp_within_two_ulp<double>(-708.39, 709.78, 400000);
  expect_fixed_exp_within_two_ulp<double>(-1e-3, 1e-3, 20000);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(k::loop_elems::fixed_exp(0.0f), 1.0f);
  EXPECT_EQ(k::loop_elems::fixed_exp(89.0f), inf);
  EXPECT_EQ(k::loop_elems::fixed_exp(inf), inf);
  EXPECT_EQ(k::loop_elems::fixed_exp(-88.0f), 0.0f);
  EXPECT_EQ(k::loop_elems::fixed_exp(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(k::loop_elems::fixed_exp(std::nanf(""))));
  EXPECT_EQ(k::loop_elems::fixed_exp(710.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(k::loop_elems::fixed_exp(-709.0), 0.0);
  EXPECT_TRUE(std::isnan(k::loop_elems::fixed_exp(std::nan(""))));
}

// The conv with SiLU against autograd through silu(causal_depthwise_conv) (fp64). The conv
// part is the same bits (above); silu(c) = c / (1 + e^-c) differs only through exp (ours
// within 2u, ATen's within 1u) and the two roundings each side, so by at most 7u |y|. With
// s = sigmoid(c), the conv's output gradient dc = dy s (1 + c (1 - s)): s differs by at most
// 7u s, q = 1 + c (1 - s) is formed within 3u (1 + |c|) on each side plus |c| 7u, so
// |dc - dc'| <= |dy| (7u |q| + 13u (1 + |c|) + 4u |q|) <= 24u |dy| (1 + |c|) (|q| <= 1 + |c|).
// dx and dw then sum those as the plain conv does: the plain bound 2 gamma_n on |dc|, plus
// the dc difference carried through the same sums, 24u |dy| (1 + |c|) (25u: second order).
TEST(KdaPrep, ConvSiluGradientsMatchAutogradFp64) {
  const int64_t B = 2, T = 11, C = 70, J = 4;  // 70 channels: a tile and a tail
  const double u = kU64;
  auto gen = at::detail::createCPUGenerator(404);
  auto x = 2 * at::randn({B, T, C}, gen, f64()), w = at::randn({C, J}, gen, f64());
  auto R = at::randn({B, T, C}, gen, f64());
  auto fused = value_and_grads([](auto& a) { return k::causal_conv_fused(a[0], a[1], true); },
                               {x, w}, R);
  auto readable = value_and_grads(
      [](auto& a) { return at::silu(k::causal_depthwise_conv(a[0], a[1])); }, {x, w}, R);
  auto c = k::causal_depthwise_conv(x, w);
  auto s = at::sigmoid(c);
  auto dc = R * s * (1 + c * (1 - s));
  auto Rb = 2 * gamma(double(B * T), u) * dc.abs() + 25 * u * R.abs() * (1 + c.abs());
  auto sizes = value_and_grads(
      [](auto& a) { return k::causal_depthwise_conv(a[0], a[1]); }, {x.abs(), w.abs()}, Rb);
  EXPECT_LE(((fused[0] - readable[0]).abs() - 8 * u * readable[0].abs()).max().item<double>(),
            0.0)
      << "y";
  for (int i = 1; i <= 2; ++i) {
    auto excess = ((fused[i] - readable[i]).abs() - sizes[i]).max().item<double>();
    EXPECT_LE(excess, 0.0) << (i == 1 ? "dx" : "dw");
  }
}

// heads_fused against the readable steps (l2_normalize, cast, scale, heads layout), fp64.
// Bound, per (row, token, head), first order in u: the two evaluations sum the K squares in
// different orders (each within gamma_K of the exact sum), so 1/sqrt differs by at most
// (K + 4) u relative and n = a inv by (K + 6) u: forward |diff| <= 2 (K + 6) u max|n|. The
// gradient da = inv dn - a inv^3 <a, dn> has both terms at most inv sum|dn| in size
// (|a_k| inv <= 1), each evaluated within (K + 6) u of exact, so the two differ by at most
// 4 (K + 6) u inv sum_k |dn_k|, dn = scale R.
TEST(KdaPrep, HeadsMatchReadableFp64) {
  const int64_t B = 2, T = 7, H = 3, K = 8;
  const double eps = 1e-6, scale = 0.3;
  auto gen = at::detail::createCPUGenerator(402);
  auto a = at::randn({B, T, H * K}, gen, f64());
  auto R = at::randn({B, H, T, K}, gen, f64());
  for (bool l2 : {true, false}) {
    const double sc = l2 ? scale : 1.0;
    auto fused = value_and_grads(
        [&](auto& in) { return k::heads_fused(in[0], H, l2, eps, sc); }, {a}, R);
    auto readable = value_and_grads(
        [&](auto& in) {
          auto h = in[0].view({B, T, H, K});
          if (l2) h = k::l2_normalize(h, eps) * sc;
          return h.permute({0, 2, 1, 3});
        },
        {a}, R);
    const double u = kU64, depth = double(K + 6);
    auto nrm = fused[0].abs().max().item<double>();
    EXPECT_LE((fused[0] - readable[0]).abs().max().item<double>(), 2 * depth * u * nrm)
        << "forward, l2 " << l2;
    auto inv = 1.0 / at::sqrt(a.view({B, T, H, K}).pow(2).sum(-1, true) + eps);  // [B,T,H,1]
    auto dn_sum = (sc * R).abs().sum(-1, true).permute({0, 2, 1, 3});            // [B,T,H,1]
    auto bound = 4 * depth * u * (l2 ? inv * dn_sum : dn_sum);
    auto diff = (fused[1] - readable[1]).view({B, T, H, K}).abs();
    EXPECT_LE((diff - bound).max().item<double>(), 0.0) << "gradient, l2 " << l2;
  }
}

// Bitwise: heads_fused's l2 forward in fp32 is the order kda_prep.h writes, evaluated here
// one element at a time: per (row, token, head) the squares summed in key order from zero,
// 1 / sqrt(sum + eps), each value times that, then the scale. T = 13 runs the loops' blocks
// of tokens (8 at a time) and a partial one; K = 40 is not a whole number of vectors.
TEST(KdaPrep, HeadsL2ForwardIsTheWrittenOrderFp32) {
  const int64_t B = 2, T = 13, H = 3, K = 40;
  const float eps = 1e-6f, scale = 0.3f;
  auto gen = at::detail::createCPUGenerator(405);
  auto a = at::randn({B, T, H * K}, gen, at::TensorOptions().dtype(at::kFloat));
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    out = k::heads_fused(a, H, true, double(eps), double(scale)).contiguous();  // [B,H,T,K]
  }
  const float* ap = a.data_ptr<float>();
  const float* op = out.data_ptr<float>();
  int64_t differ = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* row = ap + ((b * T + t) * H + h) * K;
        volatile float ss = 0.0f;  // volatile: each add rounds on its own, in this order
        for (int64_t c = 0; c < K; ++c) {
          const volatile float sq = row[c] * row[c];
          ss = ss + sq;
        }
        const float iv = 1.0f / std::sqrt(ss + eps);
        for (int64_t c = 0; c < K; ++c) {
          const volatile float n = row[c] * iv;
          const float want = n * scale;
          const float got = op[((b * H + h) * T + t) * K + c];
          differ += std::memcmp(&want, &got, sizeof want) != 0;
        }
      }
  EXPECT_EQ(differ, 0) << "of " << B * H * T * K << " values";
}

// Bitwise: the prologue's forward and gradients do not depend on the thread count (each
// channel, and each (row, head), is one loop iteration on one thread), fp32 and bf16, at
// debugmodel width so that the work splits.
class KdaPrepBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KdaPrepBitwise, ThreadCountFree) {
  const auto dt = GetParam();
  const int64_t B = 2, T = 40, H = 4, K = 128;
  auto gen = at::detail::createCPUGenerator(403);
  auto x = at::randn({B, T, H * K}, gen, f64()).to(dt);
  auto w = (0.5 * at::randn({H * K, 4}, gen, f64())).to(dt);
  auto R = at::randn({B, H, T, K}, gen, f64());
  auto run = [&] {
    return value_and_grads(
        [&](auto& in) {
          return k::heads_fused(k::causal_conv_fused(in[0], in[1], /*silu=*/true), H, true,
                                1e-6, 0.125);
        },
        {x, w}, R);
  };
  expect_thread_count_free(run);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KdaPrepBitwise, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------------------------------
// The fused gates (decay_pre_fused, rms_norm_gated_fused), which kda() runs with --kda fused.

// Bitwise: the decay pre-activation is the readable rate (pre.to(acc) + dt) laid out as
// [B,H,T,K], and its pre gradient is the readable (dz rate).to(dtype): the same element-wise
// operations in the same order, in every dtype.
class KdaGatesBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KdaGatesBitwise, DecayMatchesReadable) {
  const auto dt = GetParam();
  const auto acc = dt == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t B = 2, T = 9, H = 3, K = 20;
  auto gen = at::detail::createCPUGenerator(410);
  auto pre = at::randn({B, T, H * K}, gen, f64()).to(dt);
  auto bias = at::randn({H * K}, gen, f64()).to(acc);
  auto rate = at::exp(at::rand({H}, gen, f64()) * 2.7).to(acc);
  auto dz = at::randn({B, H, T, K}, gen, f64()).to(acc);
  auto p = pre.clone().requires_grad_(true);
  auto z = k::decay_pre_fused(p, bias, rate);
  ASSERT_EQ(z.scalar_type(), acc);
  auto ref = (rate.repeat_interleave(K) * (pre.to(acc) + bias))
                 .view({B, T, H, K})
                 .permute({0, 2, 1, 3});
  EXPECT_EQ(z.ne(ref).sum().item<int64_t>(), 0) << "z";
  z.backward(dz);
  auto dpre_ref = (dz.permute({0, 2, 1, 3}).reshape({B, T, H * K}) *
                   rate.repeat_interleave(K))
                      .to(dt);
  EXPECT_EQ(p.grad().ne(dpre_ref).sum().item<int64_t>(), 0) << "d pre";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KdaGatesBitwise,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kDouble),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The decay gradients of dt and rate, which sum over tokens, against autograd through the
// readable expression (fp64). Bound, element by element: d dt_c sums B T products dz rate and
// d rate_h sums B T K products dz x, in different orders in the two evaluations, so they
// differ by at most 2 gamma_n (n = B T K, the longer) times the sums of |terms|.
TEST(KdaGates, DecayParameterGradientsFp64) {
  const int64_t B = 2, T = 9, H = 3, K = 20;
  auto gen = at::detail::createCPUGenerator(411);
  auto pre = at::randn({B, T, H * K}, gen, f64()), bias = at::randn({H * K}, gen, f64());
  auto rate = at::exp(at::rand({H}, gen, f64()) * 2.7);
  auto R = at::randn({B, H, T, K}, gen, f64());
  auto fused = value_and_grads(
      [](auto& a) { return k::decay_pre_fused(a[0], a[1], a[2]); }, {pre, bias, rate}, R);
  auto readable = value_and_grads(
      [&](auto& a) {
        return (a[2].repeat_interleave(K) * (a[0] + a[1])).view({B, T, H, K}).permute({0, 2, 1, 3});
      },
      {pre, bias, rate}, R);
  auto Rt = R.permute({0, 2, 1, 3}).reshape({B, T, H * K}).abs();               // |dz|
  auto x = (pre + bias).abs();
  auto dt_size = (Rt * rate.repeat_interleave(K)).sum(0).sum(0);                 // [H*K]
  auto rate_size = (Rt * x).sum(0).sum(0).view({H, K}).sum(1);                   // [H]
  const double g = 2 * gamma(double(B * T * K), kU64);
  EXPECT_LE(((fused[2] - readable[2]).abs() - g * dt_size).max().item<double>(), 0.0) << "d dt";
  EXPECT_LE(((fused[3] - readable[3]).abs() - g * rate_size).max().item<double>(), 0.0)
      << "d rate";
  EXPECT_TRUE(fused[1].equal(readable[1])) << "d pre";
}

// rms_norm_gated_fused against the readable rms_norm_gated (fp64), forward and the gradients
// of o, gate and w. Bound, per row (b, t, head), first order in u: each evaluation forms
// r = (sum x^2 / K + eps)^(-1/2) within (K + 4) u (a K-long sum in its own order, the divide,
// the add, the square root and its reciprocal) and n = x r w within (K + 7) u. The gate
// s = 1 / (1 + e^-gate) differs by at most 7u s (exp within 2u here, 1u in ATen, and the
// add and divide each side), so dn = dy s by 7u |dn| more. Then
//   y = n s:  |diff| <= (2 (K + 8) + 7) u |y| <= 2 (K + 12) u |y|;
//   d gate = dy n (1 - s) s: dy n within 2 (K + 8) u, s within 7u s, and 1 - s, formed from
//          s, within 7u s absolutely, which weighs dy n s: |diff| <= (2K + 34) u |dy n| s;
//   do_j = r w_j dn_j - x_j r^3 c / K, c = sum_k dn_k w_k x_k: both terms are at most
//          r W, W = sum_k |w_k dn_k| (|x_k r| <= sqrt K), each within (K + 10) u plus the
//          7u of dn, so |diff| <= 4 (K + 14) u r W;
//   dw_k:   a sum over the N = B T H rows of dn_k x_k r in different orders, each term within
//          (K + 15) u: |diff| <= 2 (N + K + 15) u sum_rows |dn_k x_k r|.
TEST(KdaGates, NormMatchesReadableFp64) {
  const int64_t B = 2, T = 7, H = 3, K = 24;
  const double eps = 1e-5, u = kU64;
  auto gen = at::detail::createCPUGenerator(412);
  auto o = at::randn({B, H, T, K}, gen, f64()), gate = at::randn({B, T, H * K}, gen, f64());
  auto w = 1.0 + 0.2 * at::randn({K}, gen, f64());
  auto R = at::randn({B, T, H * K}, gen, f64());
  auto fused = value_and_grads(
      [&](auto& a) {
        return k::rms_norm_gated_fused(a[0], a[1], a[2], eps, at::kDouble);
      },
      {o, gate, w}, R);
  auto readable = value_and_grads(
      [&](auto& a) {
        return k::rms_norm_gated(a[0].transpose(1, 2), a[1].view({B, T, H, K}), a[2], eps)
            .reshape({B, T, H * K});
      },
      {o, gate, w}, R);
  auto x = o.transpose(1, 2);                                                   // [B,T,H,K]
  auto r = 1.0 / at::sqrt(x.pow(2).mean(-1, true) + eps);                       // [B,T,H,1]
  auto s = at::sigmoid(gate.view({B, T, H, K}));
  auto n = x * r * w;
  auto dy = R.view({B, T, H, K});
  auto dn = dy * s;
  auto check = [](const at::Tensor& diff, const at::Tensor& bound, const char* what) {
    EXPECT_LE((diff.abs() - bound).max().item<double>(), 0.0) << what;
  };
  const double rows = double(B * T * H);
  check(fused[0] - readable[0], 2 * (K + 12) * u * (n * s).abs().reshape({B, T, H * K}), "y");
  check((fused[1] - readable[1]).transpose(1, 2),
        4 * (K + 14) * u * r * (w * dn).abs().sum(-1, true), "d o");
  check(fused[2] - readable[2], (2 * K + 34) * u * (dy * n * s).abs().reshape({B, T, H * K}),
        "d gate");
  check(fused[3] - readable[3],
        2 * (rows + K + 15) * u * (dn * x * r).abs().reshape({-1, K}).sum(0), "d w");
}

// Bitwise: the gates' forward and gradients do not depend on the thread count (each head of
// the decay and each row of the norm is one loop iteration; dw sums its rows in order), fp32
// and bf16, at debugmodel width so that the work splits.
class KdaGatesThreadsBitwise : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KdaGatesThreadsBitwise, ThreadCountFree) {
  const auto dt = GetParam();
  const int64_t B = 2, T = 40, H = 4, K = 128;
  auto gen = at::detail::createCPUGenerator(413);
  auto pre = at::randn({B, T, H * K}, gen, f64()).to(dt);
  auto bias = at::randn({H * K}, gen, f64()).to(at::kFloat);
  auto rate = at::exp(at::rand({H}, gen, f64())).to(at::kFloat);
  auto gate = at::randn({B, T, H * K}, gen, f64()).to(at::kFloat);
  auto w = (1.0 + 0.2 * at::randn({K}, gen, f64())).to(at::kFloat);
  auto R = at::randn({B, T, H * K}, gen, f64());
  auto run = [&] {
    return value_and_grads(
        [&](auto& in) {
          auto z = at::sigmoid(k::decay_pre_fused(in[0], in[1], in[2]));  // stands in for o
          return k::rms_norm_gated_fused(z, in[3], in[4], 1e-5, dt);
        },
        {pre, bias, rate, gate, w}, R);
  };
  expect_thread_count_free(run);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KdaGatesThreadsBitwise, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
