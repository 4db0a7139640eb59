// The text, Markdown and CSV renderers and the footer (reports/render.h), on the hand-made
// result of tests/report_fixtures.h; the Markdown's values are checked against the JSON's.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/render.h"
#include "reports/results.h"
#include "tests/report_fixtures.h"

namespace rp = parity::reports;
using nlohmann::json;
using namespace parity::testing;

namespace {

// The cells of the Markdown table row whose label starts with `label_prefix`, trimmed.
std::vector<std::string> md_row(const std::string& md, const std::string& label_prefix) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| " + label_prefix, 0) != 0) continue;
    std::vector<std::string> cells;
    size_t at = 1;
    while (at < line.size()) {
      const size_t bar = line.find('|', at);
      if (bar == std::string::npos) break;
      std::string c = line.substr(at, bar - at);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
      at = bar + 1;
    }
    return cells;
  }
  return {};
}

TEST(RenderMarkdown, TheSeedsLayout) {
  const auto r = rendered();
  const std::string md = rp::render_markdown(r);
  EXPECT_TRUE(contains(md, "\n| cell | loss, step 1 | step 10 | step 50 | step 100 | "
                           "grad norm, step 1 | step 10 | step 50 | step 100 |\n"
                           "|---|---|---|---|---|---|---|---|---|\n"))
      << md;
  // The reference row: values only. 9 - 1/64 = 8.984375, 9 - 10/64 = 8.84375,
  // 9 - 50/64 = 8.21875, 9 - 100/64 = 7.4375.
  EXPECT_TRUE(contains(md, "| dp1 [1] | `8.984375` | `8.843750` | `8.218750` | `7.437500` | "
                           "`1.5000` | `1.5000` | `1.5000` | `1.5000` |\n"))
      << md;
  EXPECT_TRUE(contains(md, "| pp2 x vp2, naive [2] | `8.984375` identical | `8.843750` identical "
                           "| `8.218750` identical | `7.437500` identical | `1.5000` identical | "
                           "`1.5000` identical | `1.5000` identical | `1.5000` identical |\n"))
      << md;
  // Cached, loss + 1/16: step 10 8.90625, 0.0625 / 8.84375 = 2/283 = +0.7067%; step 50
  // 8.28125, 2/263 = +0.7605%; step 100 7.5, 1/119 = +0.8403%. Grad norm 0.03 / 1.5 = +2%.
  const auto cached = md_row(md, "pp2 x vp2, cached |");
  ASSERT_EQ(cached.size(), 9u) << md;
  EXPECT_EQ(cached[1], "`8.984375` identical");
  EXPECT_EQ(cached[2], "`8.906250` +0.71%");
  EXPECT_EQ(cached[3], "`8.281250` +0.76%");
  EXPECT_EQ(cached[4], "`7.500000` +0.84%");
  EXPECT_EQ(cached[5], "`1.5000` identical");
  EXPECT_EQ(cached[6], "`1.5300` +2.00%");
  // The failed cell's row carries its status; the others still render.
  const auto broken = md_row(md, "pp4 x vp2, cached |");
  ASSERT_EQ(broken.size(), 9u) << md;
  EXPECT_EQ(broken[1], std::string("failed: ") + kBrokenError);
  for (size_t i = 2; i < 9; ++i) EXPECT_EQ(broken[i], "");
  // The identical-step counts and the footnotes.
  EXPECT_TRUE(contains(md, "- pp2 x vp2, naive [2]: loss all 100 steps identical; grad norm all "
                           "100 steps identical\n"))
      << md;
  // The footnotes' text, written out here (not taken from footnote_text itself).
  EXPECT_TRUE(contains(md, "[1] reference: gradients accumulate over the micro-batches in order "
                           "and are reduced once"))
      << md;
  EXPECT_TRUE(contains(md, "[2] naive transport: the whole block stack on every hop (cache off)"))
      << md;
}

