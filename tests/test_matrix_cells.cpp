// The matrix runner's pure parts, without running a cell: each cell's planned `parity train`
// command is its RunSpec (read back with the specification's own parser), the launch order
// starts the longest cells first, and preparing the cells applies --only, --steps, --device
// and --inject as a user reads them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "dumps/dump.h"
#include "kernels/observer.h"
#include "matrix/cells.h"
#include "matrix/judge.h"
#include "matrix/runner.h"
#include "reports/matrix.h"
#include "spec/run_spec.h"

namespace {

using parity::reports::Cell;
using parity::reports::Matrix;
namespace spec = parity::spec;
namespace detail = parity::matrix::detail;

// A planned command split into what belongs to the run and what belongs to the process and its
// outputs: {RunSpec flags, other flags with their values}.
struct Split {
  std::vector<std::string> run;
  std::vector<std::string> other;
};

Split split_command(const std::vector<std::string>& cmd) {
  static const std::set<std::string> with_value = {"--metrics", "--summary", "--dump",
                                                   "--dump-steps", "--nproc", "--backend"};
  Split s;
  for (size_t i = 2; i < cmd.size(); ++i) {  // after the program and "train"
    if (with_value.count(cmd[i])) {
      s.other.push_back(cmd[i]);
      s.other.push_back(cmd.at(i + 1));
      ++i;
    } else if (cmd[i] == "--ledger") {
      s.other.push_back(cmd[i]);
    } else {
      s.run.push_back(cmd[i]);
    }
  }
  return s;
}

TEST(MatrixCells, EveryPlannedCommandIsTheCellsRunSpec) {
  for (const char* name : {"quick", "seed"}) {
    const Matrix m = parity::reports::parse_matrix(parity::reports::embedded_matrix(name), name);
    ASSERT_GT(m.cells.size(), 10u) << name;
    for (const Cell& c : m.cells) {
      SCOPED_TRACE(std::string(name) + " cell " + c.name);
      const auto cmd = detail::cell_command(c, "parity", "seeds/s.h5", "cells/x", "ids.bin");
      ASSERT_GE(cmd.size(), 2u);
      EXPECT_EQ(cmd[1], "train");
      const Split parts = split_command(cmd);
      spec::RunSpec want = c;  // the cell's run, on the matrix's checkpoint and tokens
      want.init_path = "seeds/s.h5";
      want.tokens_path = "ids.bin";
      EXPECT_EQ(spec::parse_args(parts.run), want);
      // The process and its outputs: the processes only for a multi-process cell.
      const bool has_nproc = std::find(parts.other.begin(), parts.other.end(), "--nproc") !=
                             parts.other.end();
      EXPECT_EQ(has_nproc, c.nproc > 0);
    }
  }
}

TEST(MatrixCells, AMatrixCellDefaultsToTinyInBf16AndOtherwiseToTheRunSpec) {
  const Matrix m = parity::reports::parse_matrix("[[cell]]\nname = \"a\"\n", "m.toml");
  ASSERT_EQ(m.cells.size(), 1u);
  spec::RunSpec want;
  want.flavor = spec::Flavor::Tiny;
  want.dtype = spec::Precision::BF16;
  EXPECT_EQ(static_cast<const spec::RunSpec&>(m.cells[0]), want);
}

TEST(MatrixCells, KeysParseStraightIntoTheRunSpec) {
  const Matrix m = parity::reports::parse_matrix(
      "[[cell]]\nname = \"a\"\ntrainer = \"pipelined\"\npp = 2\nvp = 2\ncache = \"off\"\n"
      "schedule = \"1f1b\"\nkda = \"chunked\"\nattn_res = \"plain\"\nwarmup = 0\n"
      "max_norm = 0.5\nfreeze_embedding = true\npseudo_query_init = \"zero\"\n",
      "m.toml");
  const Cell& c = m.cells.at(0);
  EXPECT_EQ(c.trainer, spec::Trainer::Pipelined);
  EXPECT_EQ(c.cache, spec::Cache::Off);
  EXPECT_EQ(c.schedule, spec::ScheduleKind::OneFOneB);
  EXPECT_EQ(c.kda, spec::KdaImpl::Chunked);
  EXPECT_EQ(c.attn_res, spec::AttnResImpl::Plain);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.max_norm, 0.5);
  EXPECT_TRUE(c.freeze_embedding);
  EXPECT_EQ(c.pseudo_query_init, spec::PseudoQueryInit::Zero);
}

