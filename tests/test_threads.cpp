// The thread-count contract (docs/design.md section 3.6): a step's bits do not depend on how
// many intra-op threads run it. parity's loop kernels split their loops between the threads
// (kernels/threads.h) and give each output element to one range; this checks the whole step
// end to end: every loss, grad norm, gradient, updated parameter and expert bias of 1 and 2
// threads, bitwise, for the reference and the pipelined trainer (pp2 x vp2, cache on).
//
// The shapes are debugmodel's at 64 tokens a row: large enough that every loop kernel splits
// (the product's column panels, KDA's heads, the AttnRes read's tokens, AdamW's elements), as
// tiny's 16 tokens would not. Its first 5 layers hold every kind the model has (the dense FFN,
// KDA and MLA, the MoE, a block boundary at layer 4), enough for a pp2 x vp2 pipeline.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/config.h"
#include "kernels/params.h"
#include "kernels/threads.h"
#include "tests/synthetic.h"
#include "tests/trainer_runs.h"

namespace parity {
namespace {

using kernels::Precision;

kernels::TrainConfig config(Precision p, int threads) {
  kernels::TrainConfig cfg;
  cfg.model = kernels::flavor("debugmodel");
  cfg.model.n_layers = 5;
  cfg.precision = p;
  cfg.steps = 2;
  cfg.microbatches = 4;
  cfg.rows = 1;
  cfg.threads = threads;
  return cfg;
}

const datasets::TokenRows& rows() {
  static const auto r = testing::synthetic_rows(64, 16);
  return r;
}

const kernels::NamedTensors& init() {
  static const auto p = kernels::init_params(config(Precision::FP32, 1).model, 5);
  return p;
}

class ThreadCount : public ::testing::TestWithParam<Precision> {};

TEST_P(ThreadCount, ReferenceStepsAreBitwiseOnOneAndTwoThreads) {
  const auto one = testing::reference_run(config(GetParam(), 1), init(), rows());
  const auto two = testing::reference_run(config(GetParam(), 2), init(), rows());
  kernels::pin_threads(1);
  testing::expect_steps_move(one);
  testing::expect_bitwise(one, two, init().names(), 2, "reference, 1 vs 2 threads");
}

TEST_P(ThreadCount, PipelinedPp2Vp2StepsAreBitwiseOnOneAndTwoThreads) {
  pipelined::PipelineConfig pc;
  pc.pp = 2;
  pc.vp = 2;
  pc.schedule = pipelined::ScheduleKind::Interleaved1F1B;
  pc.cache = true;
  const auto one = testing::pipelined_run(config(GetParam(), 1), pc, init(), rows());
  const auto two = testing::pipelined_run(config(GetParam(), 2), pc, init(), rows());
  kernels::pin_threads(1);
  testing::expect_steps_move(one);
  testing::expect_bitwise(one, two, init().names(), 2, "pp2xvp2 cache on, 1 vs 2 threads");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ThreadCount, ::testing::Values(Precision::FP32, Precision::BF16),
                         [](const auto& info) { return testing::test_name(info.param); });

}  // namespace
}  // namespace parity
