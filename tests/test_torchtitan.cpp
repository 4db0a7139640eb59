// Tests against torchtitan's kimi_k3 facts, each expected value derived by hand, independently
// of the code under test:
//   1. the debugmodel's state dict (kernels/params.h): module_entries, param_specs and
//      total_numel against a list of FQNs and shapes written out literally below from
//      torchtitan's debugmodel (dim 256, vocab 2048, 17 layers, MLA at {3, 7, 11, 15, 16},
//      dense FFN at layer 0, latent MoE at 1..16). No dimension is read from the ModelConfig.
//   2. the learning-rate schedule (kernels/optim.h): torchtitan's linear warmup-stable-decay
//      LambdaLR worked out per step on paper, and the constant schedule.
//   3. the quantile balancer (kernels/moe.h): estimate_expert_bias on literal histograms and
//      observe_required_bias on literal scores, every bin, fraction and bias worked by hand in
//      the comments next to them.
//
// No expected value is computed by calling parity: they are literals derived in the comments,
// or (the parameter sum) plain integer arithmetic over the literal shapes.
//
// The exact checks are the tests named *Exact* or *Bitwise* (strings, shapes, integers, and
// fp32 values that are exactly representable at every step); every other test is a tolerance
// test whose bound is derived next to it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/config.h"
#include "kernels/moe.h"
#include "kernels/optim.h"
#include "kernels/params.h"

namespace k = parity::kernels;

