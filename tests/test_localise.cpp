// The contribution ledger and `localise` (docs/design.md sections 3 and 6, contract 4):
// ledger mode moves no bit; cached against naive transport differs only by reduction order,
// only inside the predicted set; every injected fault is WRONG and localised to its block and
// stage.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>

#include "dumps/dump.h"
#include "compare/dump_compare.h"
#include "dumps/ledger_dump.h"
#include "compare/localise.h"
#include "pipelined/faults.h"
#include "pipelined/trainer.h"
#include "reference/trainer.h"
#include "tests/synthetic.h"

namespace parity::compare {
using namespace dumps;  // the dumps these tests write and read
namespace {

namespace fs = std::filesystem;
using kernels::Precision;

const datasets::TokenRows& rows() {
  static const auto r = testing::synthetic_rows(32, 8);
  return r;
}

kernels::TrainConfig config(Precision p, bool ledger) {
  kernels::TrainConfig c;
  c.model = kernels::flavor("tiny");
  c.precision = p;
  c.steps = 1;
  c.microbatches = 4;
  c.ledger = ledger;
  return c;
}

class Localise : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity_localise_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One step of tiny, dumped (with the ledger unless told otherwise) under dir_/name.
  std::string pipelined_run(const std::string& name, Precision p, int pp, int vp, bool cache,
                            const std::string& fault = "", bool ledger = true) {
    auto cfg = config(p, ledger);
    pipelined::PipelineConfig pc;
    pc.pp = pp;
    pc.vp = vp;
    pc.schedule = vp == 1 ? pipelined::ScheduleKind::OneFOneB
                          : pipelined::ScheduleKind::Interleaved1F1B;
    pc.cache = cache;
    if (!fault.empty()) {
      pc.faults = {pipelined::parse_fault(fault)};
      pc.check_deposit_counts = false;
    }
    const auto path = (dir_ / name).string();
    DumpWriter w(path, {1}, "test");
    pipelined::PipelinedTrainer(cfg, pc, testing::tiny_params(), rows()).run(w);
    return path;
  }
  std::string reference_run(const std::string& name, Precision p) {
    const auto path = (dir_ / name).string();
    DumpWriter w(path, {1}, "test");
    reference::ReferenceTrainer(config(p, true), testing::tiny_params(), rows()).run(w);
    return path;
  }

  fs::path dir_;
};

TEST_F(Localise, LedgerModeMovesNoBit) {
  const auto with = pipelined_run("with", Precision::BF16, 2, 2, true);
  const auto without = pipelined_run("without", Precision::BF16, 2, 2, true, "", false);
  const auto rows = compare_dumps(read_dump(with), read_dump(without));
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows) EXPECT_TRUE(r.diff.bitwise) << r.diff.name;
}

struct Shape {
  int pp, vp;
  Precision p;
};

class CachedAgainstNaive : public Localise, public ::testing::WithParamInterface<Shape> {};

TEST_P(CachedAgainstNaive, DiffersOnlyByOrderAndOnlyInsideThePredictedSet) {
  const auto s = GetParam();
  const auto on = pipelined_run("on", s.p, s.pp, s.vp, true);
  const auto off = pipelined_run("off", s.p, s.pp, s.vp, false);
  const auto r = localise(on, off);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(r.count(Verdict::Wrong), 0);
  ASSERT_FALSE(r.predicted.empty());
  int differing_grads = 0;
  for (const auto& t : r.tensors) {
    if (t.name.rfind("grads/", 0) != 0) continue;
    if (!t.predicted) {
      EXPECT_EQ(t.verdict, Verdict::Exact) << t.name;
    } else if (t.verdict != Verdict::Exact) {
      EXPECT_EQ(t.verdict, Verdict::OrderOnly) << t.name;
      ++differing_grads;
    }
  }
  // The layouts do reorder some sums: a check that saw no difference would prove nothing.
  EXPECT_GT(differing_grads, 0);
  for (const auto& t : r.tensors) {
    if (t.name == "loss" || t.name == "mb_losses") {
      EXPECT_EQ(t.verdict, Verdict::Exact);
    }
  }
  // The expert biases come from the forward's routing alone: bitwise equal (tiny has 16 MoE
  // layers, each with one).
  int biases = 0;
  for (const auto& t : r.tensors)
    if (t.name.rfind("buffers/", 0) == 0) {
      ++biases;
      EXPECT_EQ(t.verdict, Verdict::Exact) << t.name;
    }
  EXPECT_EQ(biases, 16);
  int order_only_blocks = 0;
  for (const auto& b : r.blocks) {
    EXPECT_NE(b.verdict, Verdict::Wrong);
    order_only_blocks += b.verdict == Verdict::OrderOnly;
    EXPECT_LE(b.excess_a, 1.0);
    EXPECT_LE(b.excess_b, 1.0);
  }
  EXPECT_GT(order_only_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, CachedAgainstNaive,
    ::testing::Values(Shape{2, 2, Precision::BF16}, Shape{2, 2, Precision::BF16Master},
                      Shape{2, 2, Precision::FP32}, Shape{4, 4, Precision::BF16},
                      Shape{4, 4, Precision::BF16Master}, Shape{4, 4, Precision::FP32}),
    [](const ::testing::TestParamInfo<Shape>& i) {
      return "pp" + std::to_string(i.param.pp) + "xvp" + std::to_string(i.param.vp) + "_" +
             testing::test_name(i.param.p);
    });

TEST_F(Localise, NaiveTransportAgainstTheReferenceIsExact) {
  const auto r = localise(reference_run("ref", Precision::FP32),
                          pipelined_run("naive", Precision::FP32, 2, 2, false));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.count(Verdict::OrderOnly), 0);
  EXPECT_EQ(r.count(Verdict::Wrong), 0);
  EXPECT_FALSE(r.first.found);
  for (const auto& b : r.blocks) EXPECT_EQ(b.verdict, Verdict::Exact);
}

