// `parity matrix run`, `parity report` and `parity gate` as a user meets them: a small matrix
// on the tiny flavor (16-token rows, 2 steps), its reports in every format, a routing fault
// the order-only gate has to catch, the nightly history, a cell stopped by its timeout, bad
// input (one line on stderr, exit 2) and the gate's exit codes (0 pass, 1 fail, 125 cannot
// run).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using parity::testing::CliResult;
using parity::testing::count_lines;
using parity::testing::expect_one_line_error;
using parity::testing::run_parity;
using parity::testing::slurp;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A reference, the pipelined pp2 x vp2 cell with the cache off (bitwise to the reference,
// contract 1) and with the cache on (only the reduction order differs, contract 2).
constexpr const char* kSmall = R"(name = "small"
report_steps = [1, 2]
[defaults]
flavor = "tiny"
steps = 2
seq_len = 16
[[cell]]
name = "ref"
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "order-only"
)";

// `parity layout --layers 17 --block 4 --pp 2 --vp 2`: stage 3 deposits db0, db1 and db2,
// stage 2 deposits db0 only. Dropping block 1's deposit at stage 3 breaks a gradient.
constexpr const char* kFault = "cached=drop-deposit:block=1,stage=3";
// Stage 2 has no deposit of block 1: this fault has nothing to break.
constexpr const char* kIdleFault = "cached=drop-deposit:block=1,stage=2";