// Work per core, by hand: steps x dp x M x B x T x (dtype weight) / (processes x threads);
// bf16 weighs 1, fp32 4/3, fp64 8/3.
TEST(MatrixCells, TheLongestCellsStartFirstAndTiesKeepFileOrder) {
  std::vector<parity::reports::CellResult> cells(5);
  cells[0].cell.steps = 10;                                            // 10
  cells[1].cell.steps = 10;
  cells[1].cell.dtype = spec::Precision::FP64;                         // 26.7
  cells[2].cell.steps = 20;
  cells[2].cell.nproc = 2;                                             // 10, after cell 0
  cells[3].cell.steps = 15;
  cells[3].cell.dtype = spec::Precision::FP32;                         // 20
  cells[4].cell.steps = 30;
  cells[4].cell.threads = 2;                                           // 15
  EXPECT_EQ(detail::launch_order(cells), (std::vector<size_t>{1, 3, 4, 0, 2}));
}

TEST(MatrixCells, PreparingTheCellsAppliesOnlyStepsDeviceAndInject) {
  const Matrix m = parity::reports::parse_matrix(
      "[[cell]]\nname = \"ref\"\n[[cell]]\nname = \"p\"\nreference = \"ref\"\n"
      "trainer = \"pipelined\"\npp = 2\nvp = 2\n[[cell]]\nname = \"other\"\n",
      "m.toml");
  parity::matrix::MatrixRunOptions o;
  o.only = {"p"};
  o.steps = 3;
  o.device = spec::Device::Cpu;
  o.inject = {{"p", "drop-deposit:block=0,stage=2"}};
  const auto r = detail::prepare_cells(m, o);
  std::vector<std::string> names;
  for (const auto& c : r.cells) names.push_back(c.cell.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ref", "p"}));  // p's reference joins it
  for (const auto& c : r.cells) EXPECT_EQ(c.cell.steps, 3);
  EXPECT_EQ(r.cells[1].cell.inject, (std::vector<std::string>{"drop-deposit:block=0,stage=2"}));
  EXPECT_TRUE(r.cells[0].cell.inject.empty());
}

// How a cell's process ended becomes the cell's status and error: ok only for exit 0 with
// every step logged; otherwise one reason, the most telling first.
class SettleCell : public ::testing::Test {
 protected:
  parity::reports::CellResult cell(int logged) {
    parity::reports::CellResult c;
    c.cell.name = "p";
    c.cell.steps = 3;
    c.log = "cells/p/log.txt";
    c.steps.resize(static_cast<size_t>(logged));
    return c;
  }
  static parity::harness::ExitStatus exited(int code) {
    return {parity::harness::ExitStatus::Kind::Exited, code};
  }
};

TEST_F(SettleCell, ExitZeroWithEveryStepIsOk) {
  auto c = cell(3);
  detail::CellEnding e;
  e.exit = exited(0);
  e.seconds = 2.5;
  detail::settle(c, e);
  EXPECT_EQ(c.status, "ok");
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.wall_seconds, 2.5);
}

TEST_F(SettleCell, ExitZeroWithStepsMissingIsAFailureThatCountsThem) {
  auto c = cell(2);
  detail::CellEnding e;
  e.exit = exited(0);
  detail::settle(c, e);
  EXPECT_EQ(c.status, "failed");
  EXPECT_EQ(c.error, "logged 2 of 3 steps (see cells/p/log.txt)");
}

