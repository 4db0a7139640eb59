// Drift tables (reports/drift.h): printed values and their signed change, identical-step
// counts, footnotes, step-1 verdicts and the summary rows.
//
// Every expected string below is worked out by hand from the numbers the test chooses (the
// arithmetic is in the comment beside it), never read off the library's output.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/matrix.h"
#include "reports/results.h"
#include "tests/report_fixtures.h"

namespace rp = parity::reports;
using namespace parity::testing;

namespace {

// A reference and one pipelined cell against it, each with the steps given.
constexpr const char* kPair = R"(name = "pair"
[[cell]]
name = "ref"
[[cell]]
name = "cell"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "order-only"
)";

// ref and cell over the same steps; `cell_loss`/`cell_norm` are the cell's values.
rp::MatrixResult pair(const std::vector<double>& ref_loss, const std::vector<double>& ref_norm,
                      const std::vector<double>& cell_loss, const std::vector<double>& cell_norm,
                      std::vector<int64_t> report_steps) {
  auto r = result_of(kPair, std::move(report_steps));
  for (size_t i = 0; i < ref_loss.size(); ++i)
    cell_of(r, "ref").steps.push_back(point(int64_t(i) + 1, ref_loss[i], ref_norm[i]));
  for (size_t i = 0; i < cell_loss.size(); ++i)
    cell_of(r, "cell").steps.push_back(point(int64_t(i) + 1, cell_loss[i], cell_norm[i]));
  return r;
}

const rp::DriftRow& row_of(const rp::DriftTable& t, const std::string& cell) {
  for (const auto& row : t.rows)
    if (row.cell == cell) return row;
  throw std::runtime_error("no row " + cell);
}

TEST(Drift, PrintedValuesAndTheirChange) {
  // Step 1: loss equal; grad norm 1.2 against 1.5: (1.2 - 1.5) / 1.5 = -20%.
  // Step 2: loss 3.485760 against 3.488880: -0.00312 / 3.48888 = -0.0894...% -> -0.09%;
  //         grad norm 2.5 against 2.0: +25%.
  const auto r = pair({8.003520, 3.488880}, {1.5, 2.0}, {8.003520, 3.485760}, {1.2, 2.5}, {1, 2});
  const auto t = rp::drift_tables(r);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].reference, "ref");
  EXPECT_EQ(t[0].steps, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(t[0].rows.size(), 2u);
  const auto& ref = t[0].rows[0];
  EXPECT_TRUE(ref.reference);
  EXPECT_EQ(ref.cell, "ref");
  EXPECT_EQ(ref.status, "ok");
  EXPECT_EQ(ref.loss[0].value, "8.003520");  // 6 decimals
  EXPECT_EQ(ref.loss[0].change, "");         // the reference row has no change
  EXPECT_EQ(ref.grad_norm[0].value, "1.5000");  // 4 decimals
  EXPECT_EQ(ref.grad_norm[1].value, "2.0000");

  const auto& c = t[0].rows[1];
  EXPECT_FALSE(c.reference);
  EXPECT_EQ(c.loss[0].value, "8.003520");
  EXPECT_EQ(c.loss[0].change, "identical");
  EXPECT_EQ(c.loss[1].value, "3.485760");
  EXPECT_EQ(c.loss[1].change, "-0.09%");
  EXPECT_EQ(c.grad_norm[0].value, "1.2000");
  EXPECT_EQ(c.grad_norm[0].change, "-20.00%");
  EXPECT_EQ(c.grad_norm[1].value, "2.5000");
  EXPECT_EQ(c.grad_norm[1].change, "+25.00%");
}

TEST(Drift, BitsThatDifferBelowThePrintedDigitsAreIdentical) {
  // 3 + 2^-40 prints as 3.000000; 1.25 + 2^-30 prints as 1.2500.
  const double loss = 3.0 + std::ldexp(1.0, -40), norm = 1.25 + std::ldexp(1.0, -30);
  const auto r = pair({3.0}, {1.25}, {loss}, {norm}, {1});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss[0].value, "3.000000");
  EXPECT_EQ(c.loss[0].change, "identical");
  EXPECT_EQ(c.grad_norm[0].change, "identical");
  // ... but the bitwise count sees them.
  EXPECT_EQ(c.loss_same.compared, 1);
  EXPECT_EQ(c.loss_same.identical, 0);
}

