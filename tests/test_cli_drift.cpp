// Bringing your own runs, part 2, end to end: `parity drift` rebuilding the seed's first drift
// table from training logs; Megatron-Core golden values against the same values as loss files;
// JUnit XML of a gate, read back with Python's xml module; and a matrix planned, run line by
// line as a scheduler would, and judged.
//
// The seed's table below is the seed pull request's first table (dp1, 14 rows, steps 1, 10,
// 50 and 100) as it printed it: its raw values are the input of the logs written here, and its
// `identical` / signed % strings are what `drift` must print. Exact string checks only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace fs = std::filesystem;

namespace {

using parity::testing::CliResult;
using parity::testing::run_parity;
using parity::testing::slurp;

// label, then per step 1, 10, 50, 100 the loss cell, then the grad norm cell (tab-separated).
const char* kSeedTable = R"(dp1 [1]	`8.003520`	`3.488880`	`2.584620`	`2.511720`	`2.2337`	`1.3804`	`0.6772`	`0.7861`
dp1, stock accumulation [4]	`8.003520` identical	`3.485760` -0.09%	`2.588440` +0.15%	`2.511260` -0.02%	`2.2337` identical	`1.3846` +0.30%	`0.6855` +1.23%	`0.7832` -0.37%
dp1, micro-batches reversed [5]	`8.003520` identical	`3.485890` -0.09%	`2.587830` +0.12%	`2.509630` -0.08%	`2.2338` +0.00%	`1.3743` -0.44%	`0.6857` +1.26%	`0.7884` +0.29%
pp2	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp4	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp2 x vp2, naive [2]	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp2 x vp2, cached	`8.003520` identical	`3.484850` -0.12%	`2.586430` +0.07%	`2.510560` -0.05%	`2.2337` identical	`1.3904` +0.72%	`0.6782` +0.15%	`0.7908` +0.60%
pp2 x vp4, naive [2][3]	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp2 x vp4, cached [3]	`8.003520` identical	`3.484350` -0.13%	`2.585380` +0.03%	`2.509430` -0.09%	`2.2337` identical	`1.3920` +0.84%	`0.6719` -0.78%	`0.7819` -0.53%
pp4 x vp2, naive [2]	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp4 x vp2, cached	`8.003520` identical	`3.487100` -0.05%	`2.584950` +0.01%	`2.508500` -0.13%	`2.2337` identical	`1.3682` -0.88%	`0.6786` +0.21%	`0.7855` -0.08%
pp4 x vp4, naive [2][3]	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical
pp4 x vp4, cached [3]	`8.003520` identical	`3.486570` -0.07%	`2.585890` +0.05%	`2.509130` -0.10%	`2.2339` +0.01%	`1.3861` +0.41%	`0.6705` -0.99%	`0.7889` +0.36%
dp1, second cold compile [6]	`8.003520` identical	`3.488880` identical	`2.584620` identical	`2.511720` identical	`2.2337` identical	`1.3804` identical	`0.6772` identical	`0.7861` identical)";

const int kSteps[] = {1, 10, 50, 100};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

struct SeedRow {
  std::string label;
  std::vector<std::string> cells;  // 8: loss at the four steps, then grad norm
  double loss[4], norm[4];         // the printed values
};

std::vector<SeedRow> seed_rows() {
  std::vector<SeedRow> rows;
  for (const auto& line : split(kSeedTable, '\n')) {
    const auto f = split(line, '\t');
    SeedRow r;
    r.label = f.at(0);
    r.cells.assign(f.begin() + 1, f.end());
    for (int i = 0; i < 4; ++i) {
      r.loss[i] = std::stod(r.cells.at(i).substr(1));
      r.norm[i] = std::stod(r.cells.at(4 + i).substr(1));
    }
    rows.push_back(r);
  }
  return rows;
}

