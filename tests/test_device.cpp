// The kernel set and the reference trainer on CUDA. Every test skips itself where no CUDA
// device is present (CI, the CPU machines); on a GPU machine they are the evidence that the
// ops work there and stay deterministic.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "datasets/rows.h"
#include "kernels/attn_res.h"
#include "kernels/kda.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "reference/trainer.h"
#include "tests/synthetic.h"

namespace parity {
namespace {

using testing::synthetic_rows;
using testing::tiny_params;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    kernels::use_deterministic_cuda();
  }
};

kernels::NamedTensors tiny_params_on(const torch::Device& d, at::ScalarType dt) {
  auto cfg = kernels::flavor("tiny");
  auto p = kernels::init_params(cfg, 3);
  auto gen = at::detail::createCPUGenerator(103);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.names()[i].find("res_proj") != std::string::npos) p[i].normal_(0.0, 0.5, gen);
    out.push_back(p[i].to(d, dt).requires_grad_(true));
  }
  return kernels::NamedTensors(p.names(), out);
}

// Buffers keep their own dtypes (fp32 bias and counts, int32 histograms).
kernels::NamedTensors tiny_buffers_on(const torch::Device& d) {
  auto b = kernels::init_buffers(kernels::flavor("tiny"));
  std::vector<at::Tensor> out;
  for (const auto& t : b.tensors()) out.push_back(t.to(d));
  return kernels::NamedTensors(b.names(), out);
}

struct ForwardBackward {
  double loss;
  std::vector<at::Tensor> grads;  // on the CPU, fp64
};

ForwardBackward tiny_step(const torch::Device& d, at::ScalarType dt) {
  kernels::Model model(kernels::flavor("tiny"));
  auto w = tiny_params_on(d, dt);
  auto b = tiny_buffers_on(d);
  auto gen = at::detail::createCPUGenerator(5);
  auto tokens = at::randint(0, 2048, {2, 24}, gen, at::kLong).to(d);
  auto labels = at::randint(0, 2048, {2, 24}, gen, at::kLong).to(d);
  auto loss = model.loss(w, b, tokens, labels, 1.0, /*training=*/true);
  loss.backward();
  ForwardBackward r{loss.loss().item<double>(), {}};
  for (const auto& t : w.tensors()) r.grads.push_back(t.grad().to(at::kCPU, at::kDouble));
  return r;
}

// max |a - b| over every gradient, relative to the largest entry of a.
double max_rel_grad_diff(const ForwardBackward& a, const ForwardBackward& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    num = std::max(num, (a.grads[i] - b.grads[i]).abs().max().item<double>());
    den = std::max(den, a.grads[i].abs().max().item<double>());
  }
  EXPECT_GT(den, 0.0);  // not vacuous
  return num / den;
}

// CUDA against CPU for the whole tiny model in fp64. The two devices run different kernels
// (different summation orders in every matmul and reduction), so the results agree to
// rounding: with u = 2^-53 and accumulation depths of at most ~2048 (the vocabulary softmax)
// per op and ~50 ops in sequence through 17 layers, a relative bound of 2048 * 50 * u ~ 1e-11
// on the loss and on the gradients (relative to the largest gradient entry) holds with margin.
TEST_F(CudaTest, TinyModelMatchesCpuInFp64) {
  auto cpu = tiny_step(torch::kCPU, at::kDouble);
  auto gpu = tiny_step(torch::kCUDA, at::kDouble);
  EXPECT_LE(std::abs(cpu.loss - gpu.loss) / std::abs(cpu.loss), 1e-11);
  EXPECT_LE(max_rel_grad_diff(cpu, gpu), 1e-11);
}

// The same in fp32: u = 2^-24, the same depth argument gives 2048 * 50 * 6e-8 ~ 6e-3; the
// check uses 1e-2 on the loss and on the gradients relative to the largest entry.
TEST_F(CudaTest, TinyModelMatchesCpuInFp32) {
  auto cpu = tiny_step(torch::kCPU, at::kFloat);
  auto gpu = tiny_step(torch::kCUDA, at::kFloat);
  EXPECT_LE(std::abs(cpu.loss - gpu.loss) / std::abs(cpu.loss), 1e-2);
  EXPECT_LE(max_rel_grad_diff(cpu, gpu), 1e-2);
}