struct FaultCase {
  const char* spec;
  int block, stage;     // where the finding must point (the producer's stage for sums)
  const char* phrase;   // what it must call the fault
};

class Faults : public Localise, public ::testing::WithParamInterface<FaultCase> {};

// pp2xvp2 on tiny: stage 3 (rank 1) deposits blocks 0-2, stage 1 produces blocks 1-2 and
// collects them, stage 0 produces block 0 (parity layout --layers 17 --pp 2 --vp 2).
TEST_P(Faults, AreWrongAndLocalised) {
  const auto c = GetParam();
  const auto good = pipelined_run("good", Precision::BF16, 2, 2, true);
  const auto bad = pipelined_run("bad", Precision::BF16, 2, 2, true, c.spec);
  const auto r = localise(good, bad);
  EXPECT_FALSE(r.ok());
  EXPECT_GT(r.count(Verdict::Wrong), 0);
  ASSERT_FALSE(r.findings.empty());
  bool located = false;
  for (const auto& f : r.findings) {
    EXPECT_EQ(f.run, "B");  // the clean run passes its own self-check
    located = located || (f.block == c.block && f.stage == c.stage &&
                          f.what.find(c.phrase) != std::string::npos);
  }
  EXPECT_TRUE(located) << "first finding: block " << r.findings[0].block << " stage "
                       << r.findings[0].stage << ": " << r.findings[0].what;
  EXPECT_TRUE(r.first.found);
}

INSTANTIATE_TEST_SUITE_P(
    EveryKind, Faults,
    ::testing::Values(FaultCase{"drop-deposit:block=1,stage=3", 1, 1, "a dropped deposit"},
                      FaultCase{"duplicate-deposit:block=2,stage=3,mb=1", 2, 1,
                                "a duplicated deposit"},
                      FaultCase{"misroute:block=0,stage=3", 1, 1, "misrouted from block 0"},
                      FaultCase{"skip-collect:block=1,stage=1", 1, 1, "skipped collecting block 1"},
                      FaultCase{"stale-block:block=1,stage=3,mb=2", 1, 3, "a stale block"}),
    [](const ::testing::TestParamInfo<FaultCase>& i) {
      std::string n = i.param.spec;
      n = n.substr(0, n.find(':'));
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST_F(Localise, MutatedLedgerBytesNeverCrashTheReader) {
  const auto good = pipelined_run("good", Precision::FP32, 2, 2, true);
  const auto file = fs::path(good) / "rank0.h5";
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 rng(99);
  int refused = 0, read_ok = 0;
  for (int trial = 0; trial < 40; ++trial) {
    auto m = bytes;
    // Odd trials aim at the first 4 KiB (superblock and headers), even ones anywhere.
    const size_t span = trial % 2 ? std::min<size_t>(m.size(), 4096) : m.size();
    for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k)
      m[rng() % span] ^= static_cast<char>(1 + rng() % 255);
    const auto path = dir_ / "mutated.h5";
    std::ofstream(path, std::ios::binary).write(m.data(), static_cast<std::streamsize>(m.size()));
    try {
      const auto l = read_ledger(path.string(), 1);
      ++read_ok;  // a flip inside tensor data reads fine; the self-check would then flag it
      EXPECT_FALSE(l.blocks.empty());  // what reads holds the ledger's blocks
    } catch (const DumpError& e) {  // the only refusal read_ledger promises (dumps/ledger_dump.h)
      ++refused;
      EXPECT_NE(std::string(e.what()).find("mutated.h5"), std::string::npos) << e.what();
    }
  }
  std::printf("[ observed ] 40 mutants: %d read, %d refused\n", read_ok, refused);
  EXPECT_GT(read_ok, 0) << "no mutant was read: intact ledgers are refused";
  EXPECT_GT(refused, 0) << "no mutant was refused: the reader checks nothing";
}

TEST_F(Localise, RefusesDumpsWithoutALedger) {
  const auto a = pipelined_run("a", Precision::FP32, 2, 2, true, "", false);
  const auto b = pipelined_run("b", Precision::FP32, 2, 2, false, "", false);
  EXPECT_THROW(localise(a, b), DumpError);
}

}  // namespace
}  // namespace parity::compare
