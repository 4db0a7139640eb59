// Tests for MLA (kernels/mla.h): finite-difference gradient checks (fp64) with respect to the
// input and every weight, and mla against its DESIGN composition (fp64, tolerance).
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
// MLA finite differences (fp64).

// bf16 rounding points: the scores stay fp32 from q k^T to the softmax (torchtitan's Flex
// attention). One head of width 1, scale 1, T = 2; token 1 attends to keys 0 and 1:
//   q_1 = 4.25, k = (4, 4.25), v = (0, 1), all exact in bf16
//   scores (17, 18.0625): 18.0625 needs 9 significant bits, so bf16 would round it to 18
//   o_1 = p_1 = 1 / (1 + e^-(18.0625 - 17)) = 0.74316800..., 190.25 bf16 steps of 2^-8:
//         rounded once to bf16, 190 * 2^-8 = 0.7421875
//   with the scores rounded first: 1 / (1 + e^-1) = 0.73105857..., 187.15 steps: 0.73046875
// Both are a quarter step or more from a tie, so fp32's own rounding cannot move them.
TEST(Mla, Bf16ScoresStayFp32UpToTheSoftmax) {
  const auto bf = at::TensorOptions().dtype(at::kBFloat16);
  auto q = at::tensor({0.0f, 4.25f}).view({1, 1, 2, 1}).to(bf.dtype());
  auto kk = at::tensor({4.0f, 4.25f}).view({1, 1, 2, 1}).to(bf.dtype());
  auto v = at::tensor({0.0f, 1.0f}).view({1, 1, 2, 1}).to(bf.dtype());
  const auto o = k::causal_attention(q, kk, v, 1.0);
  ASSERT_EQ(o.scalar_type(), at::kBFloat16);
  EXPECT_EQ(o[0][0][0][0].item<float>(), 0.0f);
  EXPECT_EQ(o[0][0][1][0].item<float>(), 0.7421875f);   // not 0.73046875
}

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

}  // namespace