TEST(Drift, AChangeThatRoundsToZeroKeepsItsSign) {
  // 8.000010 against 8.000000: +0.000125% -> "+0.00%"; 7.999990: -0.000125% -> "-0.00%".
  // Grad norm 4.0001 against 4.0: +0.0025% -> "+0.00%"; 3.9999: "-0.00%".
  const auto r = pair({8.0, 8.0}, {4.0, 4.0}, {8.000010, 7.999990}, {4.0001, 3.9999}, {1, 2});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss[0].change, "+0.00%");
  EXPECT_EQ(c.loss[1].change, "-0.00%");
  EXPECT_EQ(c.grad_norm[0].change, "+0.00%");
  EXPECT_EQ(c.grad_norm[1].change, "-0.00%");
}

TEST(Drift, AMissingStepIsNotAvailable) {
  // The cell logged steps 1 and 2 only; the reference lacks step 2.
  auto r = result_of(kPair, {1, 2, 3});
  cell_of(r, "ref").steps = {point(1, 4.0, 1.0), point(3, 3.0, 1.0)};
  cell_of(r, "cell").steps = {point(1, 4.0, 1.0), point(2, 3.5, 1.0)};
  const auto t = rp::drift_tables(r)[0];
  const auto& ref = row_of(t, "ref");
  EXPECT_EQ(ref.loss[1].value, "");
  EXPECT_EQ(ref.loss[1].change, "n/a");
  const auto& c = row_of(t, "cell");
  EXPECT_EQ(c.loss[1].value, "3.500000");  // logged, but nothing to compare against
  EXPECT_EQ(c.loss[1].change, "n/a");
  EXPECT_EQ(c.loss[2].value, "");
  EXPECT_EQ(c.loss[2].change, "n/a");
  EXPECT_EQ(c.grad_norm[2].change, "n/a");
  // Only step 1 is logged by both.
  EXPECT_EQ(c.loss_same.compared, 1);
  EXPECT_EQ(c.loss_same.identical, 1);
  EXPECT_EQ(c.loss_same.text, "the one step identical");
}

// 100 steps of a reference curve: loss 9 - step/64 (exact in binary), grad norm 1.5 except
// 1.2085 at step 37.
std::vector<double> ref_loss_100() {
  std::vector<double> v;
  for (int s = 1; s <= 100; ++s) v.push_back(9.0 - s / 64.0);
  return v;
}
std::vector<double> ref_norm_100() {
  std::vector<double> v(100, 1.5);
  v[36] = 1.2085;
  return v;
}

TEST(IdenticalSteps, AllIdentical) {
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), ref_norm_100(), {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 100);
  EXPECT_EQ(c.loss_same.identical, 100);
  EXPECT_EQ(c.loss_same.text, "all 100 steps identical");
  EXPECT_EQ(c.grad_norm_same.text, "all 100 steps identical");
}

TEST(IdenticalSteps, OneStepOneUnitApartInTheLastPrintedDigit) {
  auto norm = ref_norm_100();
  norm[36] = 1.2084;
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), norm, {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.text, "all 100 steps identical");
  EXPECT_EQ(c.grad_norm_same.compared, 100);
  EXPECT_EQ(c.grad_norm_same.identical, 99);
  EXPECT_EQ(c.grad_norm_same.text,
            "99 of 100 steps identical; step 37 differs by one unit in the last printed digit "
            "(1.2084 vs 1.2085)");
}

TEST(IdenticalSteps, OneUnitApartAcrossACarry) {
  // 1.9999 and 2.0000 differ in every printed digit, yet by one unit of the last.
  auto ref = ref_norm_100(), norm = ref_norm_100();
  ref[4] = 2.0;
  norm[4] = 1.9999;
  const auto r = pair(ref_loss_100(), ref, ref_loss_100(), norm, {1});
  EXPECT_EQ(rp::drift_tables(r)[0].rows[1].grad_norm_same.text,
            "99 of 100 steps identical; step 5 differs by one unit in the last printed digit "
            "(1.9999 vs 2.0000)");
}

TEST(IdenticalSteps, OneStepDifferingBelowThePrintedDigits) {
  auto norm = ref_norm_100();
  norm[36] = std::nextafter(1.2085, 2.0);  // one ulp above: still prints 1.2085
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), norm, {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.grad_norm_same.identical, 99);
  EXPECT_EQ(c.grad_norm_same.text,
            "99 of 100 steps identical; step 37 differs below the printed digits (1.2085)");
}

TEST(IdenticalSteps, ManyStepsDiffer) {
  // Step 1 equal, step 2 3.484850 against 3.488880, steps 3..100 half a unit of loss lower.
  auto ref = ref_loss_100(), loss = ref_loss_100();
  ref[1] = 3.488880;
  loss[1] = 3.484850;
  for (int i = 2; i < 100; ++i) loss[i] = ref[i] - 0.5;
  const auto r = pair(ref, ref_norm_100(), loss, ref_norm_100(), {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 100);
  EXPECT_EQ(c.loss_same.identical, 1);
  EXPECT_EQ(c.loss_same.text,
            "1 of 100 steps identical; first differs at step 2 (3.484850 vs 3.488880)");
}

TEST(IdenticalSteps, NothingToCompare) {
  auto r = pair({4.0, 3.0}, {1.0, 1.0}, {}, {}, {1});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 0);
  EXPECT_EQ(c.loss[0].change, "n/a");
}