TEST(RenderMarkdown, CarriesTheSameValuesAsTheJson) {
  const auto r = rendered();
  const std::string md = rp::render_markdown(r);
  // Through text, as a reader of report.json would see it.
  const json j = json::parse(rp::render_json(r).dump());
  ASSERT_EQ(j["drift_tables"].size(), 1u);
  const auto& table = j["drift_tables"][0];
  EXPECT_EQ(table["steps"], json({1, 10, 50, 100}));
  int compared = 0;
  for (const auto& row : table["rows"]) {
    const std::string label = row["label"];
    const auto cells = md_row(md, label + " |");
    ASSERT_EQ(cells.size(), 9u) << label;
    EXPECT_EQ(cells[0], label);
    if (row["status"] != "ok") {
      EXPECT_EQ(cells[1], row["status"].get<std::string>());
      continue;
    }
    size_t i = 1;
    for (const char* metric : {"loss", "grad_norm"})
      for (const auto& v : row[metric]) {
        const std::string value = v["value"], change = v["change"];
        EXPECT_EQ(cells[i++], "`" + value + "`" + (change.empty() ? "" : " " + change))
            << label << " " << metric << " step " << v["step"];
        ++compared;
      }
  }
  EXPECT_EQ(compared, 3 * 8);  // three rows that ran, eight values each
  EXPECT_EQ(j["footer"], rp::footer(r));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["summary"].size(), 4u);
  EXPECT_EQ(j["summary"][3]["verdict"], "FAILED");
  EXPECT_EQ(j["result"]["cells"].size(), 4u);
}

TEST(RenderText, RowsAndFooter) {
  const auto r = rendered();
  const std::string txt = rp::render_text(r);
  EXPECT_TRUE(contains(txt, "loss, step 1")) << txt;
  EXPECT_TRUE(contains(txt, "8.984375 identical")) << txt;
  EXPECT_TRUE(contains(txt, std::string("failed: ") + kBrokenError)) << txt;
  EXPECT_TRUE(contains(txt, "\n" + rp::footer(r) + "\n")) << txt;
}

std::vector<std::vector<std::string>> csv_rows(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream ls(line);
    std::string f;
    while (std::getline(ls, f, ',')) fields.push_back(f);
    if (!line.empty() && line.back() == ',') fields.push_back("");
    rows.push_back(fields);
  }
  return rows;
}

TEST(RenderCsv, OneRowPerLoggedStepPerCell) {
  const auto r = rendered();
  const auto rows = csv_rows(rp::render_csv(r));
  // 100 + 100 + 100 + 2 logged steps and the header.
  ASSERT_EQ(rows.size(), 303u);
  EXPECT_EQ(rows[0][0], "cell");
  EXPECT_EQ(rows[0][3], "loss");
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size());
  // ref, step 1: no reference, no change.
  EXPECT_EQ(rows[1][0], "ref");
  EXPECT_EQ(rows[1][1], "");
  EXPECT_EQ(rows[1][2], "1");
  EXPECT_EQ(std::strtod(rows[1][3].c_str(), nullptr), 8.984375);  // exact: printed in full
  EXPECT_EQ(rows[1][5], hex(8.984375));
  EXPECT_EQ(rows[1][7], "");
  // cached, step 100 (row 1 + 100 + 100 + 99): loss 7.5 against 7.4375, 100/119 %.
  const auto& c = rows[300];
  EXPECT_EQ(c[0], "cached");
  EXPECT_EQ(c[1], "ref");
  EXPECT_EQ(c[2], "100");
  EXPECT_EQ(std::strtod(c[3].c_str(), nullptr), 7.5);
  EXPECT_NEAR(std::strtod(c[7].c_str(), nullptr), 100.0 / 119.0, 1e-9);
  EXPECT_NEAR(std::strtod(c[8].c_str(), nullptr), 2.0, 1e-9);
  // The failed cell's two logged steps are there too.
  EXPECT_EQ(rows[301][0], "broken");
  EXPECT_EQ(rows[302][0], "broken");
  EXPECT_EQ(rows[302][2], "2");
}

TEST(Footer, OkAndFailedNamingCellsAndGates) {
  auto r = rendered();
  const std::string failed = rp::footer(r);
  // "broken" failed to run, and its gate with it: 1 of 4 cells, 1 of 3 gates.
  EXPECT_EQ(failed.rfind("FAILED:", 0), 0u) << failed;
  EXPECT_TRUE(contains(failed, "1 of 4 cells failed to run (broken)")) << failed;
  EXPECT_TRUE(contains(failed, "1 of 3 gates failed (broken)")) << failed;

  cell_of(r, "cached").gate.passed = false;
  const std::string two = rp::footer(r);
  EXPECT_TRUE(contains(two, "2 of 3 gates failed (cached, broken)")) << two;

  r.cells.pop_back();  // without the broken cell and the cached gate failure: OK
  cell_of(r, "cached").gate.passed = true;
  const std::string ok = rp::footer(r);
  EXPECT_EQ(ok.rfind("OK:", 0), 0u) << ok;
  EXPECT_TRUE(contains(ok, "3 cells")) << ok;
  EXPECT_TRUE(contains(ok, "2 gates passed")) << ok;
  EXPECT_TRUE(contains(rp::render_markdown(r), "**" + ok + "**")) << ok;
}

}  // namespace
