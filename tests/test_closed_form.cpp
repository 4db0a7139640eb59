// Contract 3 (docs/design.md section 3): the exact flavor through the real trainers, stage protocol
// and schedules equals its closed form bitwise, in bf16, fp32 and fp64, cache on and off, on
// every split, over 3 SGD steps with a forward-only pass between; exact-wide in fp64. And the
// closed form catches every injected routing fault on its own.
#include <gtest/gtest.h>

#include <sstream>

#include "harness/closed_form.h"
#include "kernels/config.h"

namespace parity::harness {
namespace {

using kernels::Precision;
using pipelined::ScheduleKind;

struct Shape {
  const char* name;
  bool pipelined;
  int pp, vp;
  ScheduleKind schedule;
  const char* split;
};

const Shape kShapes[] = {
    {"pp4xvp4_head_alone", true, 4, 4, ScheduleKind::Interleaved1F1B,
     "emb,0-1|2|3|4|5|6|7|8|9|10|11|12|13|14|15|head"},
    {"pp4xvp2_even", true, 4, 2, ScheduleKind::Interleaved1F1B, ""},
    {"uneven_8_stages", true, 4, 2, ScheduleKind::Interleaved1F1B,
     "0-1|2-4|5|6-9|10|11-13|14|15,head"},
    {"pp4xvp1_1f1b", true, 4, 1, ScheduleKind::OneFOneB, ""},
    {"reference", false, 1, 1, ScheduleKind::OneFOneB, ""},
};

ClosedFormOptions options(const Shape& s, Precision p, bool cache, bool wide) {
  ClosedFormOptions o;
  o.pipelined = s.pipelined;
  o.pipeline.pp = s.pp;
  o.pipeline.vp = s.vp;
  o.pipeline.schedule = s.schedule;
  o.pipeline.split = s.split;
  o.pipeline.cache = cache;
  o.precision = p;
  o.wide = wide;
  o.steps = 3;
  return o;
}

std::string explain(const ClosedFormReport& r) {
  std::ostringstream os;
  os << r.cell << "\n";
  for (const auto& s : r.out_of_range) os << "  out of range: " << s << "\n";
  for (const auto& m : r.mismatches)
    os << "  " << m.what << ": " << m.n_wrong << "/" << m.numel << " wrong, first [" << m.first_index
       << "] got " << m.got << " expected " << m.expected << "\n";
  return os.str();
}

// 3 steps x (4 micro-batch losses + the loss + 34 gradients + 34 parameters) + 2 forward-only
// passes x 4 losses: the count of values checked follows from the flavor, so a run that
// silently checked less would show here.
constexpr int64_t kTensors = 3 * (2 + 2 * 34) + 2;

struct Cell {
  int shape;
  Precision precision;
  bool cache;
  bool wide;
};

class ClosedForm : public ::testing::TestWithParam<Cell> {};

TEST_P(ClosedForm, EqualsTheClosedFormBitwise) {
  const auto c = GetParam();
  const auto r = run_closed_form(options(kShapes[c.shape], c.precision, c.cache, c.wide));
  EXPECT_TRUE(r.pass()) << explain(r);
  EXPECT_EQ(r.tensors_checked, kTensors);
  if (c.wide)  // the values really are beyond fp32's 24 significand bits
    EXPECT_GT(r.max_significand_bits, 24);
  else  // and the plain flavor's gradients and parameters fit bf16 (checked per value)
    EXPECT_TRUE(r.out_of_range.empty());
}

std::vector<Cell> cells() {
  std::vector<Cell> out;
  for (int s = 0; s < 5; ++s)
    for (auto p : {Precision::BF16, Precision::BF16Master, Precision::FP32, Precision::FP64})
      for (bool cache : {true, false}) {
        if (!kShapes[s].pipelined && !cache) continue;  // the reference has no transport
        out.push_back({s, p, cache, false});
        if (p == Precision::FP64) out.push_back({s, p, cache, true});
      }
  return out;
}

std::string cell_name(const ::testing::TestParamInfo<Cell>& info) {
  const auto& c = info.param;
  std::string n = kShapes[c.shape].name;
  n += c.precision == Precision::BF16Master ? "_bf16_master"
                                            : std::string("_") + kernels::to_string(c.precision);
  if (kShapes[c.shape].pipelined) n += c.cache ? "_cached" : "_naive";
  if (c.wide) n += "_wide";
  return n;
}

INSTANTIATE_TEST_SUITE_P(EveryShape, ClosedForm, ::testing::ValuesIn(cells()), cell_name);

// Every fault kind, at a place where it has something to break on pp2xvp2 (layout: stage 3
// deposits blocks 0-2, stage 2 deposits block 0, stage 1 collects blocks 1-2 from stage 3,
// stage 3 reads blocks 0-2 from its rank's store), makes the closed form fail.
TEST(ClosedFormFaults, EveryInjectedFaultIsCaught) {
  for (const char* spec :
       {"drop-deposit:block=1,stage=3", "duplicate-deposit:block=2,stage=3,mb=1",
        "misroute:block=0,stage=3", "skip-collect:block=1,stage=1",
        "stale-block:block=1,stage=3,mb=2"}) {
    SCOPED_TRACE(spec);
    Shape s{"pp2xvp2", true, 2, 2, ScheduleKind::Interleaved1F1B, ""};
    auto o = options(s, Precision::BF16, true, false);
    o.pipeline.faults = {pipelined::parse_fault(spec)};
    o.pipeline.check_deposit_counts = false;
    const auto r = run_closed_form(o);
    ASSERT_EQ(r.fault_hits.size(), 1u);
    EXPECT_GT(r.fault_hits[0], 0) << "the fault never fired";
    EXPECT_FALSE(r.pass());
    EXPECT_FALSE(r.mismatches.empty());
  }
}

TEST(ClosedFormFaults, AFaultWithNothingToBreakIsReportedAsNeverFired) {
  Shape s{"pp2xvp2", true, 2, 2, ScheduleKind::Interleaved1F1B, ""};
  auto o = options(s, Precision::FP32, true, false);
  o.pipeline.faults = {pipelined::parse_fault("drop-deposit:block=3,stage=3")};  // none there
  o.pipeline.check_deposit_counts = false;
  const auto r = run_closed_form(o);
  ASSERT_EQ(r.fault_hits.size(), 1u);
  EXPECT_EQ(r.fault_hits[0], 0);
  EXPECT_TRUE(r.pass());
}

TEST(ClosedFormOptions, WideNeedsFp64) {
  auto o = options(kShapes[4], Precision::FP32, true, true);
  EXPECT_THROW(run_closed_form(o), kernels::ConfigError);
}

}  // namespace
}  // namespace parity::harness