// Two tables: bf16 {ref, reversed, cached}, fp32 {ref32, naive32 with a split}. The kinds
// that occur are reference, naive, split and reversed; in the report's kind order (drift.h:
// reference, naive, split, stock, reversed, ...) they are numbered 1, 2, 3, 4.
constexpr const char* kTwoTables = R"(name = "two"
[[cell]]
name = "ref"
[[cell]]
name = "reversed"
reference = "ref"
reverse_microbatches = true
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
[[cell]]
name = "ref32"
dtype = "fp32"
[[cell]]
name = "naive32"
reference = "ref32"
dtype = "fp32"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
split = "emb,0-3|4-8|9-13|14-16,head"
)";

TEST(Footnotes, NumberedInKindOrderOverTheReportListedPerTableAsUsed) {
  auto r = result_of(kTwoTables, {1});
  for (auto& c : r.cells) c.steps = {point(1, 4.0, 1.0)};
  const auto t = rp::drift_tables(r);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(row_of(t[0], "ref").label, "dp1 [1]");
  EXPECT_EQ(row_of(t[0], "reversed").label, "dp1, micro-batches reversed [4]");
  EXPECT_EQ(row_of(t[0], "cached").label, "pp2 x vp2, cached");  // no kind, no mark
  EXPECT_EQ(row_of(t[1], "ref32").label, "dp1 [1]");
  EXPECT_EQ(row_of(t[1], "naive32").label, "pp2 x vp2, naive [2][3]");

  auto numbers = [](const rp::DriftTable& table) {
    std::vector<int> n;
    for (const auto& f : table.footnotes) n.push_back(f.number);
    return n;
  };
  EXPECT_EQ(numbers(t[0]), (std::vector<int>{1, 4}));
  EXPECT_EQ(numbers(t[1]), (std::vector<int>{1, 2, 3}));
  // The texts as a reader sees them, written out here (not taken from footnote_text itself).
  EXPECT_EQ(t[0].footnotes[1].text,
            "the micro-batches in reverse order, the same data and checkpoint: the floor of a "
            "sum-order change");
  EXPECT_EQ(t[1].footnotes[2].text,
            "the split spelled out (the cell's split key), not the even default");
}

TEST(Footnotes, RowKinds) {
  const auto m = rp::parse_matrix(kTwoTables, "r.toml");
  EXPECT_EQ(rp::row_kinds(*m.find("ref"), nullptr), (std::vector<std::string>{"reference"}));
  EXPECT_EQ(rp::row_kinds(*m.find("naive32"), m.find("ref32")),
            (std::vector<std::string>{"naive", "split"}));
  EXPECT_EQ(rp::row_kinds(*m.find("cached"), m.find("ref")), std::vector<std::string>{});
  // The same arguments as the reference: a repeat.
  EXPECT_EQ(rp::row_kinds(*m.find("ref"), m.find("ref")), (std::vector<std::string>{"repeat"}));
}

TEST(Drift, TableTitleNamesTheShape) {
  auto r = result_of(kTwoTables, {1});
  const auto t = rp::drift_tables(r);
  // 1 x 4 micro-batches x 1 row x 256 tokens = 1024 tokens per step, 20 steps (the defaults).
  EXPECT_TRUE(contains(t[0].title, "tiny, bf16")) << t[0].title;
  EXPECT_TRUE(contains(t[0].title, "1024 tokens per step")) << t[0].title;
  EXPECT_TRUE(contains(t[0].title, "20 steps")) << t[0].title;
  EXPECT_TRUE(contains(t[1].title, "fp32")) << t[1].title;
}

TEST(Step1Verdict, EveryCase) {
  rp::CellResult c;
  c.status = "failed";
  EXPECT_EQ(rp::step1_verdict(c), "FAILED");  // even a reference
  c.status = "ok";
  EXPECT_EQ(rp::step1_verdict(c), "REFERENCE");
  c.cell.reference = "ref";
  EXPECT_EQ(rp::step1_verdict(c), "n/a");  // neither a ledger nor a comparison

  // No ledger: the tensor comparison decides.
  c.step1.have = true;
  EXPECT_EQ(rp::step1_verdict(c), "BITWISE");
  c.step1.wrong_tensors = 3;
  EXPECT_EQ(rp::step1_verdict(c), "DIFFERS");
  c.step1.wrong_tensors = 0;
  c.step1.scalars_equal = false;
  EXPECT_EQ(rp::step1_verdict(c), "DIFFERS");

  // The ledger, when there is one, decides over the comparison.
  c.verdicts.have = true;
  c.verdicts.exact = 10;
  EXPECT_EQ(rp::step1_verdict(c), "EXACT");
  c.verdicts.order_only = 2;
  EXPECT_EQ(rp::step1_verdict(c), "ORDER-ONLY");
  c.verdicts.wrong = 1;
  EXPECT_EQ(rp::step1_verdict(c), "WRONG");

  c.status = "failed";
  EXPECT_EQ(rp::step1_verdict(c), "FAILED");
}