namespace {

// ---------------------------------------------------------------------------------------
// 1. The debugmodel's state dict, built by hand.

using Kind = k::ModuleEntry::Kind;

struct HandEntry {
  std::string fqn;
  std::vector<int64_t> shape;
  Kind kind = k::ModuleEntry::Parameter;
  at::ScalarType dtype = at::kFloat;  // compared for buffers only
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << "]";
  return o.str();
}

const char* kind_str(Kind kd) {
  switch (kd) {
    case k::ModuleEntry::Parameter: return "Parameter";
    case k::ModuleEntry::Buffer: return "Buffer";
    case k::ModuleEntry::NonPersistentBuffer: return "NonPersistentBuffer";
  }
  return "?";
}

// torchtitan's kimi_k3 debugmodel in module (state-dict) order, from the facts:
//   top level: tok_embeddings.weight, layers.0..16, norm.weight, lm_head.weight,
//              output_res_norm.weight, output_res_proj.weight.
//   per layer, tags K (KDA: layers not in {3,7,11,15,16}), M (MLA: {3,7,11,15,16}), D (layer 0,
//   dense FFN), E (layers 1..16, latent MoE), A (all), R (layers >= 1).
std::vector<HandEntry> hand_debugmodel_entries() {
  const auto P = k::ModuleEntry::Parameter;
  const auto B = k::ModuleEntry::Buffer;
  const auto NP = k::ModuleEntry::NonPersistentBuffer;
  std::vector<HandEntry> v;
  v.push_back({"tok_embeddings.weight", {2048, 256}, P});
  for (int i = 0; i <= 16; ++i) {
    const bool mla = i == 3 || i == 7 || i == 11 || i == 15 || i == 16;
    const bool kda = !mla;
    const bool dense = i == 0;
    const bool moe = i >= 1;
    const std::string p = "layers." + std::to_string(i) + ".";
    if (kda) {
      v.push_back({p + "delta_attention.A_log", {4}, P});                      //  1
      v.push_back({p + "delta_attention.dt_bias", {4, 128}, P});               //  2
      v.push_back({p + "delta_attention.q_proj.weight", {512, 256}, P});       //  3
      v.push_back({p + "delta_attention.k_proj.weight", {512, 256}, P});       //  4
      v.push_back({p + "delta_attention.v_proj.weight", {512, 256}, P});       //  5
      v.push_back({p + "delta_attention.q_conv.weight", {512, 1, 4}, P});      //  6
      v.push_back({p + "delta_attention.k_conv.weight", {512, 1, 4}, P});      //  7
      v.push_back({p + "delta_attention.v_conv.weight", {512, 1, 4}, P});      //  8
      v.push_back({p + "delta_attention.forget_a.weight", {128, 256}, P});     //  9
      v.push_back({p + "delta_attention.forget_b.weight", {512, 128}, P});     // 10
      v.push_back({p + "delta_attention.beta.weight", {4, 256}, P});           // 11
      v.push_back({p + "delta_attention.output_gate.weight", {512, 256}, P});  // 12
      v.push_back({p + "delta_attention.output_norm.weight", {128}, P});       // 13
      v.push_back({p + "delta_attention.output_proj.weight", {256, 512}, P});  // 14
    }
    if (mla) {
      v.push_back({p + "attention.wq_a.weight", {128, 256}, P});   // 15
      v.push_back({p + "attention.q_norm.weight", {128}, P});      // 16
      v.push_back({p + "attention.wq_b.weight", {384, 128}, P});   // 17
      v.push_back({p + "attention.wkv_a.weight", {96, 256}, P});   // 18
      v.push_back({p + "attention.kv_norm.weight", {64}, P});      // 19
      v.push_back({p + "attention.wkv_b.weight", {512, 64}, P});   // 20
      v.push_back({p + "attention.gate.weight", {256, 256}, P});   // 21
      v.push_back({p + "attention.wo.weight", {256, 256}, P});     // 22
    }
    if (dense) {
      v.push_back({p + "feed_forward.w13.weight", {2, 512, 256}, P});  // 23
      v.push_back({p + "feed_forward.w2.weight", {256, 512}, P});      // 24
    }
    if (moe) {
      v.push_back({p + "moe.expert_bias_E", {8}, B, at::kFloat});                       // 25
      v.push_back({p + "moe.routed_experts.w13.weight", {8, 2, 128, 128}, P});          // 26
      v.push_back({p + "moe.routed_experts.w2.weight", {8, 128, 128}, P});              // 27
      v.push_back({p + "moe.router.gate.weight", {8, 256}, P});                         // 28
      v.push_back({p + "moe.router.tokens_per_expert_E", {8}, NP, at::kFloat});         // -
      v.push_back({p + "moe.router.quantile_balancer.required_bias_histogram_EB",
                   {8, 1000}, NP, at::kInt});                                           // -
      v.push_back({p + "moe.shared_experts.w13.weight", {2, 256, 256}, P});             // 29
      v.push_back({p + "moe.shared_experts.w2.weight", {256, 256}, P});                 // 30
      v.push_back({p + "moe.routed_down.weight", {128, 256}, P});                       // 31
      v.push_back({p + "moe.routed_norm.weight", {128}, P});                            // 32
      v.push_back({p + "moe.routed_up.weight", {256, 128}, P});                         // 33
    }
    v.push_back({p + "attention_norm.weight", {256}, P});  // 34
    v.push_back({p + "ffn_norm.weight", {256}, P});        // 35
    if (i >= 1) {
      v.push_back({p + "attention_res_norm.weight", {256}, P});   // 36
      v.push_back({p + "attention_res_proj.weight", {1, 256}, P});  // 37
    }
    v.push_back({p + "ffn_res_norm.weight", {256}, P});   // 38
    v.push_back({p + "ffn_res_proj.weight", {1, 256}, P});  // 39
  }
  v.push_back({"norm.weight", {256}, P});
  v.push_back({"lm_head.weight", {2048, 256}, P});
  v.push_back({"output_res_norm.weight", {256}, P});
  v.push_back({"output_res_proj.weight", {1, 256}, P});
  return v;
}

std::vector<HandEntry> hand_debugmodel_params() {
  std::vector<HandEntry> out;
  for (auto& e : hand_debugmodel_entries())
    if (e.kind == k::ModuleEntry::Parameter) out.push_back(e);
  return out;
}

// (a) module_entries(debugmodel) equals the hand list entry by entry: fqn, shape, kind, and
// the dtype of every buffer. The first mismatch is reported by index. Exact (strings, ints).
TEST(TorchtitanDebugmodel, ModuleEntriesEqualHandListExact) {
  const auto want = hand_debugmodel_entries();
  const auto got = k::module_entries(k::flavor("debugmodel"));
  const size_t n = std::min(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& w = want[i];
    const auto& g = got[i];
    const bool same = g.fqn == w.fqn && g.shape == w.shape && g.kind == w.kind &&
                      (w.kind == k::ModuleEntry::Parameter || g.dtype == w.dtype);
    ASSERT_TRUE(same) << "first mismatch at index " << i << ": want " << w.fqn << " "
                      << shape_str(w.shape) << " " << kind_str(w.kind) << " "
                      << c10::toString(w.dtype) << ", got " << g.fqn << " "
                      << shape_str(g.shape) << " " << kind_str(g.kind) << " "
                      << c10::toString(g.dtype);
  }
  ASSERT_EQ(got.size(), want.size()) << "entries agree up to index " << n;
}

// (b) param_specs(debugmodel) equals the hand list with the buffers removed (fqn, shape, in
// named_parameters() order). Exact.
TEST(TorchtitanDebugmodel, ParamSpecsEqualHandListExact) {
  const auto want = hand_debugmodel_params();
  const auto got = k::param_specs(k::flavor("debugmodel"));
  const size_t n = std::min(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(got[i].fqn == want[i].fqn && got[i].shape == want[i].shape)
        << "first mismatch at index " << i << ": want " << want[i].fqn << " "
        << shape_str(want[i].shape) << ", got " << got[i].fqn << " " << shape_str(got[i].shape);
  }
  ASSERT_EQ(got.size(), want.size()) << "specs agree up to index " << n;
}

// (c) The parameter count. By hand, per block of the list above:
//   KDA mixer: 4 + 512 + 3*131,072 (q,k,v proj) + 3*2,048 (convs) + 32,768 (forget_a)
//              + 65,536 (forget_b) + 1,024 (beta) + 131,072 (output_gate) + 128 (output_norm)
//              + 131,072 (output_proj)                                          =   761,476
//   MLA mixer: 32,768 + 128 + 49,152 + 24,576 + 64 + 32,768 + 65,536 + 65,536   =   270,528
//   dense FFN: 262,144 (w13) + 131,072 (w2)                                      =   393,216
//   latent MoE: 262,144 (routed w13) + 131,072 (routed w2) + 2,048 (router)
//              + 131,072 (shared w13) + 65,536 (shared w2) + 32,768 (routed_down)
//              + 128 (routed_norm) + 32,768 (routed_up)                          =   657,536
//   block norms/res: 4*256 = 1,024 (layer 0), 6*256 = 1,536 (layers 1..16)
//   layer 0 (KDA + dense):  761,476 + 393,216 + 1,024                            = 1,155,716
//   KDA + MoE layer: 761,476 + 657,536 + 1,536 = 1,420,548, x 11 (1,2,4,5,6,8,9,10,12,13,14)
//                                                                                = 15,626,028
//   MLA + MoE layer: 270,528 + 657,536 + 1,536 =   929,600, x 5 (3,7,11,15,16)  =  4,648,000
//   top level: 524,288 (tok_embeddings) + 256 + 524,288 (lm_head) + 256 + 256    =  1,049,344
//   total: 1,155,716 + 15,626,028 + 4,648,000 + 1,049,344                        = 22,479,088
// Exact (integers).
TEST(TorchtitanDebugmodel, TotalNumelExact) {
  int64_t hand_sum = 0;
  for (const auto& e : hand_debugmodel_params()) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    hand_sum += n;
  }
  EXPECT_EQ(hand_sum, 22479088);  // the hand list agrees with the sum on paper
  EXPECT_EQ(k::total_numel(k::param_specs(k::flavor("debugmodel"))), 22479088);
}