class Drift : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-drift-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CliResult run(const std::string& args) { return run_parity(dir_, args); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(p(name), std::ios::binary) << text;
  }
  fs::path dir_;
};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The seed's dp1 table from logs in loss_compare's layout and in torchtitan's console layout
// (loss printed with 5 decimals as torchtitan prints it, grad norm with 4, colour codes and
// prefixes): every row's every cell is the seed's string.
TEST_F(Drift, RebuildsTheSeedsFirstTableFromLogsExact) {
  const auto rows = seed_rows();
  ASSERT_EQ(rows.size(), 14u);
  for (const std::string layout : {"loss-file", "torchtitan"}) {
    SCOPED_TRACE(layout);
    std::string files, labels;
    for (size_t k = 0; k < rows.size(); ++k) {
      std::string text;
      for (int i = 0; i < 4; ++i) {
        char line[256];
        if (layout == "loss-file")
          std::snprintf(line, sizeof line, "%d %.6f %.4f\n", kSteps[i], rows[k].loss[i],
                        rows[k].norm[i]);
        else
          std::snprintf(line, sizeof line,
                        "[rank0]:[titan] 2026-01-02 10:00:%02d,000 - root - INFO - \x1b[31mstep: "
                        "%2d  \x1b[32mloss: %8.5f  \x1b[38;2;180;60;0mgrad_norm: %7.4f  "
                        "\x1b[38;2;54;234;195mmemory:  1.85GiB(1.95%%)  \x1b[34mtps: 4,512  "
                        "\x1b[36mtflops: 0.32  \x1b[35mmfu: 0.03%%\x1b[39m\n",
                        i, kSteps[i], rows[k].loss[i], rows[k].norm[i]);
        text += line;
      }
      const std::string name = layout + std::to_string(k) + ".log";
      write(name, text);
      files += " " + p(name);
      labels += " " + quoted(rows[k].label);
    }
    std::string notes;
    for (int n = 1; n <= 6; ++n) notes += " --footnote 'note " + std::to_string(n) + "'";
    auto r = run("drift" + files + " --format md --labels" + labels + notes);
    ASSERT_EQ(r.code, 0) << r.err;
    for (const auto& row : rows) {
      std::string want = "| " + row.label + " |";
      for (const auto& c : row.cells) want += " " + c + " |";
      EXPECT_NE(r.out.find(want + "\n"), std::string::npos) << want << "\nin:\n" << r.out;
    }
    EXPECT_NE(r.out.find("| cell | loss, step 1 | step 10 | step 50 | step 100 | grad norm, "
                         "step 1 | step 10 | step 50 | step 100 |"),
              std::string::npos);
    EXPECT_NE(r.out.find("[6] note 6"), std::string::npos);
    EXPECT_NE(r.out.find("- pp2: loss all 4 steps identical; grad norm all 4 steps identical"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("- dp1, stock accumulation [4]: loss 1 of 4 steps identical; first "
                         "differs at step 10 (3.485760 vs 3.488880)"),
              std::string::npos) << r.out;
  }
}

// Megatron-Core golden values (keyed by step; and the older list form) give the same table as
// the same values in loss files.
TEST_F(Drift, MegatronGoldenValuesGiveTheTableOfTheLossFilesExact) {
  const auto rows = seed_rows();
  auto golden = [&](const SeedRow& row) {
    nlohmann::json values;
    for (int i = 0; i < 4; ++i) values[std::to_string(kSteps[i])] = row.loss[i];
    return nlohmann::json{{"lm loss", {{"start_step", 1}, {"end_step", 100}, {"step_interval", 5},
                                       {"values", values}}},
                          {"num-zeros", {{"start_step", 1}, {"end_step", 100},
                                         {"step_interval", 5}, {"values", {{"1", 1488.0}}}}}}
        .dump(4);
  };
  auto losses = [&](const SeedRow& row) {
    std::string t;
    for (int i = 0; i < 4; ++i) t += std::to_string(kSteps[i]) + " " + std::to_string(row.loss[i]) + "\n";
    return t;
  };
  std::string gfiles, lfiles;
  for (size_t k = 0; k < 4; ++k) {
    write("golden" + std::to_string(k) + ".json", golden(rows[k]));
    write("loss" + std::to_string(k) + ".txt", losses(rows[k]));
    gfiles += " " + p("golden" + std::to_string(k) + ".json");
    lfiles += " " + p("loss" + std::to_string(k) + ".txt");
  }
  const std::string labels = " --labels a b c d --format json";
  auto g = run("drift" + gfiles + labels);
  auto l = run("drift" + lfiles + labels);
  ASSERT_EQ(g.code, 0) << g.err;
  ASSERT_EQ(l.code, 0) << l.err;
  auto gj = nlohmann::json::parse(g.out), lj = nlohmann::json::parse(l.out);
  ASSERT_EQ(gj["rows"].size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(gj["rows"][k]["loss"], lj["rows"][k]["loss"]) << k;
    EXPECT_EQ(gj["rows"][k]["grad_norm"], lj["rows"][k]["grad_norm"]) << k;
    EXPECT_EQ(gj["rows"][k]["loss_identical"], lj["rows"][k]["loss_identical"]) << k;
  }
  EXPECT_EQ(gj["rows"][1]["loss"][1]["change"], "-0.09%");  // the seed's stock row, step 10
  EXPECT_EQ(gj["rows"][1]["grad_norm"][0]["change"], "n/a");  // golden values hold no grad norm

  // The list form: values[i] at iteration start_step + i * step_interval + 1.
  write("old.json", R"({"lm loss": {"start_step": 0, "end_step": 15, "step_interval": 5,
                        "values": [8.0, 7.5, 7.25]}})");
  write("old.txt", "1 8.0\n6 7.5\n11 7.25\n");
  write("ref.txt", "1 8.0\n6 7.4\n11 7.25\n");
  auto og = run("drift " + p("ref.txt") + " " + p("old.json") + " --labels r x --format json");
  auto ol = run("drift " + p("ref.txt") + " " + p("old.txt") + " --labels r x --format json");
  ASSERT_EQ(og.code, 0) << og.err;
  EXPECT_EQ(nlohmann::json::parse(og.out)["rows"][1]["loss"],
            nlohmann::json::parse(ol.out)["rows"][1]["loss"]);
}