class MatrixCli : public ::testing::Test {
 protected:
  // The tokenizer cache in the build tree unless the caller chose one; then warm it, so each
  // test sees only its own output.
  static void SetUpTestSuite() {
    ::setenv("PARITY_CACHE_DIR", PARITY_TEST_CACHE_DIR, /*overwrite=*/0);
    const std::string cmd = std::string(PARITY_BIN) +
                            " train --flavor tiny --steps 1 --seq-len 16 --quiet >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-matrix-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // env: "NAME=value ..." set for this run only.
  CliResult run(const std::string& args, const std::string& env = "") {
    return run_parity(dir_, args, env);
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The gate's temporary directories go under this test's directory, not /tmp.
  std::string tmpdir() const { return "TMPDIR=" + dir_.string(); }

  fs::path dir_;
};

// The cells of the Markdown table row whose label starts with `label_prefix`, trimmed.
std::vector<std::string> md_row(const std::string& md, const std::string& label_prefix) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| " + label_prefix, 0) != 0) continue;
    std::vector<std::string> cells;
    size_t at = 1;
    for (size_t bar = line.find('|', at); bar != std::string::npos; bar = line.find('|', at)) {
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

// The JSON summary row of `cell`.
json summary_of(const json& report, const std::string& cell) {
  for (const auto& s : report.at("summary"))
    if (s.at("cell") == cell) return s;
  return json();
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

TEST_F(MatrixCli, RunWritesResultsAndEveryReport) {
  const auto m = write("small.toml", kSmall);
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 2 --quiet");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* f : {"results.json", "report.txt", "report.md", "report.json", "report.csv",
                        "report.html", "cells/ref/log.txt", "cells/cached/metrics.jsonl"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  // The drift table and the footer: 3 cells, 2 of them gated.
  EXPECT_TRUE(contains(r.out, "loss, step 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "grad norm, step 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "pp2 x vp2, naive")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nOK: 3 cells")) << r.out;
  EXPECT_TRUE(contains(r.out, "2 gates passed")) << r.out;
  EXPECT_TRUE(contains(r.out, "report.html")) << r.out;

  // Every format renders again from the directory.
  for (const char* format : {"txt", "md", "json", "csv", "html"}) {
    const auto again = run("report " + out + " --format " + format);
    EXPECT_EQ(again.code, 0) << format << ": " << again.err;
    EXPECT_FALSE(again.out.empty()) << format;
  }
  EXPECT_EQ(run("report " + out).out, slurp(fs::path(out) / "report.txt"));
  const auto md = run("report " + out + " --format md").out;
  EXPECT_EQ(md, slurp(fs::path(out) / "report.md"));
  const auto to_file = run("report " + out + " --format csv --out " + path("r.csv"));
  EXPECT_EQ(to_file.code, 0) << to_file.err;
  EXPECT_EQ(slurp(path("r.csv")), slurp(fs::path(out) / "report.csv"));
  EXPECT_TRUE(contains(run("report " + out + " --format html").out, "<svg"));

  // The reference row prints the logged loss with 6 decimals.
  std::ifstream metrics(fs::path(out) / "cells/ref/metrics.jsonl");
  std::string first;
  ASSERT_TRUE(std::getline(metrics, first));
  const double loss1 = json::parse(first).at("loss");
  EXPECT_EQ(md_row(md, "dp1 [1] |").at(1), "`" + fixed(loss1, 6) + "`");
  // Contract 1: the naive pipeline equals the reference on every step.
  const auto naive = md_row(md, "pp2 x vp2, naive [2] |");
  ASSERT_EQ(naive.size(), 5u) << md;
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(contains(naive[i], " identical")) << naive[i];

  // The JSON carries the same strings as the Markdown.
  const json j = json::parse(run("report " + out + " --format json").out);
  EXPECT_EQ(j.at("ok"), true);
  ASSERT_EQ(j.at("drift_tables").size(), 1u);
  int compared = 0;
  for (const auto& row : j["drift_tables"][0]["rows"]) {
    const std::string label = row.at("label");
    const auto cells = md_row(md, label + " |");
    ASSERT_EQ(cells.size(), 5u) << label << "\n" << md;
    size_t i = 1;
    for (const char* metric : {"loss", "grad_norm"})
      for (const auto& v : row.at(metric)) {
        const std::string value = v.at("value"), change = v.at("change");
        EXPECT_EQ(cells[i++], "`" + value + "`" + (change.empty() ? "" : " " + change)) << label;
        ++compared;
      }
  }
  EXPECT_EQ(compared, 3 * 4);
  EXPECT_EQ(summary_of(j, "naive").at("verdict"), "EXACT");
  EXPECT_EQ(summary_of(j, "cached").at("verdict"), "ORDER-ONLY");

  // CSV: a header and one row per logged step per cell.
  EXPECT_EQ(count_lines(slurp(fs::path(out) / "report.csv")), 1u + 3 * 2);
  // results.json: every cell ran.
  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  ASSERT_EQ(res.at("cells").size(), 3u);
  for (const auto& c : res["cells"]) {
    EXPECT_EQ(c.at("status"), "ok") << c.at("cell").at("name");
    EXPECT_EQ(c.at("steps").size(), 2u);
  }
}

// Cells start longest first by steps x tokens per step, fp32 weighted 4/3 (file order on ties),
// and each cell with a reference is judged once both have ended, in a process of its own that
// leaves nothing behind. With one job the start order is exactly the launch order:
//   wide  2 steps x 8 micro-batches  = 16     long  4 x 4 = 16 (after wide: file order)
//   ref32 2 x 4 x 4/3               = 10.7   ref   2 x 4 = 8    naive 2 x 4 = 8 (file order)
TEST_F(MatrixCli, CellsStartLongestFirstAndAreJudgedOnceTheirReferenceEnds) {
  const auto m = write("order.toml", R"(name = "order"
report_steps = [1, 2]
[defaults]
flavor = "tiny"
steps = 2
seq_len = 16
[[cell]]
name = "ref"
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
[[cell]]
name = "wide"
microbatches = 8
[[cell]]
name = "ref32"
dtype = "fp32"
[[cell]]
name = "long"
reference = "ref"
steps = 4
)");
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<std::string> started;
  std::istringstream err(r.err);
  for (std::string line; std::getline(err, line);)
    if (line.rfind("[start ", 0) == 0) started.push_back(line.substr(line.find("] ") + 2));
  EXPECT_EQ(started, (std::vector<std::string>{"wide", "long", "ref32", "ref", "naive"})) << r.err;
  EXPECT_TRUE(contains(r.err, "[judged] naive: gate passed")) << r.err;
  EXPECT_TRUE(contains(r.err, "[judged] long: judged (no gate)")) << r.err;
  EXPECT_FALSE(contains(r.err, "[judged] ref")) << r.err;  // references are not judged
  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  for (const auto& c : res.at("cells")) {
    if (c.at("cell").at("name") == "naive") {
      EXPECT_EQ(c.at("step1").at("have"), true);
      EXPECT_EQ(c.at("verdicts").at("wrong"), 0);
      EXPECT_EQ(c.at("gate").at("passed"), true);
    }
  }
  for (const auto& e : fs::recursive_directory_iterator(out))
    EXPECT_NE(e.path().filename(), "judgement.json") << e.path();
  // No judging process is left: each is a fork of the run, with its command line.
  EXPECT_NE(std::system(("pgrep -f -- '[m]atrix run " + m + "' >/dev/null").c_str()), 0);
}

TEST_F(MatrixCli, ADroppedDepositFailsTheOrderOnlyGate) {
  const auto m = write("small.toml", kSmall);
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 2 --quiet --only cached "
                     "--inject " + kFault);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\nFAILED:")) << r.out;
  EXPECT_TRUE(contains(r.out, "gates failed (cached)")) << r.out;
  EXPECT_TRUE(contains(r.out, "WRONG")) << r.out;
  const json j = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(summary_of(j, "cached").at("verdict"), "WRONG");
  EXPECT_EQ(summary_of(j, "cached").at("gate"), "FAIL");
  EXPECT_EQ(summary_of(j, "ref").at("verdict"), "REFERENCE");
  EXPECT_EQ(j.at("result").at("cells").size(), 2u);  // --only: the cell and its reference
  // The report reads the same from the directory, with the same exit code.
  EXPECT_EQ(run("report " + out).code, 1);
}

// A twin gate holds a cell bit for bit against another cell of the same run. Two twins of the
// cached cell run at once: the clean one passes, and the one with a dropped deposit fails
// against its twin (not merely against the reference, which an order-only drift never equals).
TEST_F(MatrixCli, ATwinGatePassesOnEqualBitsAndFailsOnADroppedDeposit) {
  std::string text = kSmall;
  for (const char* name : {"twin_clean", "twin_fault"})
    text += std::string("[[cell]]\nname = \"") + name +
            "\"\nreference = \"ref\"\ntwin = \"cached\"\ntrainer = \"pipelined\"\n"
            "pp = 2\nvp = 2\ngate = \"bitwise\"\n";
  const auto m = write("twins.toml", text);
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 2 --quiet --only twin_clean "
                     "--only twin_fault --inject twin_fault=drop-deposit:block=1,stage=3");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "gates failed (twin_fault)")) << r.out;
  const json j = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_EQ(summary_of(j, "twin_clean").at("gate"), "pass");
  EXPECT_EQ(summary_of(j, "twin_clean").at("note"), "bitwise equal to its twin cached");
  EXPECT_EQ(summary_of(j, "twin_fault").at("gate"), "FAIL");
  EXPECT_EQ(summary_of(j, "cached").at("gate"), "pass");
  // --only brings in each twin and the twins' reference: ref, cached and the two twins.
  EXPECT_EQ(j.at("result").at("cells").size(), 4u);
  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  for (const auto& c : res.at("cells"))
    if (c.at("cell").at("name") == "twin_fault") {
      const std::string why = c.at("gate").at("why");
      // The fault is in the backward pass: the loss bits agree, the grad norm's do not.
      EXPECT_TRUE(contains(why, "step 1 differs from its twin 'cached': loss ")) << why;
    }
}

TEST_F(MatrixCli, AFaultWithNothingToBreakIsRefusedBeforeAnyCellRuns) {
  // drop-deposit at a stage that deposits no gradient of that block would never fire, and the
  // row labelled "fault ..." would mislead: the routing tables say so up front (stage 2 of
  // pp2 x vp2 deposits block 0 only), and nothing is written.
  const auto m = write("small.toml", kSmall);
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 2 --only cached --inject " +
                     kIdleFault);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "cell 'cached'")) << r.err;
  EXPECT_TRUE(contains(r.err, "stage 2 deposits no gradient of block 1")) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(MatrixCli, HistoryFlagsTheCellWhoseVerdictChanged) {
  const auto m = write("small.toml", kSmall);
  const auto h = path("history.jsonl");
  const auto clean = run("matrix run " + m + " --out " + path("one") +
                         " --jobs 2 --quiet --only cached --history " + h);
  ASSERT_EQ(clean.code, 0) << clean.out << clean.err;
  const auto broken = run("matrix run " + m + " --out " + path("two") +
                          " --jobs 2 --quiet --only cached --history " + h + " --inject " + kFault);
  ASSERT_EQ(broken.code, 1) << broken.out << broken.err;
  EXPECT_EQ(count_lines(slurp(h)), 2u);

  const auto txt = run("report " + path("two") + " --history " + h);
  EXPECT_EQ(txt.code, 1) << txt.err;  // the second run's gate failed
  EXPECT_TRUE(contains(txt.out, "history, last 2 runs")) << txt.out;
  // The cached row: ORDER-ONLY, then WRONG, flagged; the reference's row is not.
  std::istringstream lines(txt.out);
  std::string line, cached_line, ref_line;
  bool in_history = false;
  while (std::getline(lines, line)) {
    if (contains(line, "history, last")) in_history = true;
    if (!in_history) continue;
    if (line.rfind("cached ", 0) == 0) cached_line = line;
    if (line.rfind("ref ", 0) == 0) ref_line = line;
  }
  EXPECT_TRUE(contains(cached_line, "ORDER-ONLY")) << txt.out;
  EXPECT_TRUE(contains(cached_line, "WRONG")) << txt.out;
  EXPECT_TRUE(contains(cached_line, "verdict changed")) << txt.out;
  EXPECT_FALSE(ref_line.empty()) << txt.out;
  EXPECT_FALSE(contains(ref_line, "verdict changed")) << txt.out;
  EXPECT_TRUE(contains(txt.out, "1 cell(s) changed verdict")) << txt.out;

  const auto js = run("report " + path("two") + " --format json --history " + h);
  const json j = json::parse(js.out);
  EXPECT_EQ(j.at("history").at("changed"), 1);
  EXPECT_EQ(j["history"].at("runs").size(), 2u);
  for (const auto& row : j["history"].at("rows"))
    EXPECT_EQ(row.at("changed"), row.at("cell") == "cached") << row.dump();
  EXPECT_TRUE(contains(run("report " + path("two") + " --format md --history " + h).out,
                       "**verdict changed**"));
}