TEST(SummaryRows, CountsUlpsGatesAndAFailedCellsError) {
  auto r = result_of(kPair, {1});
  auto& ref = cell_of(r, "ref");
  ref.seconds_per_step = 0.5;
  auto& c = cell_of(r, "cell");
  c.step1.have = true;
  c.step1.tensors = 12;
  c.step1.wrong_tensors = 4;
  c.step1.max_ulp = rp::kUlpInfinite;
  c.verdicts.have = true;
  c.verdicts.exact = 8;
  c.verdicts.order_only = 3;
  c.verdicts.wrong = 1;
  c.verdicts.first_wrong = "grads/w: lacks a deposit";
  c.bytes_forward_per_mb = 7168;
  c.gate.passed = false;
  c.gate.why = "1 WRONG at step 1";

  auto rows = rp::summary_rows(r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].cell, "ref");
  EXPECT_EQ(rows[0].verdict, "REFERENCE");
  EXPECT_EQ(rows[0].wrong, "-");
  EXPECT_EQ(rows[0].max_ulp, "-");
  EXPECT_EQ(rows[0].exact, -1);  // no ledger
  EXPECT_EQ(rows[0].gate, "-");
  EXPECT_EQ(rows[0].note, "");
  EXPECT_EQ(rows[0].seconds_per_step, 0.5);
  EXPECT_EQ(rows[1].verdict, "WRONG");
  EXPECT_EQ(rows[1].wrong, "4");
  EXPECT_EQ(rows[1].max_ulp, "inf");
  EXPECT_EQ(rows[1].exact, 8);
  EXPECT_EQ(rows[1].order_only, 3);
  EXPECT_EQ(rows[1].wrong_verdicts, 1);
  EXPECT_EQ(rows[1].bytes_forward_per_mb, 7168);
  EXPECT_EQ(rows[1].bytes_backward_per_mb, -1);
  EXPECT_EQ(rows[1].gate, "FAIL");
  EXPECT_EQ(rows[1].note, "1 WRONG at step 1");

  c.step1.max_ulp = 37;
  c.gate.passed = true;
  rows = rp::summary_rows(r);
  EXPECT_EQ(rows[1].max_ulp, "37");
  EXPECT_EQ(rows[1].gate, "pass");
  EXPECT_EQ(rows[1].note, "grads/w: lacks a deposit");  // a WRONG verdict with no failed gate

  c.status = "failed";
  c.error = "exit 1: parity: deposit count for block 2 at stage 3: expected 2, got 1";
  c.gate.passed = false;
  c.gate.why = "the cell did not run to the end";
  rows = rp::summary_rows(r);
  EXPECT_EQ(rows[1].verdict, "FAILED");
  EXPECT_EQ(rows[1].gate, "FAIL");
  EXPECT_EQ(rows[1].note,
            "failed: exit 1: parity: deposit count for block 2 at stage 3: expected 2, got 1");
}

TEST(PercentChange, SignedTwoDecimals) {
  EXPECT_EQ(rp::percent_change(3.485760, 3.488880), "-0.09%");  // -0.0894%
  EXPECT_EQ(rp::percent_change(3.0, 2.0), "+50.00%");
  EXPECT_EQ(rp::percent_change(1.0, 4.0), "-75.00%");
  EXPECT_EQ(rp::percent_change(2.0, 2.0), "+0.00%");
  EXPECT_EQ(rp::percent_change(1.00001, 1.0), "+0.00%");   // +0.001%
  EXPECT_EQ(rp::percent_change(0.99999, 1.0), "-0.00%");
  EXPECT_EQ(rp::percent_change(1.0, 0.0), "n/a");  // no relative change against zero
  EXPECT_EQ(rp::percent_change(-1.5, -2.0), "+25.00%");  // against |reference|
  EXPECT_EQ(rp::percent_change(std::nan(""), 2.0), "n/a");
  EXPECT_EQ(rp::percent_change(std::numeric_limits<double>::infinity(), 2.0), "n/a");
}

}  // namespace