// (d) 443 parameter tensors: layer 0: 14 + 2 + 4 = 20; KDA + MoE: 14 + 8 + 6 = 28, x 11 = 308;
// MLA + MoE: 8 + 8 + 6 = 22, x 5 = 110; top level 5. 20 + 308 + 110 + 5 = 443. Exact.
TEST(TorchtitanDebugmodel, ParameterTensorCountExact) {
  EXPECT_EQ(hand_debugmodel_params().size(), 443u);  // the hand list agrees with the count
  EXPECT_EQ(k::param_specs(k::flavor("debugmodel")).size(), 443u);
  int64_t params = 0;
  for (const auto& e : k::module_entries(k::flavor("debugmodel")))
    params += e.kind == k::ModuleEntry::Parameter;
  EXPECT_EQ(params, 443);
}

// ---------------------------------------------------------------------------------------
// 2. torchtitan's learning-rate schedule.
//
// Tolerance (both tests below). u = 2^-53. The code computes, in double, at most: the rounded
// literal lr = 8e-4 (relative error <= u), the quotient q = x / decay or (c+1) / warmup (one
// rounding: absolute error <= u q), 1 - q (one rounding, <= u f, f the factor; for q in
// [1/2, 1] exact by Sterbenz), 0 + 1 * f (exact, min_lr_factor 0), and lr * f (one rounding,
// <= u lr f). Against the exact real lr_exact * f_exact the error is <= lr u (q + 3 f) +
// O(u^2); in decay q + f = 1, so <= lr u (1 + 2 f) <= 3 u lr; in warmup and stable <= 3 u lr.
// The expected literal itself (e.g. 1e-5) is one more rounding, <= u want <= u lr. So
//   |got - want| <= 4 u lr + O(u^2) <= 5 u lr,  lr = 8e-4 the peak,
// absolute, NOT relative to want: at step 100 the factor 1 - 79/80 cancels, and the rounding
// of 79/80 (up to 2^-54 absolute) is up to 40 u relative to the result 1/80.
constexpr double kU = 1.1102230246251565e-16;  // 2^-53
constexpr double kLrTol = 5 * kU * 8e-4;

