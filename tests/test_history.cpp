// Nightly history: the JSON line per run, reading it back (the last N, malformed lines, absent
// files), and the trend of verdicts across runs.
//
// The losses below are small dyadic numbers, so every drift the tests expect is exact in binary
// (e.g. (7.5 - 6) / 6 = 0.25 exactly) and is compared bitwise, not against a tolerance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reports/drift.h"
#include "reports/history.h"
#include "reports/matrix.h"
#include "reports/results.h"
#include "tests/temp_dir.h"

namespace rp = parity::reports;
namespace fs = std::filesystem;

namespace {

using HistoryTest = parity::testing::TempDirTest;

// A cell with its verdict-determining fields: `reference` empty makes it a reference;
// `losses` are (step, loss) pairs in logged order.
rp::CellResult cell(const std::string& name, const std::string& reference,
                    std::vector<std::pair<int64_t, double>> losses) {
  rp::CellResult c;
  c.cell.name = name;
  c.cell.reference = reference;
  c.status = "ok";
  for (const auto& [step, loss] : losses) {
    rp::StepPoint p;
    p.step = step;
    p.loss = loss;
    c.steps.push_back(p);
  }
  return c;
}

// The ledger's verdict counts at step 1 (drift.h: WRONG when any tensor is wrong, else
// ORDER-ONLY when any differs only in reduction order, else EXACT).
rp::CellResult with_ledger(rp::CellResult c, int exact, int order_only, int wrong) {
  c.verdicts.have = true;
  c.verdicts.exact = exact;
  c.verdicts.order_only = order_only;
  c.verdicts.wrong = wrong;
  return c;
}

rp::CellResult with_gate(rp::CellResult c, rp::Gate gate, bool passed) {
  c.cell.gate = gate;
  c.gate.gate = gate;
  c.gate.passed = passed;
  if (!passed) c.gate.why = "a WRONG tensor at step 1";
  return c;
}

rp::MatrixResult run(const std::string& started, std::vector<rp::CellResult> cells) {
  rp::MatrixResult r;
  r.matrix = "quick";
  r.source = "matrices/quick.toml";
  r.git_sha = "sha-" + started;
  r.started = started;
  r.wall_seconds = 12.5;
  r.report_steps = {1, 2, 4};
  r.cells = std::move(cells);
  return r;
}

// The first run of the round trip: a reference logging steps 1..4, a cell that stopped at
// step 2 (its drift is taken against the reference's step 2, not its last step), a cell that
// ran all 4 steps, and a failed cell with nothing logged.
rp::MatrixResult first_run() {
  return run("2024-05-01T02:00:00Z",
             {cell("ref", "", {{1, 8.0}, {2, 6.0}, {3, 4.0}, {4, 2.0}}),
              with_gate(with_ledger(cell("pp2", "ref", {{1, 8.0}, {2, 7.5}}), 5, 0, 0),
                        rp::Gate::OrderOnly, true),
              with_gate(with_ledger(cell("naive", "ref", {{1, 8.0}, {2, 6.0}, {3, 4.0}, {4, 1.5}}),
                                    3, 1, 1),
                        rp::Gate::Bitwise, false),
              [] {
                rp::CellResult c = cell("crashed", "ref", {});
                c.status = "failed";
                c.error = "exit status 134";
                return c;
              }()});
}

// The second run: drift must be null when the reference's loss at that step is 0, or when the
// reference never logged that step.
rp::MatrixResult second_run() {
  return run("2024-05-02T02:00:00Z",
             {cell("ref", "", {{1, 8.0}, {2, 0.0}}),
              with_ledger(cell("pp2", "ref", {{1, 8.0}, {2, 0.5}}), 5, 0, 0),
              with_ledger(cell("naive", "ref", {{1, 8.0}, {2, 6.0}, {3, 4.0}}), 5, 0, 0)});
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

}  // namespace

TEST_F(HistoryTest, RoundTripOfTwoRuns) {
  const std::string path = file("history.jsonl");
  const rp::MatrixResult a = first_run(), b = second_run();
  rp::append_history(path, a);
  rp::append_history(path, b);

  // Exactly one line per run, and a missing drift is JSON null, not an absent key.
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json j = nlohmann::json::parse(lines[0]);
  ASSERT_EQ(j.at("cells").size(), 4u);
  EXPECT_TRUE(j.at("cells")[0].at("final_loss_drift_pct").is_null());
  EXPECT_TRUE(j.at("cells")[1].at("final_loss_drift_pct").is_number());

  const std::vector<rp::HistoryEntry> h = rp::read_history(path);
  ASSERT_EQ(h.size(), 2u);

  const rp::HistoryEntry& e = h[0];
  EXPECT_EQ(e.started, "2024-05-01T02:00:00Z");
  EXPECT_EQ(e.git_sha, "sha-2024-05-01T02:00:00Z");
  EXPECT_EQ(e.matrix, "quick");
  EXPECT_EQ(e.source, "matrices/quick.toml");
  EXPECT_EQ(e.wall_seconds, 12.5);
  ASSERT_EQ(e.cells.size(), 4u);
  for (size_t i = 0; i < e.cells.size(); ++i) {
    EXPECT_EQ(e.cells[i].name, a.cells[i].cell.name);
    EXPECT_EQ(e.cells[i].status, a.cells[i].status);
    EXPECT_EQ(e.cells[i].verdict, rp::step1_verdict(a.cells[i])) << e.cells[i].name;
  }
  EXPECT_EQ(e.cells[0].verdict, "REFERENCE");
  EXPECT_EQ(e.cells[1].verdict, "EXACT");
  EXPECT_EQ(e.cells[2].verdict, "WRONG");
  EXPECT_EQ(e.cells[3].status, "failed");

  EXPECT_EQ(e.cells[0].gate, "-");
  EXPECT_EQ(e.cells[1].gate, "pass");
  EXPECT_EQ(e.cells[2].gate, "FAIL");
  EXPECT_EQ(e.cells[3].gate, "-");

  // The reference: its own last step, no drift.
  EXPECT_EQ(e.cells[0].final_step, 4);
  EXPECT_EQ(e.cells[0].final_loss, 2.0);
  EXPECT_FALSE(e.cells[0].final_loss_drift_pct.has_value());
  // pp2 stopped at step 2: against the reference's step 2, (7.5 - 6) / 6 * 100 = +25.
  EXPECT_EQ(e.cells[1].final_step, 2);
  EXPECT_EQ(e.cells[1].final_loss, 7.5);
  ASSERT_TRUE(e.cells[1].final_loss_drift_pct.has_value());
  EXPECT_EQ(*e.cells[1].final_loss_drift_pct, 25.0);
  // naive at step 4: (1.5 - 2) / 2 * 100 = -25.
  EXPECT_EQ(e.cells[2].final_step, 4);
  EXPECT_EQ(e.cells[2].final_loss, 1.5);
  ASSERT_TRUE(e.cells[2].final_loss_drift_pct.has_value());
  EXPECT_EQ(*e.cells[2].final_loss_drift_pct, -25.0);
  // Nothing logged: 0/0 and no drift.
  EXPECT_EQ(e.cells[3].final_step, 0);
  EXPECT_EQ(e.cells[3].final_loss, 0.0);
  EXPECT_FALSE(e.cells[3].final_loss_drift_pct.has_value());

  const rp::HistoryEntry& f = h[1];
  EXPECT_EQ(f.started, "2024-05-02T02:00:00Z");
  ASSERT_EQ(f.cells.size(), 3u);
  EXPECT_EQ(f.cells[1].final_step, 2);
  EXPECT_EQ(f.cells[1].final_loss, 0.5);
  EXPECT_FALSE(f.cells[1].final_loss_drift_pct.has_value()) << "the reference's loss is 0";
  EXPECT_EQ(f.cells[2].final_step, 3);
  EXPECT_FALSE(f.cells[2].final_loss_drift_pct.has_value()) << "the reference has no step 3";
}

TEST_F(HistoryTest, AbsentFileIsAnEmptyHistory) {
  EXPECT_TRUE(rp::read_history(file("never-written.jsonl")).empty());
  EXPECT_TRUE(rp::read_history(file("never-written.jsonl"), 3).empty());
}

TEST_F(HistoryTest, LastKeepsTheNewestOldestFirst) {
  const std::string path = file("history.jsonl");
  for (int i = 0; i < 5; ++i)
    rp::append_history(path, run("run" + std::to_string(i), {cell("ref", "", {{1, 8.0}})}));

  const auto started = [](const std::vector<rp::HistoryEntry>& h) {
    std::vector<std::string> s;
    for (const auto& e : h) s.push_back(e.started);
    return s;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(started(rp::read_history(path, 2)), (V{"run3", "run4"}));
  EXPECT_EQ(started(rp::read_history(path, 1)), (V{"run4"}));
  const V all{"run0", "run1", "run2", "run3", "run4"};
  EXPECT_EQ(started(rp::read_history(path)), all);
  EXPECT_EQ(started(rp::read_history(path, -1)), all);
  EXPECT_EQ(started(rp::read_history(path, 5)), all);
  EXPECT_EQ(started(rp::read_history(path, 9)), all);
}

TEST_F(HistoryTest, MalformedLineNamesFileAndLine) {
  const std::string path = file("history.jsonl");
  rp::append_history(path, first_run());
  rp::append_history(path, second_run());
  append_line(path, "");                                 // line 3: blank lines are skipped
  append_line(path, R"({"started": "x", "cells": [)");  // line 4: cut short
  rp::append_history(path, first_run());

  try {
    rp::read_history(path);
    FAIL() << "a truncated line was accepted";
  } catch (const rp::MatrixError& ex) {
    const std::string what = ex.what();
    EXPECT_NE(what.find(path + ":4:"), std::string::npos) << what;
    EXPECT_NE(what.find("remove or fix"), std::string::npos) << what;
  }
}

TEST_F(HistoryTest, WellFormedJsonOfTheWrongShapeIsMalformed) {
  const std::string path = file("history.jsonl");
  rp::append_history(path, first_run());
  append_line(path, R"({"started": "x", "cells": [{"status": "ok"}]})");  // a cell with no name
  try {
    rp::read_history(path);
    FAIL() << "a cell without a name was accepted";
  } catch (const rp::MatrixError& ex) {
    EXPECT_NE(std::string(ex.what()).find(path + ":2:"), std::string::npos) << ex.what();
  }

  const std::string other = file("other.jsonl");
  append_line(other, R"([1, 2, 3])");
  try {
    rp::read_history(other);
    FAIL() << "a JSON array was accepted as a run";
  } catch (const rp::MatrixError& ex) {
    EXPECT_NE(std::string(ex.what()).find(other + ":1:"), std::string::npos) << ex.what();
  }
}

TEST_F(HistoryTest, UnwritablePathThrowsNamingIt) {
  const std::string d = dir_.string();  // a directory cannot be appended to
  try {
    rp::append_history(d, first_run());
    FAIL() << "appending to a directory succeeded";
  } catch (const rp::MatrixError& ex) {
    EXPECT_NE(std::string(ex.what()).find(d), std::string::npos) << ex.what();
  }

  const std::string missing = file("no-such-dir/history.jsonl");
  try {
    rp::append_history(missing, first_run());
    FAIL() << "appending inside a missing directory succeeded";
  } catch (const rp::MatrixError& ex) {
    EXPECT_NE(std::string(ex.what()).find(missing), std::string::npos) << ex.what();
  }
}

// Three runs, oldest first. `a` turns from EXACT to WRONG in the newest run; `b` stays
// ORDER-ONLY; `c` is absent from the middle run but keeps its verdict; `d` and `e` appear in
// one older run each.
TEST_F(HistoryTest, TrendFlagsExactlyTheCellWhoseVerdictChanged) {
  const std::string path = file("history.jsonl");
  const auto ref = [] { return cell("ref", "", {{1, 8.0}, {2, 4.0}}); };
  const auto b = [] { return with_ledger(cell("b", "ref", {{1, 8.0}, {2, 4.0}}), 2, 3, 0); };
  const auto c = [] { return with_ledger(cell("c", "ref", {{1, 8.0}, {2, 4.0}}), 5, 0, 0); };
  rp::append_history(path,
                     run("r0", {ref(), with_ledger(cell("a", "ref", {{1, 8.0}, {2, 4.0}}), 5, 0, 0),
                                b(), with_ledger(cell("d", "ref", {{1, 8.0}}), 5, 0, 0), c()}));
  rp::append_history(path,
                     run("r1", {ref(), with_ledger(cell("a", "ref", {{1, 8.0}, {2, 5.0}}), 5, 0, 0),
                                b(), with_ledger(cell("e", "ref", {{1, 8.0}}), 5, 0, 0)}));
  rp::append_history(path,
                     run("r2", {b(), with_ledger(cell("a", "ref", {{1, 8.0}, {2, 3.0}}), 4, 0, 1),
                                ref(), c()}));

  const rp::Trend t = rp::trend(rp::read_history(path));
  ASSERT_EQ(t.runs.size(), 3u);
  EXPECT_EQ(t.runs[0].started, "r0");
  EXPECT_EQ(t.runs[2].started, "r2");

  // The newest run's order, then the rest from the newest older run backwards.
  std::vector<std::string> names;
  for (const auto& row : t.rows) names.push_back(row.cell);
  ASSERT_EQ(names, (std::vector<std::string>{"b", "a", "ref", "c", "e", "d"}));

  const rp::TrendRow& a = t.rows[1];
  EXPECT_EQ(a.verdicts, (std::vector<std::string>{"EXACT", "EXACT", "WRONG"}));
  EXPECT_TRUE(a.changed);
  // a's drift per run against ref's step 2 (loss 4): 0, (5 - 4) / 4 = +25%, (3 - 4) / 4 = -25%.
  ASSERT_EQ(a.drift_pct.size(), 3u);
  EXPECT_EQ(a.drift_pct[0], std::optional<double>(0.0));
  EXPECT_EQ(a.drift_pct[1], std::optional<double>(25.0));
  EXPECT_EQ(a.drift_pct[2], std::optional<double>(-25.0));

  EXPECT_EQ(t.rows[0].verdicts, (std::vector<std::string>(3, "ORDER-ONLY")));
  EXPECT_FALSE(t.rows[0].changed);
  EXPECT_EQ(t.rows[2].verdicts, (std::vector<std::string>(3, "REFERENCE")));
  EXPECT_FALSE(t.rows[2].changed);
  EXPECT_EQ(t.rows[2].drift_pct, (std::vector<std::optional<double>>(3, std::nullopt)));

  const rp::TrendRow& cr = t.rows[3];
  EXPECT_EQ(cr.verdicts, (std::vector<std::string>{"EXACT", "", "EXACT"}));
  EXPECT_FALSE(cr.drift_pct[1].has_value()) << "absent from r1";
  EXPECT_FALSE(cr.changed) << "absent from one run is not a change";
  EXPECT_EQ(t.rows[4].verdicts, (std::vector<std::string>{"", "EXACT", ""}));
  EXPECT_FALSE(t.rows[4].changed);
  EXPECT_EQ(t.rows[5].verdicts, (std::vector<std::string>{"EXACT", "", ""}));
  EXPECT_FALSE(t.rows[5].changed);

  EXPECT_EQ(t.changed(), 1);
}

TEST(HistoryTrend, NoRunsAndOneRun) {
  const rp::Trend none = rp::trend({});
  EXPECT_TRUE(none.rows.empty());
  EXPECT_EQ(none.changed(), 0);

  rp::HistoryEntry e;
  e.cells.push_back({"x", "ok", "EXACT", "-", 2, 1.0, std::nullopt});
  const rp::Trend one = rp::trend({e});
  ASSERT_EQ(one.rows.size(), 1u);
  EXPECT_EQ(one.rows[0].verdicts, (std::vector<std::string>{"EXACT"}));
  EXPECT_EQ(one.changed(), 0);
}

// EXACT (ledger) and BITWISE (comparison only) both mean equal bits: moving from one to the
// other is no change of outcome; moving to DIFFERS is.
TEST(HistoryTrend, ExactAndBitwiseAreOneOutcome) {
  auto run = [](const std::string& verdict) {
    rp::HistoryEntry e;
    e.cells.push_back({"x", "ok", verdict, "-", 2, 1.0, std::nullopt});
    return e;
  };
  EXPECT_EQ(rp::trend({run("EXACT"), run("BITWISE")}).changed(), 0);
  EXPECT_EQ(rp::trend({run("BITWISE"), run("EXACT")}).changed(), 0);
  EXPECT_EQ(rp::trend({run("BITWISE"), run("DIFFERS")}).changed(), 1);
  EXPECT_EQ(rp::trend({run("EXACT"), run("ORDER-ONLY")}).changed(), 1);
}