TEST_F(MatrixCli, BadInputIsOneLineAndExitTwo) {
  const std::string unknown =
      write("unknown.toml", "[[cell]]\nname = \"ref\"\nstpes = 2\n");
  expect_one_line_error(run("matrix run " + unknown + " --out " + path("a")),
                        "unknown.toml:3 (cell 'ref'), key 'stpes'");
  const std::string missing = write(
      "missing.toml", "[[cell]]\nname = \"ref\"\n[[cell]]\nname = \"b\"\nreference = \"nosuch\"\n");
  expect_one_line_error(run("matrix run " + missing + " --out " + path("b")),
                        "no cell named 'nosuch'");
  EXPECT_FALSE(fs::exists(path("a")));
  EXPECT_FALSE(fs::exists(path("b")));

  fs::create_directories(path("empty"));
  expect_one_line_error(run("report " + path("empty")), "holds no results.json");
  expect_one_line_error(run("report " + path("nosuch")), "not a directory");

  const auto m = write("small.toml", kSmall);
  fs::create_directories(path("busy"));
  write("busy/notes.txt", "mine\n");
  expect_one_line_error(run("matrix run " + m + " --out " + path("busy") + " --quiet"),
                        "is not empty and holds no earlier matrix run");
  EXPECT_EQ(slurp(path("busy/notes.txt")), "mine\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(path("busy")), fs::directory_iterator()), 1);

  expect_one_line_error(run("matrix run " + m + " --out " + path("c") + " --quiet --only "
                            "cached,nosuch"),
                        "--only: no cell named 'nosuch'");
  expect_one_line_error(run("matrix run " + m + " --out " + path("d") + " --quiet --inject "
                            "nosuch=drop-deposit:block=1,stage=3"),
                        "--inject: no cell named 'nosuch'");
}

TEST_F(MatrixCli, AMistypedOnlyLeavesTheOutDirectoryUsable) {
  // A refused command writes nothing: had it created DIR/cells first, DIR would be "not empty
  // and holds no earlier matrix run" and the corrected command refused.
  const auto m = write("small.toml", kSmall);
  const auto out = path("run");
  EXPECT_EQ(run("matrix run " + m + " --out " + out + " --quiet --only nosuch").code, 2);
  const auto again = run("matrix run " + m + " --out " + out + " --quiet --jobs 2 --only ref");
  EXPECT_EQ(again.code, 0) << again.err;
}

TEST_F(MatrixCli, ABadSplitNamesItsCell) {
  // The split is first read when the runner draws the cell's layout; the error must name the
  // cell ('cached') as every other matrix error does.
  std::string bad_split = kSmall;
  bad_split += "split = \"nonsense\"\n";  // appended to the last cell, "cached"
  const auto r = run("matrix run " + write("split.toml", bad_split) + " --out " + path("run") +
                     " --quiet");
  expect_one_line_error(r, "nonsense");
  EXPECT_TRUE(contains(r.err, "cached")) << r.err;
}

// A matrix run told to stop (SIGTERM, or Ctrl-C's SIGINT) stops its cells and their workers,
// keeps results.json with what finished and why the rest did not, and exits 1: no hang, no
// cell process left behind.
TEST_F(MatrixCli, AStoppedRunKillsItsCellsAndKeepsTheResult) {
  const auto m = write("long.toml", R"(name = "long"
[defaults]
flavor = "tiny"
seq_len = 16
[[cell]]
name = "ref"
steps = 100000
[[cell]]
name = "later"
reference = "ref"
steps = 2
)");
  const auto out = path("run");
  const auto rc = path("rc.txt");
  // The stop comes once the first cell has logged a step (its metrics file, still a temporary,
  // holds a line), mid-run. A run that hung instead of stopping is killed after 60 s (exit
  // 137, a failure here).
  const std::string cmd = "timeout -s KILL 60 " + std::string(PARITY_BIN) + " matrix run " + m +
                          " --out " + out + " --jobs 1 --quiet >/dev/null 2>" + path("err.txt") +
                          " & pid=$!; for i in $(seq 300); do grep -qs step " + out +
                          "/cells/ref/metrics.jsonl.tmp.* && break; sleep 0.1; done; "
                          "kill -TERM $pid; wait $pid; echo $? >" + rc;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // 128 + SIGTERM, as a shell reports a process that a TERM stopped.
  EXPECT_EQ(slurp(rc), "143\n") << slurp(path("err.txt"));
  EXPECT_TRUE(contains(slurp(path("err.txt")), "stopped by signal 15")) << slurp(path("err.txt"));
  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  ASSERT_EQ(res.at("cells").size(), 2u);
  EXPECT_EQ(res.at("cells")[0].at("status"), "failed");
  EXPECT_EQ(res.at("cells")[0].at("error"), "interrupted");
  EXPECT_EQ(res.at("cells")[1].at("status"), "not run");
  // No `parity train` of this run is left: every cell process named its metrics under `out`.
  // ("[-]" keeps pgrep and its shell from matching their own command lines.)
  EXPECT_NE(std::system(("pgrep -f -- '[-]-metrics " + out + "' >/dev/null").c_str()), 0);
}

TEST_F(MatrixCli, ACellStoppedByItsTimeoutFailsAndTheOthersRender) {
  // "slow" asks for 100000 steps (about 0.3-1 s each): it logs its first step within a few
  // seconds of starting and cannot finish in 15 s. ref and naive take about 4 s each.
  const auto m = write("slow.toml", R"(name = "slow"
report_steps = [1, 2]
[defaults]
flavor = "tiny"
steps = 2
seq_len = 16
[[cell]]
name = "ref"
[[cell]]
name = "slow"
reference = "ref"
steps = 100000
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
)");
  const auto out = path("run");
  const auto r =
      run("matrix run " + m + " --out " + out + " --jobs 2 --quiet --cell-timeout-s 15");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 of 3 cells failed to run (slow)")) << r.out;

  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  json slow;
  for (const auto& c : res.at("cells"))
    if (c.at("cell").at("name") == "slow") slow = c;
  ASSERT_FALSE(slow.is_null());
  EXPECT_EQ(slow.at("status"), "failed");
  EXPECT_TRUE(contains(slow.at("error").get<std::string>(), "stopped after")) << slow.at("error");
  EXPECT_GE(slow.at("steps").size(), 1u);   // what it logged before it was stopped is kept
  EXPECT_LT(slow.at("steps").size(), 100000u);

  const auto md = run("report " + out + " --format md");
  EXPECT_EQ(md.code, 1);
  // "slow" is a reference-trainer cell of its own shape: its label is "dp1".
  const auto slow_row = md_row(md.out, "dp1 |");
  ASSERT_EQ(slow_row.size(), 5u) << md.out;
  EXPECT_TRUE(contains(slow_row[1], "failed: stopped after")) << slow_row[1];
  const auto ref_row = md_row(md.out, "dp1 [1] |");
  ASSERT_EQ(ref_row.size(), 5u) << md.out;
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(ref_row[i].front(), '`') << ref_row[i];
  const auto naive_row = md_row(md.out, "pp2 x vp2, naive [2] |");
  ASSERT_EQ(naive_row.size(), 5u) << md.out;
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(contains(naive_row[i], " identical")) << naive_row[i];
  // Its logged steps are in the CSV with the others'.
  EXPECT_TRUE(contains(slurp(fs::path(out) / "report.csv"), "\nslow,ref,1,"));
}

TEST_F(MatrixCli, GatePassesOnASmallMatrix) {
  const auto m = write("small.toml", kSmall);
  const auto r = run("gate --matrix " + m + " --no-closed-forms --jobs 2 --quiet", tmpdir());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "gate: PASS")) << r.out;
  EXPECT_TRUE(contains(r.out, ", 1 step; reference")) << r.out;  // the gate runs step 1 only
}