k::AdamWConfig wsd(int64_t total) {
  k::AdamWConfig c;
  c.lr = 8e-4;
  c.warmup_steps = 2;
  c.schedule = k::LrSchedule::WSD;
  c.total_steps = total;
  c.decay_ratio = 0.8;
  c.min_lr_factor = 0.0;
  return c;
}

// 10-step run: decay = round(10 * 0.8) = 8, stable = 10 + 1 - 2 - 8 = 1. c = step - 1:
//   c = 0, 1 (< warmup 2): factor (c+1)/2 = 1/2, 1           -> 4e-4, 8e-4
//   c = 2 (< warmup + stable = 3): factor 1                   -> 8e-4
//   c = 3..9: 1 - (c + 1 - 2 - 1)/8 = 1 - (c - 2)/8 = 7/8 .. 1/8 -> 7e-4, 6e-4, ..., 1e-4
TEST(TorchtitanLr, Wsd10StepsTolerance) {
  const auto c = wsd(10);
  const double want[10] = {4e-4, 8e-4, 8e-4, 7e-4, 6e-4, 5e-4, 4e-4, 3e-4, 2e-4, 1e-4};
  for (int s = 1; s <= 10; ++s)
    EXPECT_NEAR(k::learning_rate(c, s), want[s - 1], kLrTol) << "step " << s;
}

// 100-step run: decay = round(100 * 0.8) = 80, stable = 100 + 1 - 2 - 80 = 19. c = step - 1:
//   step 1 (c 0): 1/2 -> 4e-4;  step 2 (c 1): 2/2 -> 8e-4
//   step 3 (c 2) and step 21 (c 20 < 2 + 19 = 21): stable, 1 -> 8e-4
//   step 22 (c 21): 1 - (22 - 2 - 19)/80 = 1 - 1/80 -> 8e-4 * 79/80 = 7.9e-4
//   step 100 (c 99): 1 - (100 - 2 - 19)/80 = 1 - 79/80 = 1/80 -> 1e-5
TEST(TorchtitanLr, Wsd100StepsTolerance) {
  const auto c = wsd(100);
  const int64_t steps[6] = {1, 2, 3, 21, 22, 100};
  const double want[6] = {4e-4, 8e-4, 8e-4, 8e-4, 7.9e-4, 1e-5};
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(k::learning_rate(c, steps[i]), want[i], kLrTol) << "step " << steps[i];
}

