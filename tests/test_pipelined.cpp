// The pipelined trainer against the reference (docs/design.md section 3, contracts 1 and 2), and
// the stage protocol's invariants: store lifetime, deposit counts, forward-only passes,
// refusals. Everything here is bitwise: no tolerance appears in this file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "kernels/config.h"
#include "kernels/params.h"
#include "pipelined/executor.h"
#include "pipelined/trainer.h"
#include "pipelined/transport.h"
#include "reference/trainer.h"
#include "tests/synthetic.h"

namespace parity {
namespace {

using testing::synthetic_rows;
using testing::tiny_params;

using kernels::Precision;
using pipelined::ScheduleKind;

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
  std::vector<std::vector<at::Tensor>> biases;  // per step: every MoE layer's expert bias
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
    std::vector<at::Tensor> b;
    if (r.buffers)
      for (const auto& t : *r.buffers) b.push_back(t.clone());
    run.biases.push_back(b);
  }
  Run run;
};

const datasets::TokenRows& rows() {
  static const auto r = synthetic_rows(16, 64);
  return r;
}

Run reference_run(Precision p, int steps, bool freeze_embedding = false, int dp = 1) {
  auto cfg = tiny_config(p, steps);
  cfg.freeze_embedding = freeze_embedding;
  cfg.dp = dp;
  reference::ReferenceTrainer t(cfg, tiny_params(), rows());
  Capture c;
  t.run(c);
  return c.run;
}

Run pipelined_run(Precision p, int steps, const pipelined::PipelineConfig& pc,
                  bool freeze_embedding = false, int dp = 1) {
  auto cfg = tiny_config(p, steps);
  cfg.freeze_embedding = freeze_embedding;
  cfg.dp = dp;
  pipelined::PipelinedTrainer t(cfg, pc, tiny_params(), rows());
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
      if (grads_here) {
        EXPECT_TRUE(torch::equal(a.grads[s][i], b.grads[s][i]))
            << what << ": gradient of " << names[i] << ", step " << s + 1;
      }
      EXPECT_TRUE(torch::equal(a.params[s][i], b.params[s][i]))
          << what << ": updated " << names[i] << ", step " << s + 1;
    }
    ASSERT_EQ(a.biases[s].size(), b.biases[s].size());
    for (size_t i = 0; i < a.biases[s].size(); ++i)
      EXPECT_TRUE(torch::equal(a.biases[s][i], b.biases[s][i]))
          << what << ": expert bias " << i << ", step " << s + 1;
  }
}

struct Shape {
  int pp, vp;
  const char* split;  // "" = default even split
};

std::string shape_name(const Shape& s) {
  return "pp" + std::to_string(s.pp) + "xvp" + std::to_string(s.vp);
}

// Test names and failure messages print the shape, not its bytes.
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

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

// dp: each replica a whole pipeline over its own rows, gradients summed in rank order after
// the last micro-batch; with the naive transport that is the reference's --dp 2 bit for bit.
TEST(DataParallel, NaivePipelineReplicasEqualTheReferenceReplicas) {
  for (auto p : {Precision::FP32, Precision::BF16, Precision::BF16Master}) {
    auto ref = reference_run(p, 2, false, /*dp=*/2);
    auto pipe = pipelined_run(p, 2, pipeline({2, 2, ""}, false), false, /*dp=*/2);
    ASSERT_EQ(pipe.mb_losses.at(0).size(), 8u);  // 2 replicas x 4 micro-batches
    expect_bitwise(ref, pipe, /*every_grad_step=*/true,
                   std::string("dp2 x pp2xvp2 naive, ") + kernels::to_string(p));
    // A replica sees other rows: dp 2 is not dp 1 run twice.
    auto single = reference_run(p, 1);
    EXPECT_FALSE(torch::equal(single.loss.at(0), ref.loss.at(0)));
  }
}

TEST(DataParallel, CachedReplicasKeepTheForwardBitwise) {
  auto naive = pipelined_run(Precision::BF16, 1, pipeline({2, 2, ""}, false), false, 2);
  auto cached = pipelined_run(Precision::BF16, 1, pipeline({2, 2, ""}, true), false, 2);
  for (size_t m = 0; m < 8; ++m)
    EXPECT_TRUE(torch::equal(naive.mb_losses[0][m], cached.mb_losses[0][m])) << "micro-batch " << m;
}

