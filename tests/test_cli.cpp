// The `parity` command line as a user meets it: subcommand output, checkpoints, metrics, and
// bad input (one line on stderr, exit code 2, no traceback).
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

namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Cli : public ::testing::Test {
 protected:
  // The first run in a fresh cache trains the tokenizer and says so on stderr; warm the cache
  // once so each test sees only its own output.
  static void SetUpTestSuite() {
    const std::string cmd = std::string(PARITY_BIN) +
                            " train --flavor tiny --steps 1 --seq-len 16 --quiet >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args) {
    const auto out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string(PARITY_BIN) + " " + args + " >" + out.string() + " 2>" +
                            err.string();
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  fs::path write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  fs::path dir_;
};

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// One line naming the problem, exit 2, no backtrace or exception dump.
void expect_one_line_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Exception raised from"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

const char* kTinyRun = "train --flavor tiny --steps 2 --seq-len 16 --quiet";

TEST_F(Cli, ModelShowsTheDebugmodelPatternAndBlocks) {
  auto r = run("model --flavor debugmodel");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("17 layers"), std::string::npos);
  EXPECT_NE(r.out.find("blocks open at layers 0, 4, 8, 12, 16"), std::string::npos);
  EXPECT_NE(r.out.find("total parameters:"), std::string::npos);
  // (3 KDA + 1 MLA) x 4 + MLA, read back from the per-layer table.
  std::istringstream lines(r.out);
  std::string line, pattern;
  while (std::getline(lines, line)) {
    int layer;
    char mixer[8] = {0};
    if (std::sscanf(line.c_str(), "%d %7s", &layer, mixer) == 2 &&
        (std::string(mixer) == "KDA" || std::string(mixer) == "MLA"))
      pattern += mixer[0];
  }
  EXPECT_EQ(pattern, "KKKMKKKMKKKMKKKMM");
}

TEST_F(Cli, UnknownFlavor) {
  expect_one_line_error(run("train --flavor nosuch --steps 1"), "unknown flavor 'nosuch'");
  expect_one_line_error(run("model --flavor nosuch"), "unknown flavor 'nosuch'");
}

TEST_F(Cli, MissingDataFile) {
  expect_one_line_error(run(std::string(kTinyRun) + " --data " + (dir_ / "none.jsonl").string()),
                        "does not exist");
}

TEST_F(Cli, MalformedJsonlLine) {
  auto p = write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": oops}\n");
  expect_one_line_error(run(std::string(kTinyRun) + " --data " + p.string()), "bad.jsonl:2");
}

TEST_F(Cli, SeqLenLongerThanTheDataAllows) {
  expect_one_line_error(run("train --flavor tiny --steps 1 --seq-len 100000000"), "--seq-len");
}

TEST_F(Cli, MissingUnreadableAndTruncatedCheckpoints) {
  expect_one_line_error(run(std::string(kTinyRun) + " --init " + (dir_ / "no.h5").string()),
                        "does not exist");
  auto garbage = write("garbage.h5", "this is not HDF5\n");
  expect_one_line_error(run(std::string(kTinyRun) + " --init " + garbage.string()),
                        "garbage.h5");
  const auto ck = dir_ / "ck.h5";
  ASSERT_EQ(run("init --flavor tiny --seed 5 --out " + ck.string()).code, 0);
  const auto truncated = dir_ / "truncated.h5";
  fs::copy_file(ck, truncated);
  fs::resize_file(truncated, fs::file_size(ck) / 2);
  expect_one_line_error(run(std::string(kTinyRun) + " --init " + truncated.string()),
                        "truncated.h5");
  // A checkpoint of another flavor is refused with the remedy.
  expect_one_line_error(run("train --flavor debugmodel --steps 1 --seq-len 16 --init " +
                            ck.string()),
                        "flavor 'tiny'");
}

TEST_F(Cli, TrainingFromACheckpointEqualsTrainingFromItsSeed) {
  const auto ck = dir_ / "ck.h5";
  ASSERT_EQ(run("init --flavor tiny --seed 11 --out " + ck.string()).code, 0);
  const auto a = dir_ / "a.jsonl", b = dir_ / "b.jsonl";
  ASSERT_EQ(run(std::string(kTinyRun) + " --seed 11 --metrics " + a.string()).code, 0);
  ASSERT_EQ(run(std::string(kTinyRun) + " --init " + ck.string() + " --metrics " + b.string())
                .code,
            0);
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_FALSE(slurp(a).empty());
}

TEST_F(Cli, MetricsLinesCarryExactHexFloats) {
  const auto m = dir_ / "m.jsonl";
  auto r = run(std::string(kTinyRun) + " --metrics " + m.string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(m);
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    ++steps;
    EXPECT_EQ(j["step"].get<int>(), steps);
    for (const char* f : {"loss", "grad_norm", "lr", "mb_losses", "loss_hex", "grad_norm_hex"})
      EXPECT_TRUE(j.contains(f)) << f;
    EXPECT_EQ(j["mb_losses"].size(), 4u);
    // The hex float is the exact value: parsing it back gives the same double bits.
    EXPECT_EQ(std::strtod(j["loss_hex"].get<std::string>().c_str(), nullptr),
              j["loss"].get<double>());
    EXPECT_EQ(std::strtod(j["grad_norm_hex"].get<std::string>().c_str(), nullptr),
              j["grad_norm"].get<double>());
  }
  EXPECT_EQ(steps, 2);
}

