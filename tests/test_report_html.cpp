// The HTML report (render_html) and the SVG layer under it (reports/svg.h). The page is built
// from a synthetic MatrixResult written out by hand below: two tables, the first a reference
// and three cells (a pipelined cell with a layout, a cell whose gate fails, a failed cell),
// the second a reference and one cell bitwise equal to it on every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/html_sections.h"
#include "reports/render.h"
#include "reports/svg.h"
#include "tests/report_fixtures.h"

namespace rp = parity::reports;
namespace svg = parity::reports::svg;

namespace {

// `parity layout --layers 17 --block 4 --pp 2 --vp 2 --json`, verbatim.
constexpr const char* kLayout17x4pp2vp2 =
    R"({"block":4,"layers":17,"pp":2,"split":"emb,0-3|4-8|9-13|14-16,head","stages":[)"
    R"({"collects":[{"block":0,"from":2}],"commits":[0],"deposits":[],"held_at_entry":[],)"
    R"("rank":0,"sends_cached":[0],"sends_naive":[0],"stage":0,"units":"emb,0-3"},)"
    R"({"collects":[{"block":0,"from":3},{"block":1,"from":3},{"block":2,"from":3}],)"
    R"("commits":[1,2],"deposits":[],"held_at_entry":[],"rank":1,"sends_cached":[1,2],)"
    R"("sends_naive":[0,1,2],"stage":1,"units":"4-8"},)"
    R"({"collects":[],"commits":[3],"deposits":[0],"held_at_entry":[0],"rank":0,)"
    R"("sends_cached":[3],"sends_naive":[0,1,2,3],"stage":2,"units":"9-13"},)"
    R"({"collects":[],"commits":[4],"deposits":[0,1,2],"held_at_entry":[0,1,2],"rank":1,)"
    R"("sends_cached":[],"sends_naive":[],"stage":3,"units":"14-16,head"}],)"
    R"("volume":{"cached":4,"cached_peak":2,"naive":8,"naive_peak":4,"option1":4},"vp":2})";

const char* kBrokenError =
    "deposit count for block 2 at stage 7 (micro-batch 3): expected 2, "
    "got 1 <stale>";

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

rp::StepPoint point(int64_t step, double loss, double grad_norm) {
  return parity::testing::point(step, loss, grad_norm, /*seconds=*/0.5);
}

rp::CellResult cell(const std::string& name, const std::string& label,
                    const std::string& reference) {
  rp::CellResult c;
  c.cell.name = name;
  c.cell.label = label;
  c.cell.reference = reference;
  c.cell.steps = 6;
  c.status = "ok";
  c.seconds_per_step = 0.5;
  return c;
}

// Six steps of the reference's curve.
const double kLoss[] = {8.003520, 6.1, 4.9, 3.8, 3.2, 2.9};
const double kNorm[] = {2.2337, 1.9, 1.6, 1.4, 1.2, 1.1};

rp::MatrixResult synthetic() {
  rp::MatrixResult r;
  r.matrix = "synthetic";
  r.source = "tests/test_report_html.cpp";
  r.git_sha = "0123456789abcdef";
  r.started = "2026-11-30T12:00:00Z";
  r.wall_seconds = 754;
  r.report_steps = {1, 3, 6};

  rp::CellResult ref = cell("ref", "dp1", "");
  for (int i = 0; i < 6; ++i) ref.steps.push_back(point(i + 1, kLoss[i], kNorm[i]));

  // Loss identical at step 1 only; grad norm identical at steps 1 and 2.
  rp::CellResult cached = cell("pp2vp2_cached", "pp2 x vp2, cached", "ref");
  cached.cell.trainer = parity::spec::Trainer::Pipelined;
  cached.cell.pp = 2;
  cached.cell.vp = 2;
  for (int i = 0; i < 6; ++i)
    cached.steps.push_back(
        point(i + 1, kLoss[i] + (i ? 1e-4 * i : 0), kNorm[i] + (i > 1 ? 2e-3 : 0)));
  cached.step1.have = true;
  cached.step1.tensors = 16;
  cached.step1.wrong_tensors = 5;
  cached.step1.max_ulp = 9;
  cached.step1.grad_ulps = {0, 0, 1, 2, 3, 5, 0, 9};
  cached.verdicts.have = true;
  cached.verdicts.exact = 11;
  cached.verdicts.order_only = 5;
  cached.bytes_forward_per_mb = 3 * 1024 * 1024;
  cached.bytes_backward_per_mb = 1536;
  cached.layout = nlohmann::json::parse(kLayout17x4pp2vp2);
  cached.gate.gate = rp::Gate::OrderOnly;

  // Identical on steps 1-3, then off; a NaN/Inf mismatch in one tensor; its gate fails.
  rp::CellResult stock = cell("stock", "dp1, stock accumulation", "ref");
  for (int i = 0; i < 6; ++i)
    stock.steps.push_back(point(i + 1, kLoss[i] * (i < 3 ? 1 : 1.01), kNorm[i]));
  stock.step1.have = true;
  stock.step1.tensors = 6;
  stock.step1.wrong_tensors = 2;
  stock.step1.max_ulp = rp::kUlpInfinite;
  stock.step1.grad_ulps = {0, 1, rp::kUlpInfinite};
  stock.verdicts.have = true;
  stock.verdicts.exact = 4;
  stock.verdicts.order_only = 1;
  stock.verdicts.wrong = 1;
  stock.verdicts.first_wrong = "layers.0.w: NaN against 0.5";
  stock.gate = {rp::Gate::OrderOnly, false, "1 WRONG tensor at step 1"};

  // Failed after one step.
  rp::CellResult broken = cell("broken", "pp2, fault", "ref");
  broken.status = "failed";
  broken.error = kBrokenError;
  broken.steps.push_back(point(1, kLoss[0], kNorm[0]));
  broken.step1.why_not = "cell failed";

  rp::CellResult ref_b = cell("ref_b", "dp2", "");
  ref_b.cell.dp = 2;
  rp::CellResult same = cell("dp2_same", "dp2 x pp2", "ref_b");
  same.cell.dp = 2;
  for (int i = 0; i < 6; ++i) {
    ref_b.steps.push_back(point(i + 1, kLoss[i] + 0.05, kNorm[i]));
    same.steps.push_back(point(i + 1, kLoss[i] + 0.05, kNorm[i]));
  }
  same.step1.have = true;
  same.step1.tensors = 16;
  same.step1.grad_ulps = std::vector<uint64_t>(8, 0);
  same.gate = {rp::Gate::Bitwise, true, ""};

  r.cells = {ref, cached, stock, broken, ref_b, same};
  return r;
}

rp::Trend two_runs() {
  rp::Trend t;
  t.runs.resize(2);
  t.runs[0].started = "2026-11-29T02:00:00Z";
  t.runs[0].git_sha = "aaaaaaa1111111";
  t.runs[1].started = "2026-11-30T02:00:00Z";
  t.runs[1].git_sha = "bbbbbbb2222222";
  t.rows.push_back({"stock", {"ORDER-ONLY", "WRONG"}, {0.01, 1.0}, true});
  t.rows.push_back({"pp2vp2_cached", {"ORDER-ONLY", "ORDER-ONLY"}, {-0.05, -0.05}, false});
  return t;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// 1. The SVG layer
// ------------------------------------------------------------------------------------------

TEST(Svg, EscapesMarkup) {
  EXPECT_EQ(svg::escape("a<b & c>\"d\" 'e'"), "a&lt;b &amp; c&gt;&quot;d&quot; &#39;e&#39;");
  EXPECT_EQ(svg::escape("plain"), "plain");
}

TEST(Svg, LogTicksArePowersOfTen) {
  auto ticks = svg::log_ticks(1e-7, 1e-1);
  ASSERT_EQ(ticks.size(), 7u);
  const char* labels[] = {"1e-7", "1e-6", "1e-5", "1e-4", "1e-3", "0.01", "0.1"};
  for (size_t i = 0; i < ticks.size(); ++i) {
    double k = std::log10(ticks[i].value);
    EXPECT_NEAR(k, -7.0 + static_cast<double>(i), 1e-12) << ticks[i].label;
    EXPECT_EQ(ticks[i].label, labels[i]);
  }
  // Values inside a decade widen to it; a wide span thins the decades to 9 or fewer.
  auto inner = svg::log_ticks(2e-3, 5e-3);
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(inner[0].label, "1e-3");
  EXPECT_EQ(inner[1].label, "0.01");
  EXPECT_LE(svg::log_ticks(1e-30, 1e10).size(), 9u);
  EXPECT_TRUE(svg::log_ticks(0, 1).empty());
}

TEST(Svg, LinearTicksAreRoundAndInside) {
  auto t = svg::linear_ticks(2.9, 8.0035);
  ASSERT_GE(t.size(), 2u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_GE(t[i].value, 2.9);
    EXPECT_LE(t[i].value, 8.0035);
    if (i > 0) {
      EXPECT_GT(t[i].value, t[i - 1].value);
    }
  }
  EXPECT_EQ(t.front().label, "3");
  auto fine = svg::linear_ticks(0, 0.05, 5);
  EXPECT_EQ(fine[1].label, "0.01");
}

TEST(Svg, UlpBuckets) {
  auto b = svg::ulp_buckets({0, 0, 1, 2, 3, 4, 7, 8, 1000, rp::kUlpInfinite});
  std::vector<std::string> labels = {"0",     "1",      "2-3",     "4-7",     "8-15",     "16-31",
                                     "32-63", "64-127", "128-255", "256-511", "512-1023", "inf"};
  std::vector<int64_t> counts = {2, 1, 2, 2, 1, 0, 0, 0, 0, 0, 1, 1};
  EXPECT_EQ(b.labels, labels);
  EXPECT_EQ(b.counts, counts);

  auto none = svg::ulp_buckets({});
  EXPECT_EQ(none.labels, (std::vector<std::string>{"0", "1", "inf"}));
  EXPECT_EQ(none.counts, (std::vector<int64_t>{0, 0, 0}));

  auto top = svg::ulp_buckets({rp::kUlpInfinite - 1});
  EXPECT_EQ(top.labels.size(), 66u);  // 0, 1, 63 power-of-two buckets, inf
  EXPECT_EQ(top.counts[64], 1);
}

TEST(Svg, LogChartSkipsNonPositivePoints) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  svg::Series s{"cell", {{1, 1e-3}, {2, 0}, {3, -1}, {4, 1e-5}, {5, 2e-5}, {6, nan}}};
  EXPECT_EQ(svg::drawable_points(s, svg::YScale::Log10), 3u);
  EXPECT_EQ(svg::drawable_points(s, svg::YScale::Linear), 5u);

  svg::LineChart chart;
  chart.y_scale = svg::YScale::Log10;
  chart.series = {s};
  std::string out = svg::line_chart(chart);
  EXPECT_EQ(count(out, "<circle"), 3u);
  EXPECT_EQ(count(out, "<polyline"), 1u);  // steps 4-5; step 1 stands alone
  EXPECT_NE(out.find("width=\"1100\" height=\"360\" viewBox=\"0 0 1100 360\""), std::string::npos);
  EXPECT_EQ(out, svg::line_chart(chart)) << "not deterministic";

  chart.y_scale = svg::YScale::Linear;
  EXPECT_EQ(count(svg::line_chart(chart), "<circle"), 5u);
}

TEST(Svg, EmptyChartsRender) {
  svg::LineChart chart;
  chart.series = {{"none", {{1, 0}}}};
  chart.y_scale = svg::YScale::Log10;
  EXPECT_NE(svg::line_chart(chart).find("no drawable points"), std::string::npos);
  svg::BarChart bars;
  EXPECT_EQ(count(svg::bar_chart(bars), "<svg"), 1u);
}

TEST(Svg, PaletteCyclesWithDashes) {
  EXPECT_STREQ(svg::colour(0), svg::colour(10));
  EXPECT_STRNE(svg::colour(0), svg::colour(1));
  EXPECT_STREQ(svg::dash_pattern(3), "");
  EXPECT_STRNE(svg::dash_pattern(13), "");
  EXPECT_STRNE(svg::dash_pattern(13), svg::dash_pattern(23));
}

// ------------------------------------------------------------------------------------------
// 2. The layout diagram
// ------------------------------------------------------------------------------------------

TEST(LayoutSvg, StagesCommitsAndDeposits) {
  std::string out = rp::html::layout_svg(nlohmann::json::parse(kLayout17x4pp2vp2));
  for (const char* s : {"S0 emb,0-3", "S1 4-8", "S2 9-13", "S3 14-16,head", "commits b1-2",
                        "deposits db0 \u2192 S0", "deposits db0-2 \u2192 S1", "rank 0", "rank 1"})
    EXPECT_NE(out.find(s), std::string::npos) << s;
  EXPECT_EQ(count(out, "<path"), 2u);  // S2 -> S0 and S3 -> S1
  // The naive transport deposits nothing: the same layout drawn for cache off has no deposit
  // line and no arc.
  const std::string naive = rp::html::layout_svg(nlohmann::json::parse(kLayout17x4pp2vp2), false);
  EXPECT_EQ(naive.find("deposits"), std::string::npos);
  EXPECT_EQ(naive.find("<path"), std::string::npos);
  EXPECT_NE(naive.find("S3 14-16,head"), std::string::npos);
  EXPECT_THROW(rp::html::layout_svg(nlohmann::json::object()), nlohmann::json::exception);
  auto bad_rank = nlohmann::json::parse(
      R"({"stages":[{"stage":0,"rank":-1,"units":"emb,0-3","commits":[0],"collects":[]}]})");
  EXPECT_THROW(rp::html::layout_svg(bad_rank), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------
// 3. The page
// ------------------------------------------------------------------------------------------

TEST(RenderHtml, SelfContained) {
  std::string page = rp::render_html(synthetic());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
}

// Per table a loss chart and two |delta| charts (3 + 3), a histogram for each of the two
// cells with a nonzero ulp (dp2_same is bitwise: a sentence), one layout.
TEST(RenderHtml, SvgCount) {
  std::string page = rp::render_html(synthetic());
  EXPECT_EQ(count(page, "<svg"), 9u);
  EXPECT_EQ(count(page, "</svg>"), 9u);
  EXPECT_NE(page.find("bitwise equal to the reference at step 1: dp2_same."), std::string::npos);
}

TEST(RenderHtml, CellsValuesAndErrors) {
  std::string page = rp::render_html(synthetic());
  for (const char* name : {"ref", "pp2vp2_cached", "stock", "broken", "ref_b", "dp2_same"})
    EXPECT_NE(page.find(name), std::string::npos) << name;
  EXPECT_NE(page.find("8.003520"), std::string::npos);
  EXPECT_NE(page.find("identical"), std::string::npos);
  // The failed cell's error, escaped, never raw.
  std::string escaped = svg::escape(kBrokenError);
  EXPECT_NE(page.find(escaped), std::string::npos);
  EXPECT_EQ(page.find("<stale>"), std::string::npos);
  EXPECT_NE(page.find("<tr class=\"failed\">"), std::string::npos);
  // The summary: human bytes, a failing gate highlighted.
  EXPECT_NE(page.find("3.0 MiB"), std::string::npos);
  EXPECT_NE(page.find("1.5 KiB"), std::string::npos);
  EXPECT_EQ(count(page, "<tr class=\"gatefail\">"), 1u);
  EXPECT_NE(page.find("1 WRONG tensor at step 1"), std::string::npos);
}

TEST(RenderHtml, DeltaCaptionsCountZeroSteps) {
  std::string page = rp::render_html(synthetic());
  // Loss: pp2vp2_cached equal at step 1 only, stock at 1-3, broken logged step 1 only.
  EXPECT_NE(page.find("exactly zero: pp2vp2_cached 1 of 6, stock 3 of 6, broken 1 of 1"),
            std::string::npos);
  // Grad norm: pp2vp2_cached equal at steps 1-2, stock everywhere.
  EXPECT_NE(page.find("exactly zero: pp2vp2_cached 2 of 6, stock 6 of 6, broken 1 of 1"),
            std::string::npos);
  EXPECT_NE(page.find("exactly zero: dp2_same 6 of 6"), std::string::npos);
}

TEST(RenderHtml, HistoryFlagsChangedCells) {
  rp::MatrixResult r = synthetic();
  EXPECT_EQ(rp::render_html(r).find("<h2>History</h2>"), std::string::npos);
  rp::Trend t = two_runs();
  std::string page = rp::render_html(r, &t);
  size_t at = page.find("<h2>History</h2>");
  ASSERT_NE(at, std::string::npos);
  std::string history = page.substr(at);
  EXPECT_EQ(count(history, "<tr class=\"changed\">"), 1u);
  size_t row = history.find("<tr class=\"changed\">");
  size_t end = history.find("</tr>", row);
  std::string changed = history.substr(row, end - row);
  EXPECT_NE(changed.find("stock"), std::string::npos);
  EXPECT_NE(changed.find(">changed<"), std::string::npos);
  EXPECT_NE(changed.find("+1.00%"), std::string::npos);
  EXPECT_NE(history.find("bbbbbbb<"), std::string::npos);  // the short sha
}

// A reference that failed before its first step, a cell without steps and an unreadable
// layout: the page still renders and says what it could not draw.
TEST(RenderHtml, SurvivesMissingData) {
  rp::MatrixResult r;
  r.matrix = "bare";
  r.report_steps = {1, 10};
  rp::CellResult ref = cell("ref", "dp1", "");
  ref.status = "failed";
  ref.error = "exit status 134";
  rp::CellResult pp = cell("pp2", "pp2", "ref");
  pp.cell.trainer = parity::spec::Trainer::Pipelined;
  pp.steps.push_back(point(1, 8.0, 2.0));
  pp.layout = nlohmann::json{{"stages", {{{"stage", "zero"}}}}};
  rp::CellResult none = cell("none", "nothing", "ref");
  none.status = "not run";
  r.cells = {ref, pp, none};
  std::string page;
  ASSERT_NO_THROW(page = rp::render_html(r));
  EXPECT_NE(page.find("The reference logged no steps"), std::string::npos);
  EXPECT_NE(page.find("cannot be drawn"), std::string::npos);
  EXPECT_NE(page.find("exit status 134"), std::string::npos);
  EXPECT_EQ(count(page, "<svg"), 1u);  // the loss chart, pp2's one step
}