// The quantile balancer (kernels/moe.h), on by default: with the naive transport the pipelined
// trainer's expert biases equal the reference's bit for bit every step (expect_bitwise
// compares them), the biases move away from zero, and they change the run: with the balancer
// off the biases stay zero and the losses differ from step 2 on (step 1 selects with the same
// zero bias either way).
TEST(ExpertBalance, BiasesMoveAndBothTrainersAgreeBitwise) {
  constexpr int kSteps = 5;
  for (auto p : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(kernels::to_string(p));
    auto ref = reference_run(p, kSteps);
    auto pipe = pipelined_run(p, kSteps, pipeline({2, 2, ""}, /*cache=*/false));
    expect_bitwise(ref, pipe, /*every_grad_step=*/true, "pp2xvp2 naive, balancer on");
    ASSERT_EQ(ref.biases.at(0).size(), 16u);  // tiny's 16 MoE layers
    for (int s = 0; s < kSteps; ++s)
      for (const auto& b : ref.biases[s])
        EXPECT_GT(b.abs().max().item<double>(), 0.0) << "a bias stayed at zero, step " << s + 1;
    // The first update is the mean-centred quantile of step 1's histogram; later steps move it.
    EXPECT_FALSE(torch::equal(ref.biases[0][0], ref.biases[kSteps - 1][0]));
    auto text = [](const at::Tensor& t) {
      std::string out;
      for (int64_t e = 0; e < t.numel(); ++e)
        out += (e ? " " : "") + std::to_string(t[e].item<double>());
      return out;
    };
    std::cout << "[ observed ] " << kernels::to_string(p) << " layer 1 expert bias after step 1: "
              << text(ref.biases[0][0]) << "; after step " << kSteps << ": "
              << text(ref.biases[kSteps - 1][0]) << "\n";

    auto cfg = tiny_config(p, kSteps);
    cfg.expert_balance = false;
    reference::ReferenceTrainer t(cfg, tiny_params(), rows());
    Capture off;
    t.run(off);
    for (const auto& b : off.run.biases.back()) EXPECT_EQ(b.abs().max().item<double>(), 0.0);
    EXPECT_TRUE(torch::equal(off.run.loss[0], ref.loss[0]));
    EXPECT_FALSE(torch::equal(off.run.loss[1], ref.loss[1]));
  }
}

// What the transport actually carried, per micro-batch and direction, is what the routing
// tables say: (stages - 1) hidden states plus the tables' stack entries, each B x T x D.
TEST(TransportBytes, EqualTheRoutingTablesFigures) {
  for (auto p : {Precision::FP32, Precision::BF16, Precision::BF16Master})
    for (bool cache : {true, false})
      for (const Shape& sh : {Shape{2, 2, ""}, Shape{4, 4, ""}}) {
        auto cfg = tiny_config(p, 1);
        pipelined::PipelinedTrainer t(cfg, pipeline(sh, cache), tiny_params(), rows());
        Capture c;
        t.run(c);
        const auto& tab = t.tables();
        const int64_t entry = rows().seq_len() * cfg.model.dim * (kernels::is_bf16(p) ? 2 : 4);
        const int64_t entries = (tab.stages.size() - 1) + (cache ? tab.volume.cached : tab.volume.naive);
        const auto& st = t.last_stats();
        ASSERT_EQ(st.bytes_forward_per_mb.size(), 4u);
        for (int m = 0; m < 4; ++m) {
          EXPECT_EQ(st.bytes_forward_per_mb[m], entries * entry) << shape_name(sh) << " mb " << m;
          EXPECT_EQ(st.bytes_backward_per_mb[m], entries * entry) << shape_name(sh) << " mb " << m;
        }
      }
}

