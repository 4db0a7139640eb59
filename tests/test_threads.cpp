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
//
// And a scan of the sources: no loop splits through anything but kernels::parallel_for.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/config.h"
#include "kernels/params.h"
#include "kernels/threads.h"
#include "reference/trainer.h"
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

// With two threads the reference runs two micro-batches at once (reference/trainer.h). An odd
// count leaves the last one alone, dp 2 runs it per replica, and --ac layer recomputes inside
// each side's backward.
TEST_P(ThreadCount, ReferenceSideBySideHoldsWithOddMicroBatchesReplicasAndCheckpoints) {
  auto cfg = [&](int threads) {
    auto c = config(GetParam(), threads);
    c.microbatches = 3;
    c.dp = 2;
    c.model_options.checkpoint_layers = true;
    return c;
  };
  const auto one = testing::reference_run(cfg(1), init(), rows());
  const auto two = testing::reference_run(cfg(2), init(), rows());
  kernels::pin_threads(1);
  testing::expect_steps_move(one);
  testing::expect_bitwise(one, two, init().names(), 2, "reference, 3 mb x dp 2, --ac layer");
}

// The lanes a step's shape allows: one per thread, at most one per micro-batch, and none
// beside the first on a device other than the CPU.
TEST(ThreadLanes, TheShapeAllowsOnePerThreadUpToTheMicroBatchesOnCpuOnly) {
  kernels::TrainConfig c;
  const struct {
    int threads, microbatches;
    const char* device;
    int lanes;
  } cases[] = {{1, 4, "cpu", 1}, {2, 4, "cpu", 2}, {2, 1, "cpu", 1}, {4, 3, "cpu", 3},
               {8, 8, "cpu", 8}, {2, 4, "cuda", 1}, {2, 4, "cuda:0", 1}};
  for (const auto& k : cases) {
    c.threads = k.threads;
    c.microbatches = k.microbatches;
    c.device = k.device;
    EXPECT_EQ(reference::side_by_side_lanes(c), k.lanes)
        << k.threads << " threads, " << k.microbatches << " micro-batches, " << k.device;
  }
}

// A body's exception reaches the caller after every lane has run.
TEST(ThreadLanes, EveryLaneRunsOnceAndAnErrorComesBack) {
  for (int threads : {1, 2}) {
    kernels::pin_threads(threads);
    std::vector<int> ran(5, 0);
    kernels::run_lanes(5, [&](int i) { ++ran[static_cast<size_t>(i)]; });
    EXPECT_EQ(ran, std::vector<int>(5, 1)) << threads << " threads";
    std::vector<int> after(3, 0);
    EXPECT_THROW(kernels::run_lanes(3,
                                    [&](int i) {
                                      after[static_cast<size_t>(i)] = 1;
                                      if (i == 1) throw std::runtime_error("lane 1");
                                    }),
                 std::runtime_error);
    EXPECT_EQ(after, std::vector<int>(3, 1)) << threads << " threads";
  }
  kernels::pin_threads(1);
}

TEST_P(ThreadCount, PipelinedPp2Vp2StepsAreBitwiseOnOneAndTwoThreads) {
  const auto pc = testing::interleaved(2, 2, /*cache=*/true);
  const auto one = testing::pipelined_run(config(GetParam(), 1), pc, init(), rows());
  const auto two = testing::pipelined_run(config(GetParam(), 2), pc, init(), rows());
  kernels::pin_threads(1);
  testing::expect_steps_move(one);
  testing::expect_bitwise(one, two, init().names(), 2, "pp2xvp2 cache on, 1 vs 2 threads");
}

// Every loop of parity splits through kernels::parallel_for: ATen's at::parallel_for, called
// from any other file, would run on one thread there (kernels/threads.h says why) and go
// unnoticed, as it did once in every loop kernel. The project's sources call it only in
// kernels/threads.cpp, and no file but that one carries an OpenMP pragma. (The needles are
// spelt in two parts so that this file does not match itself.)
TEST(ThreadSplit, OnlyKernelsThreadsCallsAtenParallelFor) {
  namespace fs = std::filesystem;
  const fs::path root = PARITY_SOURCE_DIR;
  const std::string call = std::string("at::parallel") + "_for(";
  const std::string pragma = std::string("#pragma ") + "omp";
  std::vector<std::string> found;
  int files = 0;
  for (const auto& top : fs::directory_iterator(root)) {
    const auto name = top.path().filename().string();
    if (!top.is_directory() || name.empty() || name[0] == '.' || name.rfind("build", 0) == 0)
      continue;
    for (const auto& e : fs::recursive_directory_iterator(top.path())) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      ++files;
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      const auto rel = fs::relative(e.path(), root).generic_string();
      for (const auto& needle : {call, pragma})
        if (text.str().find(needle) != std::string::npos) found.push_back(rel + ": " + needle);
    }
  }
  EXPECT_GT(files, 200) << "the scan did not see the project's sources under " << root;
  const std::vector<std::string> allowed{"kernels/threads.cpp: " + call,
                                         "kernels/threads.cpp: " + pragma};
  EXPECT_EQ(found, allowed);
}

// A lambda inside a function built once per x86-64 level (PARITY_CLONES) is a function of its
// own, built for the baseline unless it is inlined: its vector loops then run as SSE2 code on
// an AVX-512 machine, with the same bits and a fraction of the speed (it happened once: the
// KDA conv's backward, 5% of a step). Every lambda in a file that clones carries
// PARITY_INLINE_LAMBDA between its parameters and its body. (Needles split as above.)
TEST(ThreadSplit, LambdasInClonedFilesAreInlined) {
  namespace fs = std::filesystem;
  const fs::path kernels = fs::path(PARITY_SOURCE_DIR) / "kernels";
  const std::string clones = std::string("PARITY_") + "CLONES void",
                    mark = std::string("PARITY_") + "INLINE_LAMBDA";
  std::vector<std::string> unmarked;
  int cloned_files = 0, lambdas = 0;
  for (const auto& e : fs::directory_iterator(kernels)) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    if (text.find(clones) == std::string::npos) continue;
    ++cloned_files;
    for (size_t at = text.find("]("); at != std::string::npos; at = text.find("](", at + 1)) {
      // A lambda introducer: "[", captures without brackets, "](". Its body starts at the
      // first "{" after the parameters' closing ")".
      const size_t open = text.rfind('[', at);
      if (open == std::string::npos || text.find_first_of("[]\n;", open + 1) != at) continue;
      size_t depth = 0, close = at + 1;
      for (; close < text.size(); ++close) {
        if (text[close] == '(') ++depth;
        if (text[close] == ')' && --depth == 0) break;
      }
      const size_t body = text.find('{', close);
      if (body == std::string::npos) continue;
      ++lambdas;
      if (text.substr(close, body - close).find(mark) == std::string::npos)
        unmarked.push_back(e.path().filename().string() + " at offset " + std::to_string(open));
    }
  }
  EXPECT_GE(cloned_files, 5) << "the scan found no cloned kernels under " << kernels;
  EXPECT_GE(lambdas, 10);
  EXPECT_TRUE(unmarked.empty()) << ::testing::PrintToString(unmarked);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ThreadCount, ::testing::Values(Precision::FP32, Precision::BF16),
                         [](const auto& info) { return testing::test_name(info.param); });

}  // namespace
}  // namespace parity