// Constant: lr * min(1, s / warmup): s = 1 -> 1/2 -> 4e-4; s = 2, 3, 10 -> 1 -> 8e-4. The
// same bound (one quotient, one product, the literal: <= 3 u lr).
TEST(TorchtitanLr, ConstantTolerance) {
  auto c = wsd(10);
  c.schedule = k::LrSchedule::Constant;
  const int64_t steps[4] = {1, 2, 3, 10};
  const double want[4] = {4e-4, 8e-4, 8e-4, 8e-4};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(k::learning_rate(c, steps[i]), want[i], kLrTol) << "step " << steps[i];
}

// ---------------------------------------------------------------------------------------
// 3. The quantile balancer on histograms worked by hand.
//
// Semantics (torchtitan QuantileBalancer), E experts, `bins` bins, top-K:
//   observe:  r = cutoff_t - s[t,e]; lo = min(bias) - 1; width = (max - min + 2) / bins;
//             bin = clamp(floor((r - lo) / width), 0, bins - 1); hist[e, bin] += 1.
//   estimate: n = sum hist[e]; target = n K / E; kbin = #bins with cumulative < ceil(target);
//             frac = (target - cumulative before kbin) / count[kbin]; pos = kbin + frac;
//             b_new = (pos - mean_e pos) * width.
//
// Every estimate below: E = 4, bins = 10, K = 2 (target = n / 2), and the current bias
// {-0.25, 0.25, 0, 0}: max - min = 0.5, + 2 = 2.5, / 10 = 0.25: width = 1/4, exact in fp32.

at::Tensor hist_of(const std::vector<std::vector<int32_t>>& rows) {
  const int64_t E = static_cast<int64_t>(rows.size()), bins = static_cast<int64_t>(rows[0].size());
  auto h = at::zeros({E, bins}, at::TensorOptions().dtype(at::kInt));
  auto a = h.accessor<int32_t, 2>();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t b = 0; b < bins; ++b) a[e][b] = rows[e][b];
  return h;
}

at::Tensor f32_of(const std::vector<float>& v) {
  auto t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kFloat));
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
  return t;
}

const std::vector<float> kBias = {-0.25f, 0.25f, 0.0f, 0.0f};

// The three shapes of the quantile used by both estimate tests (cum = cumulative counts):
//   e0, ceil(target) ON a cumulative boundary: hist [1,1,2,0,0,0,0,0,0,0], n 4, target 2,
//       ceil 2; cum [1,2,4,4,...]: only bin 0 has cum < 2 -> kbin 1; count 1, before 1;
//       frac (2 - 1)/1 = 1; pos 2.
//   e1, interior: hist [0,0,1,1,4,2,0,0,0,0], n 8, target 4, ceil 4; cum [0,0,1,2,6,8,...]:
//       bins 0..3 have cum < 4 -> kbin 4; count 4, before 6 - 4 = 2; frac (4 - 2)/4 = 1/2;
//       pos 4.5.
//   e2, odd n: hist [0,0,0,0,0,0,2,2,1,0], n 5, target 2.5, ceil 3; cum
//       [0,0,0,0,0,0,2,4,5,5]: bins 0..6 have cum < 3 -> kbin 7; count 2, before 4 - 2 = 2;
//       frac (2.5 - 2)/2 = 1/4; pos 7.25.

// Exact: e3 = hist [0,0,0,0,0,0,0,0,0,6], n 6, target 3, ceil 3; cum [0 x 9, 6]: bins 0..8
// have cum < 3 -> kbin 9; count 6, before 0; frac 3/6 = 1/2; pos 9.5.
// pos {2, 4.5, 7.25, 9.5}: every partial sum of them (in any order) has at most 7 significant
// bits, so the sum 23.25 is exact in fp32 and the mean 23.25/4 = 5.8125 too; each difference
// and its product with 1/4 are exact:
//   b = ((2 - 5.8125)/4, (4.5 - 5.8125)/4, (7.25 - 5.8125)/4, (9.5 - 5.8125)/4)
//     = (-0.953125, -0.328125, 0.359375, 0.921875)
// Every intermediate (target, frac, pos, mean, b) is a short dyadic: the result is bitwise.
TEST(TorchtitanBalancer, EstimateDyadicBitwise) {
  auto hist = hist_of({{1, 1, 2, 0, 0, 0, 0, 0, 0, 0},
                       {0, 0, 1, 1, 4, 2, 0, 0, 0, 0},
                       {0, 0, 0, 0, 0, 0, 2, 2, 1, 0},
                       {0, 0, 0, 0, 0, 0, 0, 0, 0, 6}});
  const auto b = k::estimate_expert_bias(hist, f32_of(kBias), /*top_k=*/2);
  ASSERT_EQ(b.scalar_type(), at::kFloat);
  ASSERT_EQ(b.numel(), 4);
  const float want[4] = {-0.953125f, -0.328125f, 0.359375f, 0.921875f};
  for (int e = 0; e < 4; ++e) EXPECT_EQ(b[e].item<float>(), want[e]) << "expert " << e;
}