// A message is the receiver's alone: a tensor the sender still holds (or a view of one) is
// copied, so a later write on the sender's side does not reach it; a dense tensor moved in
// with no other owner leaves without a copy.
TEST(InProcessTransport, CopiesWhatTheSenderStillHoldsAndMovesWhatItGaveUp) {
  pipelined::Mailboxes mail;
  const pipelined::Tag tag{0, 1, 0, true};
  auto kept = torch::arange(12, torch::kFloat).reshape({1, 3, 4});
  auto given = torch::arange(12, torch::kFloat).reshape({1, 3, 4}) * 2;
  auto base = torch::arange(24, torch::kFloat).reshape({1, 3, 2, 4});
  const void* given_data = given.data_ptr();
  std::vector<at::Tensor> message;  // pushed, not braced: an initializer list holds copies
  message.push_back(kept);
  message.push_back(std::move(given));
  message.push_back(base.select(2, 1));
  mail.send(std::move(message), 1, tag);
  kept.fill_(-1);
  base.fill_(-1);
  const pipelined::TensorSpec spec{{1, 3, 4}, at::kFloat, at::kCPU};
  auto got = mail.recv(0, tag, {spec, spec, spec});
  EXPECT_TRUE(torch::equal(got[0], torch::arange(12, torch::kFloat).reshape({1, 3, 4})));
  EXPECT_EQ(got[1].data_ptr(), given_data);
  EXPECT_TRUE(torch::equal(got[1], torch::arange(12, torch::kFloat).reshape({1, 3, 4}) * 2));
  EXPECT_TRUE(got[2].is_contiguous());
  EXPECT_TRUE(torch::equal(got[2], torch::arange(24, torch::kFloat).reshape({1, 3, 2, 4}).select(2, 1)));
  EXPECT_TRUE(mail.empty());
}

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
                       ::testing::Values(Precision::FP32, Precision::BF16,
                                         Precision::BF16Master)),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" +
             testing::test_name(std::get<1>(info.param));
    });

// Contract 2: the cached transport's forward is the naive one (step-1 micro-batch losses and
// total loss bitwise), and under plain 1F1B (one stage per rank, no deposits) the two are
// bitwise equal in everything, every step.
class CachedForwardEqualsNaive : public ::testing::TestWithParam<std::tuple<Shape, Precision>> {};

TEST_P(CachedForwardEqualsNaive, StepOneLossesBitwise) {
  const auto [shape, p] = GetParam();
  auto naive = pipelined_run(p, 1, pipeline(shape, false));
  auto cached = pipelined_run(p, 1, pipeline(shape, true));
  EXPECT_TRUE(torch::equal(naive.loss[0], cached.loss[0])) << shape_name(shape);
  for (size_t m = 0; m < naive.mb_losses[0].size(); ++m)
    EXPECT_TRUE(torch::equal(naive.mb_losses[0][m], cached.mb_losses[0][m]))
        << shape_name(shape) << " micro-batch " << m;
  if (shape.vp == 1) {
    auto naive5 = pipelined_run(p, 5, pipeline(shape, false));
    auto cached5 = pipelined_run(p, 5, pipeline(shape, true));
    expect_bitwise(naive5, cached5, /*every_grad_step=*/true, shape_name(shape) + " 1F1B cached");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CachedForwardEqualsNaive,
    ::testing::Combine(::testing::ValuesIn(kShapes),
                       ::testing::Values(Precision::FP32, Precision::BF16,
                                         Precision::BF16Master)),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" +
             testing::test_name(std::get<1>(info.param));
    });

// With several stages per rank the cached transport sums some block gradients in another
// order: it must not be bitwise equal to naive everywhere (else the deposits never ran), and
// the difference must stay in the gradients (the forward is identical, checked above).
TEST(CachedTransport, DiffersFromNaiveOnlyAfterTheForward) {
  const Shape shape{2, 2, ""};
  auto naive = pipelined_run(Precision::BF16, 1, pipeline(shape, false));
  auto cached = pipelined_run(Precision::BF16, 1, pipeline(shape, true));
  bool any_grad_differs = false;
  for (size_t i = 0; i < naive.grads[0].size(); ++i)
    any_grad_differs |= !torch::equal(naive.grads[0][i], cached.grads[0][i]);
  EXPECT_TRUE(any_grad_differs);
}

// The store holds at most the micro-batches in flight on its rank: between a micro-batch's
// first forward on the rank and the rank's last stage forward for it. In flight at once, on
// rank r, is bounded by the number of forwards the rank runs before its first backward
// (its warm-up), which the schedule gives directly.
TEST(RankStore, HighWaterMarkWithinTheScheduleInFlight) {
  for (const Shape& shape : kShapes) {
    pipelined::PipelinedTrainer t(tiny_config(Precision::FP32, 1), pipeline(shape, true),
                                  tiny_params(), rows());
    Capture c;
    t.run(c);
    const auto& hw = t.last_stats().store_high_water;
    ASSERT_EQ(static_cast<int>(hw.size()), shape.pp);
    for (int r = 0; r < shape.pp; ++r) {
      // Micro-batches with a forward on this rank whose last-stage forward on the rank has not
      // run yet, maximised over the rank's order: computed from the schedule, not the store.
      const auto order = t.schedule().rank_order(r);
      const int last_stage = r + (shape.vp - 1) * shape.pp;
      std::set<int> open;
      int most = 0;
      for (const auto& a : order) {
        if (!a.forward) continue;
        open.insert(a.microbatch);
        most = std::max(most, static_cast<int>(open.size()));
        if (a.stage == last_stage) open.erase(a.microbatch);
      }
      EXPECT_LE(hw[r], most) << shape_name(shape) << " rank " << r;
      if (shape.vp > 1) {
        EXPECT_GE(hw[r], 1) << shape_name(shape) << " rank " << r;
      }
    }
  }
}