TEST_F(SettleCell, AnExitCodeOrASignalIsNamedWithTheLogsLastError) {
  auto c = cell(3);
  detail::CellEnding e;
  e.exit = exited(2);
  e.last_error = "parity: unknown --dtype 'fp16'";
  detail::settle(c, e);
  EXPECT_EQ(c.status, "failed");
  EXPECT_EQ(c.error, "exit 2: parity: unknown --dtype 'fp16'");
  e.exit = {parity::harness::ExitStatus::Kind::Signalled, 9};
  e.last_error.clear();
  detail::settle(c, e);
  EXPECT_EQ(c.error, "killed by signal 9");
  e.exit = {};
  detail::settle(c, e);
  EXPECT_EQ(c.error, "could not be waited for");
}

TEST_F(SettleCell, ATimeoutOrAStopSaysSoBeforeHowItExited) {
  auto c = cell(1);
  detail::CellEnding e;
  e.exit = {parity::harness::ExitStatus::Kind::Signalled, 15};
  e.timed_out = true;
  e.seconds = 12.34;
  detail::settle(c, e);
  EXPECT_EQ(c.status, "failed");
  EXPECT_EQ(c.error, "stopped after 12.3 s (--cell-timeout-s)");
  e.timed_out = false;
  e.stopped = true;
  detail::settle(c, e);
  EXPECT_EQ(c.error, "interrupted");
  // A cell that finished cleanly before the stop is still ok.
  auto done = cell(3);
  e.stopped = true;
  e.exit = exited(0);
  detail::settle(done, e);
  EXPECT_EQ(done.status, "ok");
}

}  // namespace

namespace {

// A bitwise gate never passes on a NaN, not even when the cell's dump and its reference's hold
// the same bits: the judge counts every tensor holding NaN or Inf as differing. The control (the
// same dumps without the NaN) passes, so the failure is the NaN's.
parity::reports::GateResult gate_over_identical_dumps(const std::filesystem::path& dir, bool nan) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  for (const char* cell : {"ref", "cell"}) {
    parity::dumps::DumpWriter w((dir / cell / "dump").string(), {1}, "testsha");
    parity::kernels::RunInfo info;
    info.trainer = "reference";
    info.flavor = "tiny";
    info.precision = "fp32";
    info.fqns = {"a.weight"};
    w.on_start(info);
    parity::kernels::StepRecord r;
    r.step = 1;
    r.loss = at::full({}, 7.0f);
    r.grad_norm = at::full({}, 1.5f);
    r.mb_losses = {at::full({}, 3.5f), at::full({}, 3.5f)};
    std::vector<at::Tensor> grads{at::arange(4, at::kFloat)};
    if (nan) grads[0][2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<at::Tensor> params{at::zeros({4})};
    r.grads = &grads;
    r.params = &params;
    w.on_step(r);
    w.on_end();
  }
  parity::reports::MatrixResult m;
  parity::reports::CellResult ref, cell;
  ref.cell.name = "ref";
  ref.status = "ok";
  cell.cell.name = "cell";
  cell.cell.reference = "ref";
  cell.cell.gate = parity::reports::Gate::Bitwise;
  cell.status = "ok";
  m.cells = {ref, cell};
  parity::matrix::judge_cell(m.cells[1], m, dir);
  fs::remove_all(dir);
  return m.cells[1].gate;
}

TEST(MatrixJudge, ABitwiseGateFailsOnANanGradientEvenAgainstTheSameBits) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("parity-judge-nan-" + std::to_string(::getpid()));
  const auto clean = gate_over_identical_dumps(dir, false);
  EXPECT_TRUE(clean.passed) << clean.why;
  const auto nan = gate_over_identical_dumps(dir, true);
  EXPECT_FALSE(nan.passed);
  // the gradient (the parameter is finite)
  EXPECT_NE(nan.why.find("1 of 2 tensors differ at step 1 (max inf ulp)"), std::string::npos)
      << nan.why;
}

}  // namespace