// Tolerance: e0, e1, e2 as above, and e3 = hist [2,0,3,1,0,0,0,0,0,0], n 6, target 3, ceil 3;
// cum [2,2,5,6,...]: bins 0, 1 have cum < 3 -> kbin 2; count 3, before 5 - 3 = 2;
// frac (3 - 2)/3 = 1/3 (not representable); pos 7/3.
// pos = {24, 54, 87, 28}/12, sum 193/12, mean 193/48;
//   b = (pos - 193/48)/4 = ({96, 216, 348, 112} - 193)/192 = {-97, 23, 155, -81}/192
//     = (-0.5052083.., 0.1197916.., 0.8072916.., -0.421875)   (sum 0, as a check).
// Bound, u = 2^-24, every |pos| <= bins: frac one division (<= u); pos one addition
// (<= u bins), so |pos err| <= 2 u bins; the mean of 4 such values: their error 2 u bins, the
// 3 additions on partial sums <= 4 bins (<= 3 u * 4 bins / 4 = 3 u bins after the division),
// the division by 4 (<= u bins): 6 u bins; pos - mean: 2 + 6 + 1 (its rounding) = 9 u bins;
// times width 1/4 (exact factor) plus its rounding (<= u bins width). So
//   |b - b_exact| <= 10 u bins width + O(u^2) <= 12 u bins width = 12 * 2^-24 * 10 / 4.
TEST(TorchtitanBalancer, EstimateWithThirdTolerance) {
  auto hist = hist_of({{1, 1, 2, 0, 0, 0, 0, 0, 0, 0},
                       {0, 0, 1, 1, 4, 2, 0, 0, 0, 0},
                       {0, 0, 0, 0, 0, 0, 2, 2, 1, 0},
                       {2, 0, 3, 1, 0, 0, 0, 0, 0, 0}});
  const auto b = k::estimate_expert_bias(hist, f32_of(kBias), /*top_k=*/2);
  ASSERT_EQ(b.scalar_type(), at::kFloat);
  ASSERT_EQ(b.numel(), 4);
  const double want[4] = {-97.0 / 192, 23.0 / 192, 155.0 / 192, -81.0 / 192};
  const double tol = 12 * std::ldexp(1.0, -24) * 10 * 0.25;
  for (int e = 0; e < 4; ++e)
    EXPECT_NEAR(static_cast<double>(b[e].item<float>()), want[e], tol) << "expert " << e;
}