TEST_F(Cli, TwoRunsGiveIdenticalHexOnEveryStep) {
  const auto a = dir_ / "a.jsonl", b = dir_ / "b.jsonl";
  const std::string args = "train --flavor tiny --dtype bf16 --steps 3 --seq-len 16 --quiet";
  ASSERT_EQ(run(args + " --metrics " + a.string()).code, 0);
  ASSERT_EQ(run(args + " --metrics " + b.string()).code, 0);
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_EQ(count_lines(slurp(a)), 3u);
}

TEST_F(Cli, LayoutJsonCarriesTheVolumeAndStages) {
  auto r = run("layout --layers 93 --block 12 --pp 4 --vp 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // DESIGN.md section 9, pp4 x vp2: option1 18, naive 28, cached 18, cached peak 3, naive peak 7.
  EXPECT_EQ(j["volume"]["option1"], 18);
  EXPECT_EQ(j["volume"]["naive"], 28);
  EXPECT_EQ(j["volume"]["cached"], 18);
  EXPECT_EQ(j["volume"]["cached_peak"], 3);
  EXPECT_EQ(j["volume"]["naive_peak"], 7);
  ASSERT_EQ(j["stages"].size(), 8u);
  for (const char* f : {"stage", "rank", "units", "commits", "held_at_entry", "sends_cached",
                        "sends_naive"})
    EXPECT_TRUE(j["stages"][0].contains(f)) << f;
  EXPECT_EQ(j["stages"][5]["rank"], 1);
}

TEST_F(Cli, ScheduleJsonIsTheGridWithNullIdles) {
  auto r = run("schedule --pp 2 --vp 2 --microbatches 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 2u);
  // DESIGN.md section 5: rank 1's order starts 1F0 1F1 3F0 3B0, after one idle slot.
  std::vector<std::string> rank1;
  for (const auto& a : j["ranks"][1])
    if (!a.is_null()) rank1.push_back(a.get<std::string>());
  ASSERT_GE(rank1.size(), 4u);
  EXPECT_EQ(rank1[0] + " " + rank1[1] + " " + rank1[2] + " " + rank1[3], "1F0 1F1 3F0 3B0");
  EXPECT_TRUE(j["ranks"][1][0].is_null());
}

TEST_F(Cli, PipelinedNaiveTrainingPrintsTheReferenceBits) {
  const auto a = dir_ / "ref.jsonl", b = dir_ / "pipe.jsonl";
  ASSERT_EQ(run(std::string(kTinyRun) + " --metrics " + a.string()).code, 0);
  auto r = run(std::string(kTinyRun) + " --trainer pipelined --pp 2 --vp 2 --cache off --metrics " +
               b.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(a), slurp(b));
}

TEST_F(Cli, BadPipelineShapesAreOneLineErrors) {
  expect_one_line_error(run(std::string(kTinyRun) + " --trainer pipelined --pp 2 --vp 2 --split '0|1'"),
                        "pp x vp is 4");
  expect_one_line_error(run("schedule --pp 2 --vp 2 --schedule 1f1b"), "vp");
  expect_one_line_error(run(std::string(kTinyRun) + " --trainer pipelined --pp 2 --cache maybe"),
                        "--cache");
}

TEST_F(Cli, CompareOfTheSameCellAndOfReferenceAgainstNaivePipelinePasses) {
  const std::string run1 = std::string(kTinyRun) + " --dump-steps 1,2 --dump ";
  const auto a = dir_ / "a", b = dir_ / "b", p = dir_ / "p";
  ASSERT_EQ(run(run1 + a.string()).code, 0);
  ASSERT_EQ(run(run1 + b.string()).code, 0);
  ASSERT_EQ(run(run1 + p.string() + " --trainer pipelined --pp 4 --vp 4 --cache off").code, 0);
  auto same = run("compare " + a.string() + " " + b.string());
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_NE(same.out.find("OK"), std::string::npos);
  auto pipe = run("compare " + a.string() + " " + p.string() + " --json");
  EXPECT_EQ(pipe.code, 0) << pipe.out;
  auto j = nlohmann::json::parse(pipe.out);
  EXPECT_EQ(j["summary"]["differing"], 0);
  EXPECT_GT(j["summary"]["tensors"].get<int>(), 800);  // two steps of 428 grads + params
}

TEST_F(Cli, CompareOfCachedAgainstNaiveListsTheDifferingTensorsWithUlps) {
  const std::string cell = "train --flavor tiny --dtype bf16 --steps 1 --seq-len 16 --quiet "
                           "--trainer pipelined --pp 2 --vp 2 --dump-steps 1 --dump ";
  const auto on = dir_ / "on", off = dir_ / "off";
  ASSERT_EQ(run(cell + on.string() + " --cache on").code, 0);
  ASSERT_EQ(run(cell + off.string() + " --cache off").code, 0);
  auto r = run("compare " + off.string() + " " + on.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("grads/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
  // The forward is identical: no loss row is listed as differing.
  EXPECT_EQ(r.out.find("mb_losses"), std::string::npos) << r.out;
}

TEST_F(Cli, CompareAgainstAFloat64TruthRanksTheRuns) {
  const std::string cell = "train --flavor tiny --steps 1 --seq-len 16 --quiet --dump-steps 1 ";
  const auto t = dir_ / "t", a = dir_ / "a", b = dir_ / "b";
  ASSERT_EQ(run(cell + "--dtype fp64 --dump " + t.string()).code, 0);
  ASSERT_EQ(run(cell + "--dtype fp32 --dump " + a.string()).code, 0);
  ASSERT_EQ(run(cell + "--dtype fp32 --trainer pipelined --pp 2 --vp 2 --cache on --dump " +
                b.string()).code, 0);
  auto r = run("compare " + a.string() + " " + b.string() + " --truth " + t.string() + " --json");
  ASSERT_NE(r.code, 2) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& rows = j["truth"]["rows"];
  ASSERT_EQ(rows.size(), 2u * 428);  // grads and params of every tiny parameter
  EXPECT_EQ(j["truth"]["a_closer"].get<int>() + j["truth"]["b_closer"].get<int>() +
                j["truth"]["ties"].get<int>(),
            static_cast<int>(rows.size()));
  // fp32 against an fp64 truth: some tensor is off by at least one fp32 ulp.
  bool any_error = false;
  for (const auto& row : rows) any_error |= row["a_max_ulp"].get<uint64_t>() > 0;
  EXPECT_TRUE(any_error);
}

TEST_F(Cli, CompareRefusesMismatchedDumps) {
  const auto one = dir_ / "one", two = dir_ / "two";
  ASSERT_EQ(run(std::string(kTinyRun) + " --dump-steps 1 --dump " + one.string()).code, 0);
  ASSERT_EQ(run(std::string(kTinyRun) + " --dump-steps 1,2 --dump " + two.string()).code, 0);
  expect_one_line_error(run("compare " + one.string() + " " + two.string()), "different steps");
  expect_one_line_error(run("compare " + one.string() + " " + (dir_ / "none").string()),
                        "does not exist");
}

TEST_F(Cli, ClosedFormPassesExitsOneOnAFaultAndTwoOnBadInput) {
  auto ok = run("closed-form --dtype bf16 --pp 4 --vp 2 --cache on");
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("closed form: PASS"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("forward-only pass checked"), std::string::npos) << ok.out;
  auto ref = run("closed-form --dtype fp64 --wide");
  EXPECT_EQ(ref.code, 0) << ref.out << ref.err;
  EXPECT_NE(ref.out.find("reference"), std::string::npos) << ref.out;

  auto bad = run("closed-form --dtype bf16 --pp 2 --vp 2 --inject drop-deposit:block=1,stage=3");
  EXPECT_EQ(bad.code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("DIFFERS step 1 grad"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("closed form: FAIL"), std::string::npos) << bad.out;

  expect_one_line_error(run("closed-form --dtype fp32 --wide"), "--wide needs --dtype fp64");
  expect_one_line_error(run("closed-form --pp 4 --vp 2 --split \"0-1|2-4\""), "split");
}

TEST_F(Cli, LocaliseRulesCachedAgainstNaiveOrderOnlyAndAFaultWrong) {
  const std::string cell = "train --flavor tiny --dtype bf16 --steps 1 --seq-len 16 --quiet "
                           "--trainer pipelined --pp 2 --vp 2 --ledger --dump-steps 1 --dump ";
  const auto on = dir_ / "on", off = dir_ / "off", bad = dir_ / "bad";
  ASSERT_EQ(run(cell + on.string() + " --cache on").code, 0);
  ASSERT_EQ(run(cell + off.string() + " --cache off").code, 0);
  ASSERT_EQ(run(cell + bad.string() + " --cache on --inject skip-collect:block=2,stage=1").code, 0);

  auto r = run("localise " + on.string() + " " + off.string() + " --json");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["counts"]["WRONG"], 0);
  EXPECT_GT(j["counts"]["ORDER-ONLY"].get<int>(), 0);

  auto f = run("localise " + on.string() + " " + bad.string());
  EXPECT_EQ(f.code, 1) << f.out;
  EXPECT_NE(f.out.find("block 2, stage 1: the gradient lacks"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("FAILED"), std::string::npos) << f.out;

  const auto plain = dir_ / "plain";
  ASSERT_EQ(run(std::string(kTinyRun) + " --dump-steps 1 --dump " + plain.string()).code, 0);
  expect_one_line_error(run("localise " + plain.string() + " " + plain.string()), "--ledger");
}

}  // namespace