TEST(RankStore, ForwardOnlyPassBetweenStepsLeavesTheStoreEmptyAndMatchesTraining) {
  const Shape shape{4, 4, ""};
  for (bool cache : {false, true}) {
    pipelined::PipelinedTrainer t(tiny_config(Precision::FP32, 1), pipeline(shape, cache),
                                  tiny_params(), rows());
    // Forward-only on step 1's data with the initial parameters equals the training forward.
    auto eval = t.forward_only(1);  // throws if a store is left non-empty
    Capture c;
    t.step(1, c);
    ASSERT_EQ(eval.size(), c.run.mb_losses[0].size());
    for (size_t m = 0; m < eval.size(); ++m)
      EXPECT_TRUE(torch::equal(eval[m], c.run.mb_losses[0][m])) << "micro-batch " << m;
    EXPECT_NO_THROW(t.forward_only(2));
    EXPECT_NO_THROW(t.step(2, c));
  }
}

std::string failure_of(const pipelined::PipelineConfig& pc) {
  try {
    pipelined::PipelinedTrainer t(tiny_config(Precision::FP32, 1), pc, tiny_params(), rows());
    Capture c;
    t.run(c);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(StageProtocol, MissingDepositFailsLoudlyNamingBlockStageMicroBatch) {
  auto pc = pipeline({2, 2, ""}, true);
  // pp2 x vp2 on tiny: stage 2 (rank 0) reads blocks from rank 0's store and deposits them.
  pc.faults = {pipelined::parse_fault("drop-deposit:block=0,stage=2")};
  const auto msg = failure_of(pc);
  EXPECT_NE(msg.find("deposit count for block"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 1, got 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("micro-batch 0"), std::string::npos) << msg;
}

TEST(StageProtocol, ExtraDepositFailsLoudly) {
  auto pc = pipeline({2, 2, ""}, true);
  pc.faults = {pipelined::parse_fault("duplicate-deposit:block=0,stage=2,mb=1")};
  const auto msg = failure_of(pc);
  EXPECT_NE(msg.find("expected 1, got 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("micro-batch 1"), std::string::npos) << msg;
}

// Injected routing bugs run to the end once the count check is off, and each one changes
// the result: the comparison engine, not the protocol's own check, has to catch them.
TEST(FaultInjection, EveryKindRunsAndChangesTheGradients) {
  const Shape shape{2, 2, ""};
  auto clean = pipelined_run(Precision::FP32, 1, pipeline(shape, true));
  // pp2 x vp2 on tiny: stage 3 (rank 1) reads blocks 0 and 1 from its store, stage 1 owns them
  // on rank 1; stage 2 (rank 0) reads block 0, owned by stage 0.
  for (const char* spec :
       {"drop-deposit:block=0,stage=2", "duplicate-deposit:block=1,stage=3",
        "misroute:block=0,stage=3", "skip-collect:block=1,stage=1,mb=2",
        "stale-block:block=0,stage=3,mb=0"}) {
    auto pc = pipeline(shape, true);
    pc.faults = {pipelined::parse_fault(spec)};
    pc.check_deposit_counts = false;
    ::parity::Run faulty;
    ASSERT_NO_THROW(faulty = pipelined_run(Precision::FP32, 1, pc)) << spec;
    bool differs = false;
    for (size_t i = 0; i < clean.grads[0].size(); ++i)
      differs |= !torch::equal(clean.grads[0][i], faulty.grads[0][i]);
    EXPECT_TRUE(differs) << spec;
  }
}

TEST(FaultInjection, SpecsAreParsedOrRefusedByName) {
  auto f = pipelined::parse_fault("misroute:block=2,stage=5,mb=3");
  EXPECT_EQ(f.kind, pipelined::FaultKind::Misroute);
  EXPECT_EQ(f.block, 2);
  EXPECT_EQ(f.stage, 5);
  EXPECT_EQ(f.mb, 3);
  EXPECT_EQ(f.str(), "misroute:block=2,stage=5,mb=3");
  EXPECT_THROW(pipelined::parse_fault("teleport:block=1,stage=1"), std::invalid_argument);
  EXPECT_THROW(pipelined::parse_fault("drop-deposit:stage=1"), std::invalid_argument);
  EXPECT_THROW(pipelined::parse_fault("drop-deposit:block=x,stage=1"), std::invalid_argument);
}

TEST(StageProtocol, HeadAloneOnTheLastStage) {
  // The 16-stage default split of tiny puts the head alone on stage 15 (it runs only the
  // output aggregation, reading every block from its rank's store).
  pipelined::PipelinedTrainer t(tiny_config(Precision::FP32, 1), pipeline({4, 4, ""}, true),
                                tiny_params(), rows());
  const auto& r = t.tables().stages[15];
  EXPECT_EQ(t.tables().split.units(15), std::vector<int>{17});
  // It reads all five blocks: block 4 (committed on stage 14, rank 2) over the wire, the
  // rest from rank 3's store, whose gradients it deposits.
  EXPECT_EQ(r.reads, (pipelined::Blocks{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.recv_cached, (pipelined::Blocks{4}));
  EXPECT_EQ(r.deposits, (pipelined::Blocks{0, 1, 2, 3}));
  // And the cached run completes with every deposit collected (run() checks the stores).
  Capture c;
  EXPECT_NO_THROW(t.run(c));
}

TEST(StageProtocol, ExplicitUnevenSplitEqualsReference) {
  // An uneven 8-stage split with blocks opening inside stages, an embedding-only stage 0 and
  // a head-only last stage.
  const Shape shape{2, 4, "emb|0-3|4|5-9|10|11-12|13-16|head"};
  auto ref = reference_run(Precision::FP32, 2);
  expect_bitwise(ref, pipelined_run(Precision::FP32, 2, pipeline(shape, false)), true,
                 "uneven naive");
  auto cached = pipelined_run(Precision::FP32, 1, pipeline(shape, true));
  EXPECT_TRUE(torch::equal(ref.loss[0], cached.loss[0]));
}

TEST(StageProtocol, FrozenEmbeddingGetsNoGradientAndItsDepositsAreDiscarded) {
  // Stage 0 holds only the embedding, so block 0 has nothing trainable upstream; its
  // gradient deposits on rank 0 are collected and dropped.
  const Shape shape{2, 2, "emb|0-5|6-11|12-16,head"};
  auto ref = reference_run(Precision::FP32, 2, /*freeze_embedding=*/true);
  auto naive = pipelined_run(Precision::FP32, 2, pipeline(shape, false), true);
  expect_bitwise(ref, naive, true, "frozen embedding, naive");
  auto cached = pipelined_run(Precision::FP32, 2, pipeline(shape, true), true);
  const auto init = tiny_params();
  EXPECT_TRUE(torch::equal(cached.params[1][0], init[0]));  // the embedding never moved
  EXPECT_EQ(cached.grads[0][0].abs().sum().item<double>(), 0.0);
}

// A broken order reaches the executor as a deadlock with the grid and `<-- stuck`.
TEST(Executor, BrokenOrderIsADeadlockReportedOnTheGrid) {
  const auto s = pipelined::make_schedule(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  auto orders = pipelined::training_orders(s);
  // Rank 1 waits for 2F0 at its first action, rank 0 for 3B0 at its first: a cycle.
  orders[1].insert(orders[1].begin(), pipelined::Action{3, 0, false});
  orders[1].erase(std::find(orders[1].begin() + 1, orders[1].end(), pipelined::Action{3, 0, false}));
  orders[0].insert(orders[0].begin(), pipelined::Action{2, 0, false});
  orders[0].erase(std::find(orders[0].begin() + 1, orders[0].end(), pipelined::Action{2, 0, false}));
  std::set<std::tuple<int, int, bool>> done;
  pipelined::ExecutorHooks hooks;
  hooks.ready = [&](const pipelined::Action& a) {
    if (a.forward) return a.stage == 0 || done.count({a.stage - 1, a.microbatch, true}) > 0;
    return done.count({a.stage, a.microbatch, true}) > 0 &&
           (a.stage == 3 || done.count({a.stage + 1, a.microbatch, false}) > 0);
  };
  hooks.run = [&](const pipelined::Action& a) { done.insert({a.stage, a.microbatch, a.forward}); };
  try {
    pipelined::run_in_process(s, orders, hooks);
    FAIL() << "no deadlock reported";
  } catch (const pipelined::DeadlockError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("<-- stuck"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 waits at 2B0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 waits at 3B0"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace parity