// observe, exact (integer counts). N = 3 tokens, E = 4, bias zero, bins = 10: lo = -1,
// width = fp32(2/10) = 0.2 (0.200000003). Scores and cutoffs are multiples of 1/16, so
// r = cutoff - s and r - lo = r + 1 = m/16 are exact, and (r + 1)/width = 5m/16 (1 - 1.5e-8)
// is at least 1/16 from an integer whenever 16 does not divide m (no r in {-1, 0, 1}): the
// floor is the hand value below.
//   token 0, cutoff 9/16 = 0.5625, s = (0.75, 0.625, 0.5, 0.1875):
//     r = (-0.1875, -0.0625, 0.0625, 0.375); (r + 1)*5 = (4.0625, 4.6875, 5.3125, 6.875)
//     -> bins (4, 4, 5, 6)
//   token 1, cutoff 0.25, s = (0.9375, 0.0625, 0.5625, 0.125):
//     r = (-0.6875, 0.1875, -0.3125, 0.125); (r + 1)*5 = (1.5625, 5.9375, 3.4375, 5.625)
//     -> bins (1, 5, 3, 5)
//   token 2, cutoff 0.8125, s = (0.0625, 0.875, 0.9375, 0.4375):
//     r = (0.75, -0.0625, -0.125, 0.375); (r + 1)*5 = (8.75, 4.6875, 4.375, 6.875)
//     -> bins (8, 4, 4, 6)
// Per expert (bins of tokens 0, 1, 2): e0 {4, 1, 8}, e1 {4, 5, 4}, e2 {5, 3, 4}, e3 {6, 5, 6}.
TEST(TorchtitanBalancer, ObserveHandHistogramExact) {
  auto scores = at::empty({3, 4}, at::TensorOptions().dtype(at::kFloat));
  const float s[3][4] = {{0.75f, 0.625f, 0.5f, 0.1875f},
                         {0.9375f, 0.0625f, 0.5625f, 0.125f},
                         {0.0625f, 0.875f, 0.9375f, 0.4375f}};
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < 4; ++e) scores[t][e] = s[t][e];
  auto cutoff = f32_of({0.5625f, 0.25f, 0.8125f}).view({3, 1});
  const auto bias = at::zeros({4}, at::TensorOptions().dtype(at::kFloat));
  auto hist = at::zeros({4, 10}, at::TensorOptions().dtype(at::kInt));

  const std::vector<std::vector<int32_t>> want = {{0, 1, 0, 0, 1, 0, 0, 0, 1, 0},
                                                  {0, 0, 0, 0, 2, 1, 0, 0, 0, 0},
                                                  {0, 0, 0, 1, 1, 1, 0, 0, 0, 0},
                                                  {0, 0, 0, 0, 0, 1, 2, 0, 0, 0}};
  auto check = [&](int32_t times) {
    ASSERT_EQ(hist.scalar_type(), at::kInt);
    auto a = hist.accessor<int32_t, 2>();
    for (int e = 0; e < 4; ++e)
      for (int b = 0; b < 10; ++b)
        EXPECT_EQ(a[e][b], times * want[e][b]) << "after " << times << " observe(s), expert "
                                               << e << " bin " << b;
  };
  k::observe_required_bias(scores, cutoff, bias, hist);
  check(1);
  // Integer sums are exact: a second identical observation doubles every count.
  k::observe_required_bias(scores, cutoff, bias, hist);
  check(2);
}

// observe's clamp, exact. One token, cutoff 0, bias zero, bins 10 (lo -1, width 0.2):
//   s = 1.5    -> r = -1.5;     (r + 1)/0.2 = -2.5     -> floor -3 -> clamped to bin 0
//   s = -1.25  -> r = 1.25;     (r + 1)/0.2 = 11.25    -> floor 11 -> clamped to bin 9
//   s = -0.9375-> r = 0.9375;   (r + 1)/0.2 = 9.6875   -> bin 9 (no clamp)
//   s = 0.8125 -> r = -0.8125;  (r + 1)/0.2 = 0.9375   -> bin 0 (no clamp)
TEST(TorchtitanBalancer, ObserveClampsExact) {
  auto scores = f32_of({1.5f, -1.25f, -0.9375f, 0.8125f}).view({1, 4});
  auto cutoff = at::zeros({1, 1}, at::TensorOptions().dtype(at::kFloat));
  const auto bias = at::zeros({4}, at::TensorOptions().dtype(at::kFloat));
  auto hist = at::zeros({4, 10}, at::TensorOptions().dtype(at::kInt));
  k::observe_required_bias(scores, cutoff, bias, hist);
  const int want_bin[4] = {0, 9, 9, 0};
  auto a = hist.accessor<int32_t, 2>();
  for (int e = 0; e < 4; ++e)
    for (int b = 0; b < 10; ++b)
      EXPECT_EQ(a[e][b], b == want_bin[e] ? 1 : 0) << "expert " << e << " bin " << b;
}

}  // namespace