// A cell whose log stops early: one line naming the missing steps, n/a in the table, exit 1,
// and a failed JUnit testcase saying the same.
TEST_F(Drift, ACellLackingStepsIsNamedAndFails) {
  write("ref.txt", "1 8.0\n2 7.0\n3 6.0\n4 5.5\n");
  write("short.txt", "1 8.0\n2 7.0\n");
  auto r = run("drift " + p("ref.txt") + " " + p("short.txt") + " --junit " + p("j.xml"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "parity drift: cell 'short.txt' (" + p("short.txt") +
                       ") lacks 2 of the reference's 4 steps: 3-4\n");
  EXPECT_NE(r.out.find("n/a"), std::string::npos);
  const std::string xml = slurp(p("j.xml"));
  EXPECT_NE(xml.find("failures=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("lacks 2 of the reference&apos;s 4 steps: 3-4"), std::string::npos) << xml;
}

// A Python program reading a JUnit file: "tests failures; name:message|..." per file.
std::string read_junit(const fs::path& dir, const std::string& file) {
  const std::string script = (dir / "read.py").string();
  std::ofstream(script) << "import sys, xml.etree.ElementTree as ET\n"
                           "root = ET.parse(sys.argv[1]).getroot()\n"
                           "cases = root.findall('.//testcase')\n"
                           "failed = [c for c in cases if c.find('failure') is not None]\n"
                           "print(len(cases), len(failed))\n"
                           "for c in failed:\n"
                           "    print(c.get('name') + ': ' + c.find('failure').get('message'))\n";
  const std::string out = (dir / "py.txt").string();
  const int code = std::system(("python3 " + script + " " + file + " > " + out + " 2>&1").c_str());
  return (code == 0 ? "" : "python failed: ") + slurp(out);
}

const char* kGateMatrix = R"(name = "junit"
report_steps = [1]
[defaults]
flavor = "tiny"
dtype = "bf16"
steps = 1
microbatches = 2
seq_len = 16
[[cell]]
name = "ref"
[[cell]]
name = "pp2"
reference = "ref"
trainer = "pipelined"
pp = 2
gate = "bitwise"
[[cell]]
name = "pp2vp2_cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "%s"
)";

// The gate's JUnit: passing, one testcase per gated cell and closed form and no failure;
// failing (a cached cell gated as bitwise), the failing cell named with its reason.
TEST_F(Drift, GateJunitParsesAndNamesTheFailingCell) {
  char text[1024];
  std::snprintf(text, sizeof text, kGateMatrix, "order-only");
  write("pass.toml", text);
  std::snprintf(text, sizeof text, kGateMatrix, "bitwise");
  write("fail.toml", text);
  auto pass = run("gate --matrix " + p("pass.toml") + " --quiet --jobs 2 --junit " + p("pass.xml") +
                  " --markdown " + p("pass.md"));
  ASSERT_EQ(pass.code, 0) << pass.out << pass.err;
  // Two gated cells; closed forms for the reference and pp2 / pp2 x vp2, cache off and on.
  EXPECT_EQ(read_junit(dir_, p("pass.xml")), "7 0\n");
  EXPECT_NE(slurp(p("pass.md")).find("**gate: PASS**"), std::string::npos);
  auto fail = run("gate --matrix " + p("fail.toml") + " --quiet --jobs 2 --no-closed-forms "
                  "--junit " + p("fail.xml"));
  ASSERT_EQ(fail.code, 1) << fail.out << fail.err;
  const std::string got = read_junit(dir_, p("fail.xml"));
  EXPECT_EQ(got.substr(0, 4), "2 1\n") << got;
  EXPECT_NE(got.find("pp2vp2_cached: gate bitwise failed: "), std::string::npos) << got;
}

// compare's JUnit: one testcase per step and tensor group (the scalars at the top, buffers,
// grads, params) and one per guard; a cached run against a naive one fails the scalars, grads
// and params and the every-step metrics, and with --layout passes the prediction; the
// Markdown lists the differing tensors.
TEST_F(Drift, CompareJunitHasAGroupPerStepAndTheGuards) {
  const std::string cell = "train --flavor tiny --steps 1 --seq-len 16 --microbatches 2 --quiet "
                           "--dtype bf16 --trainer pipelined --pp 2 --vp 2 --dump-steps 1 --dump ";
  ASSERT_EQ(run(cell + p("on") + " --cache on").code, 0);
  ASSERT_EQ(run(cell + p("off") + " --cache off").code, 0);
  auto same = run("compare " + p("off") + " " + p("off") + " --junit " + p("same.xml"));
  ASSERT_EQ(same.code, 0) << same.err;
  // step 1's four groups, the every-step metrics, the vacuity and finiteness guards
  EXPECT_EQ(read_junit(dir_, p("same.xml")), "7 0\n");
  auto diff = run("compare " + p("on") + " " + p("off") + " --layout layers=17,block=4,pp=2,vp=2"
                  " --junit " + p("diff.xml") + " --markdown " + p("diff.md"));
  ASSERT_EQ(diff.code, 1) << diff.err;
  const std::string got = read_junit(dir_, p("diff.xml"));
  EXPECT_EQ(got.substr(0, 4), "8 4\n") << got;  // the expert-bias buffer agrees
  EXPECT_NE(got.find("step 1 grads: "), std::string::npos) << got;
  EXPECT_NE(got.find("every-step loss and grad norm: loss or grad norm first differs at step 1"),
            std::string::npos) << got;
  EXPECT_EQ(got.find("differences within the predicted set:"), std::string::npos) << got;
  const std::string md = slurp(p("diff.md"));
  EXPECT_NE(md.find("**FAILED**"), std::string::npos) << md;
  EXPECT_NE(md.find("- 0 differing gradient(s) outside the predicted set"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | `grads/tok_embeddings.weight` |"), std::string::npos) << md;
}

// A matrix planned, its lines run by xargs -P 2 but one, judged (that cell "not run", exit
// 1), the last line run, judged again: the same verdicts, gates and drift strings as
// `matrix run` of the same matrix. The quick matrix's first table, cut to a cell of each kind
// (a bitwise gate, an order-only gate, no gate) and 2 steps, keeps the suite short; the note
// of the change gives the whole matrix's figures.
TEST_F(Drift, PlanXargsJudgeEqualsMatrixRun) {
  const std::string m = "quick --steps 2 --only pp2,pp2vp2_cached,stock,reversed";
  auto ran = run("matrix run " + m + " --out " + p("run") + " --jobs 2 --quiet --junit " +
                 p("run.xml") + " --markdown " + p("run.md"));
  ASSERT_EQ(ran.code, 0) << ran.err;
  EXPECT_EQ(read_junit(dir_, p("run.xml")), "5 0\n");  // a testcase per cell, the reference too
  EXPECT_NE(slurp(p("run.md")).find("**OK: 5 cells run, 2 gates passed**"), std::string::npos);
  auto plan = run("matrix plan " + m + " --out " + p("plan"));
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto lines = split(slurp(p("plan/commands.txt")), '\n');
  ASSERT_EQ(lines.size(), 5u);  // the four cells and their reference
  std::string most;
  for (size_t i = 0; i + 1 < lines.size(); ++i) most += lines[i] + "\n";
  write("most.txt", most);
  ASSERT_EQ(std::system(("xargs -P 2 -d '\\n' -n 1 sh -c < " + p("most.txt")).c_str()), 0);
  auto partial = run("matrix judge " + p("plan") + " --junit " + p("judge.xml"));
  EXPECT_EQ(partial.code, 1);
  const auto pj = nlohmann::json::parse(slurp(p("plan/report.json")));
  int not_run = 0;
  for (const auto& s : pj["summary"]) not_run += s["verdict"] == "NOT RUN";
  EXPECT_EQ(not_run, 1);
  EXPECT_NE(read_junit(dir_, p("judge.xml")).find(": not run: its command has not run"),
            std::string::npos);

  ASSERT_EQ(std::system(("sh -c " + quoted(lines.back())).c_str()), 0);
  auto judged = run("matrix judge " + p("plan"));
  EXPECT_EQ(judged.code, ran.code) << judged.out;
  const auto a = nlohmann::json::parse(slurp(p("run/report.json")));
  const auto b = nlohmann::json::parse(slurp(p("plan/report.json")));
  EXPECT_EQ(a["drift_tables"], b["drift_tables"]);
  ASSERT_EQ(a["summary"].size(), b["summary"].size());
  for (size_t i = 0; i < a["summary"].size(); ++i)
    for (const char* k : {"cell", "verdict", "wrong_tensors", "max_ulp", "exact", "order_only",
                          "wrong", "gate", "note", "bytes_forward_per_mb"})
      EXPECT_EQ(a["summary"][i][k], b["summary"][i][k]) << a["summary"][i]["cell"] << " " << k;
  EXPECT_EQ(a["footer"], b["footer"]);
}

}  // namespace