// A diverged run (NaN losses, written as null in the metrics) keeps all its steps, and a
// bitwise gate does not pass on two dead runs agreeing.
TEST_F(MatrixCli, ADivergedRunKeepsItsStepsAndFailsItsGate) {
  const auto m = write("nan.toml", R"(name = "nan"
report_steps = [1, 3]
[defaults]
flavor = "tiny"
steps = 3
seq_len = 16
lr = 1e9
[[cell]]
name = "ref"
[[cell]]
name = "pp2"
reference = "ref"
trainer = "pipelined"
pp = 2
gate = "bitwise"
)");
  const auto out = path("run");
  const auto r = run("matrix run " + m + " --out " + out + " --jobs 2 --quiet");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "diverged")) << r.out;
  const json res = json::parse(slurp(fs::path(out) / "results.json"));
  for (const auto& c : res.at("cells")) {
    EXPECT_EQ(c.at("status"), "ok") << c.at("cell").at("name");
    EXPECT_EQ(c.at("steps").size(), 3u) << c.at("cell").at("name");  // none dropped at the NaN
  }
}

// A cell's failure is reported as itself even when parity starts with SIGCHLD ignored
// (inherited through exec), where a child's exit status would otherwise be lost and read as 0.
TEST_F(MatrixCli, ACellsOwnFailureIsReportedAsItself) {
  const auto m = write("small.toml", kSmall);
  const std::string cmd = "sh -c 'trap \"\" CHLD; exec " + std::string(PARITY_BIN) +
                          " matrix run " + m + " --out " + path("b") +
                          " --only ref --tokens /nonexistent --quiet' >" + path("b.txt") + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(contains(slurp(path("b.txt")), "FAILED: 1 of 1 cells failed")) << slurp(path("b.txt"));
}

