// Whole runs of the trainers, captured step by step, and their bitwise comparison: for the
// suites whose claim is "these two ways of running give the same bits" (activation
// checkpointing, thread counts).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/observer.h"
#include "kernels/params.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"

namespace parity::testing {

// What a run produced, per step: loss, grad norm, each micro-batch's loss, every gradient,
// every updated parameter and every buffer (the expert biases).
struct Run {
  std::vector<at::Tensor> loss, norm;
  std::vector<std::vector<at::Tensor>> mb_losses, grads, params, buffers;  // per step
};

class Capture : public kernels::StepObserver {
 public:
  bool wants_tensors(int64_t) const override { return true; }
  void on_step(const kernels::StepRecord& r) override {
    auto copy = [](const std::vector<at::Tensor>& v) {
      std::vector<at::Tensor> out;
      for (const auto& t : v) out.push_back(t.clone());
      return out;
    };
    run.loss.push_back(r.loss.clone());
    run.norm.push_back(r.grad_norm.clone());
    run.mb_losses.push_back(copy(r.mb_losses));
    run.grads.push_back(copy(*r.grads));
    run.params.push_back(copy(*r.params));
    run.buffers.push_back(r.buffers ? copy(*r.buffers) : std::vector<at::Tensor>{});
  }
  Run run;
};

inline Run reference_run(const kernels::TrainConfig& cfg, const kernels::NamedTensors& init,
                         const datasets::TokenRows& rows) {
  reference::ReferenceTrainer t(cfg, init, rows);
  Capture c;
  t.run(c);
  return c.run;
}

// pp ranks x vp virtual stages under Interleaved1F1B, the block-stack cache on or off.
inline pipelined::PipelineConfig interleaved(int pp, int vp, bool cache) {
  pipelined::PipelineConfig pc;
  pc.pp = pp;
  pc.vp = vp;
  pc.schedule = pipelined::ScheduleKind::Interleaved1F1B;
  pc.cache = cache;
  return pc;
}

inline pipelined::PipelineConfig pp4vp4(bool cache) { return interleaved(4, 4, cache); }

inline Run pipelined_run(const kernels::TrainConfig& cfg, const pipelined::PipelineConfig& pc,
                         const kernels::NamedTensors& init, const datasets::TokenRows& rows) {
  pipelined::PipelinedTrainer t(cfg, pc, init, rows);
  Capture c;
  t.run(c);
  return c.run;
}

// a and b bitwise equal in everything captured, over `steps` steps; `names` are the
// parameters' names, in the captured order.
inline void expect_bitwise(const Run& a, const Run& b, const std::vector<std::string>& names,
                           size_t steps, const std::string& what) {
  ASSERT_EQ(a.loss.size(), steps) << what;
  ASSERT_EQ(a.loss.size(), b.loss.size()) << what;
  for (size_t s = 0; s < a.loss.size(); ++s) {
    const std::string at_step = ", step " + std::to_string(s + 1);
    EXPECT_TRUE(torch::equal(a.loss[s], b.loss[s])) << what << ": loss" << at_step;
    EXPECT_TRUE(torch::equal(a.norm[s], b.norm[s])) << what << ": grad norm" << at_step;
    ASSERT_EQ(a.mb_losses[s].size(), b.mb_losses[s].size());
    for (size_t m = 0; m < a.mb_losses[s].size(); ++m)
      EXPECT_TRUE(torch::equal(a.mb_losses[s][m], b.mb_losses[s][m]))
          << what << ": micro-batch " << m << " loss" << at_step;
    ASSERT_EQ(a.grads[s].size(), names.size());
    ASSERT_EQ(b.grads[s].size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_TRUE(torch::equal(a.grads[s][i], b.grads[s][i]))
          << what << ": gradient of " << names[i] << at_step;
      EXPECT_TRUE(torch::equal(a.params[s][i], b.params[s][i]))
          << what << ": updated " << names[i] << at_step;
    }
    ASSERT_EQ(a.buffers[s].size(), b.buffers[s].size());
    for (size_t i = 0; i < a.buffers[s].size(); ++i)
      EXPECT_TRUE(torch::equal(a.buffers[s][i], b.buffers[s][i]))
          << what << ": expert bias " << i << at_step;
  }
}

// The runs differ from their first step to their last (the bias moves, the parameters
// update): a comparison of equal runs is then not a comparison of constants.
inline void expect_steps_move(const Run& r) {
  ASSERT_GE(r.loss.size(), 2u);
  EXPECT_FALSE(torch::equal(r.loss.front(), r.loss.back()));
  EXPECT_FALSE(torch::equal(r.params.front()[0], r.params.back()[0]));
}

}  // namespace parity::testing