// bf16 on CUDA runs and gives finite values and gradients (its agreement with the CPU is not
// a meaningful bound at u = 2^-8 through 17 layers; determinism is checked below).
TEST_F(CudaTest, TinyModelRunsInBf16) {
  auto gpu = tiny_step(torch::kCUDA, at::kBFloat16);
  EXPECT_TRUE(std::isfinite(gpu.loss));
  for (const auto& g : gpu.grads) EXPECT_TRUE(g.isfinite().all().item<bool>());
}

TEST_F(CudaTest, AttnResFormsHaveTheSameForwardBits) {
  for (auto dt : {at::kFloat, at::kBFloat16, at::kDouble}) {
    auto o = torch::TensorOptions().device(torch::kCUDA).dtype(dt);
    auto stack = torch::randn({2, 8, 3, 16}, o);
    auto partial = torch::randn({2, 8, 16}, o);
    auto proj = torch::randn({16}, o), norm = torch::randn({16}, o);
    EXPECT_TRUE(torch::equal(kernels::attn_res_plain(stack, partial, proj, norm, 1e-6),
                             kernels::attn_res_recompute(stack, partial, proj, norm, 1e-6)))
        << c10::toString(dt);
  }
}

// Chunked against the recurrence on CUDA in fp64: both are exact algebra of the same
// recurrence; over T = 40 tokens with K = 16 the rounding is ~T*K*u ~ 1e-13; 1e-10 as on CPU.
TEST_F(CudaTest, KdaChunkedMatchesRecurrenceInFp64) {
  auto o = torch::TensorOptions().device(torch::kCUDA).dtype(at::kDouble);
  auto q = kernels::l2_normalize(torch::randn({1, 2, 40, 16}, o), 1e-6);
  auto k = kernels::l2_normalize(torch::randn({1, 2, 40, 16}, o), 1e-6);
  auto v = torch::randn({1, 2, 40, 16}, o);
  auto g = -5.0 * torch::rand({1, 2, 40, 16}, o);
  auto beta = torch::rand({1, 2, 40}, o);
  auto a = kernels::kda_chunked(q, k, v, g, beta, 16);
  auto b = kernels::kda_recurrent(q, k, v, g, beta);
  EXPECT_LE(((a - b).abs().max() / b.abs().max()).item<double>(), 1e-10);
}

struct Capture : kernels::StepObserver {
  bool wants_tensors(int64_t) const override { return true; }
  void on_step(const kernels::StepRecord& r) override {
    losses.push_back(r.loss.cpu());
    norms.push_back(r.grad_norm.cpu());
    for (const auto& g : *r.grads) grads.push_back(g.cpu());
  }
  std::vector<at::Tensor> losses, norms, grads;
};

// The same cell twice on the GPU: every loss, norm and gradient bitwise equal.
TEST_F(CudaTest, ReferenceTrainerIsDeterministic) {
  for (auto p : {kernels::Precision::FP32, kernels::Precision::BF16,
                 kernels::Precision::BF16Master}) {
    reference::TrainConfig cfg;
    cfg.model = kernels::flavor("tiny");
    cfg.precision = p;
    cfg.steps = 2;
    cfg.device = "cuda";
    auto rows = synthetic_rows(32, 16);
    auto init = kernels::init_params(cfg.model, 3);
    Capture a, b;
    reference::ReferenceTrainer(cfg, init, rows).run(a);
    reference::ReferenceTrainer(cfg, init, rows).run(b);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
      EXPECT_TRUE(torch::equal(a.losses[i], b.losses[i])) << kernels::to_string(p);
      EXPECT_TRUE(torch::equal(a.norms[i], b.norms[i])) << kernels::to_string(p);
    }
    for (size_t i = 0; i < a.grads.size(); ++i)
      EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << kernels::to_string(p) << " " << i;
  }
}

}  // namespace
}  // namespace parity