// No seed checkpoint (here: a flavor parity does not know) is a gate that cannot run, and it
// says why.
TEST_F(MatrixCli, GateWithoutASeedCheckpointCannotRunAndSaysWhy) {
  const auto m = write("bogus.toml", R"(name = "bogus"
[defaults]
flavor = "bogus"
steps = 1
seq_len = 16
[[cell]]
name = "ref"
[[cell]]
name = "again"
reference = "ref"
gate = "bitwise"
)");
  const auto r = run("gate --matrix " + m + " --no-closed-forms --quiet", tmpdir());
  EXPECT_EQ(r.code, 125) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "unknown flavor 'bogus'")) << r.err;
}

TEST_F(MatrixCli, GateCannotRunWhenACellIsRefusedOrTheMatrixIsBad) {
  // `parity train` refuses the cached cell (exit 2: rows longer than the corpus allows).
  std::string refused = kSmall;
  refused += "seq_len = 100000000\n";  // appended to the last cell, "cached"
  auto r = run("gate --matrix " + write("refused.toml", refused) +
                   " --no-closed-forms --jobs 2 --quiet",
               tmpdir());
  EXPECT_EQ(r.code, 125) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "cannot run")) << r.err;
  EXPECT_TRUE(contains(r.err, "cached")) << r.err;

  // A split that does not parse.
  std::string bad_split = kSmall;
  bad_split += "split = \"nonsense\"\n";
  r = run("gate --matrix " + write("split.toml", bad_split) + " --no-closed-forms --quiet",
          tmpdir());
  EXPECT_EQ(r.code, 125) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "nonsense")) << r.err;

  // Bad matrix files: an unknown key, no gated cell, no file at all.
  r = run("gate --matrix " + write("bad.toml", "[[cell]]\nname = \"a\"\nstpes = 1\n") +
          " --no-closed-forms", tmpdir());
  EXPECT_EQ(r.code, 125) << r.err;
  EXPECT_TRUE(contains(r.err, "stpes")) << r.err;
  r = run("gate --matrix " + write("ungated.toml", "[[cell]]\nname = \"a\"\n") +
          " --no-closed-forms", tmpdir());
  EXPECT_EQ(r.code, 125) << r.err;
  EXPECT_TRUE(contains(r.err, "no gated cell")) << r.err;
  r = run("gate --matrix " + path("absent.toml") + " --no-closed-forms", tmpdir());
  EXPECT_EQ(r.code, 125) << r.err;
}

TEST_F(MatrixCli, GateThatCannotRunLeavesNoTemporaryDirectory) {
  // A gate that cannot run (125) must not leave $TMPDIR/parity-gate-<pid> behind unnamed:
  // under `git bisect run` every skipped commit would leave one.
  const auto tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  std::string bad_split = kSmall;
  bad_split += "split = \"nonsense\"\n";
  const auto r = run("gate --matrix " + write("split.toml", bad_split) +
                         " --no-closed-forms --quiet",
                     "TMPDIR=" + tmp.string());
  EXPECT_EQ(r.code, 125) << r.err;
  for (const auto& e : fs::directory_iterator(tmp))
    EXPECT_TRUE(contains(r.err + r.out, e.path().filename().string()))
        << e.path() << " left behind and not named:\n" << r.err;
}

}  // namespace
