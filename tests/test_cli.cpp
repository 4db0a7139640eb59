// The `parity` command line as a user meets it: subcommand output, checkpoints, metrics, and
// bad input (one line on stderr, exit code 2, no traceback).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"
#include "tests/metric_lines.h"

namespace fs = std::filesystem;

namespace {

using parity::testing::CliResult;
using parity::testing::count_lines;
using parity::testing::expect_one_line_error;
using parity::testing::metric_bits;
using parity::testing::run_parity;
using parity::testing::slurp;

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

  // env: "NAME=value ..." set for this run only.
  CliResult run(const std::string& args, const std::string& env = "") {
    return run_parity(dir_, args, env);
  }

  fs::path write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  fs::path dir_;
};

const char* kTinyRun = "train --flavor tiny --steps 2 --seq-len 16 --quiet";

TEST_F(Cli, ModelShowsTheDebugmodelPatternAndBlocks) {
  auto r = run("model --flavor debugmodel");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("17 layers"), std::string::npos);
  EXPECT_NE(r.out.find("blocks open at layers 0, 4, 8, 12, 16"), std::string::npos);
  // The count and the tower left out (both worked by hand in test_torchtitan.cpp).
  EXPECT_NE(r.out.find("text parameters: 22,479,088"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vision tower (vision_encoder.*, 3,297,792 parameters"),
            std::string::npos) << r.out;
  // torchtitan's state dict: the 443 parameter tensors and one persistent expert_bias_E per
  // MoE layer (layers 1-16), 459 entries; the routers' two buffers each are not persistent.
  EXPECT_NE(r.out.find("state dict: 459 entries (443 parameters, 16 persistent buffers)"),
            std::string::npos) << r.out;
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
  expect_one_line_error(run("train --flavor nosuch --steps 1"), "unknown --flavor 'nosuch'");
  expect_one_line_error(run("model --flavor nosuch"), "unknown --flavor 'nosuch'");
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

// A token file made elsewhere (--tokens: a machine without SentencePiece) trains bit for bit
// as the tokenizer's own output does.
TEST_F(Cli, ATokenFileTrainsAsTheTokenizerDoes) {
  const auto a = dir_ / "a.jsonl", b = dir_ / "b.jsonl";
  ASSERT_EQ(run(std::string(kTinyRun) + " --metrics " + a.string()).code, 0);
  const auto tool = std::filesystem::path(PARITY_BIN).parent_path() / "parity-tokenize";
  const auto listed = dir_ / "tokens.txt";
  ASSERT_EQ(std::system((tool.string() + " >" + listed.string() + " 2>/dev/null").c_str()), 0);
  std::string tokens = slurp(listed);
  while (!tokens.empty() && tokens.back() == '\n') tokens.pop_back();
  ASSERT_TRUE(std::filesystem::is_regular_file(tokens)) << tokens;
  ASSERT_EQ(run(std::string(kTinyRun) + " --tokens " + tokens + " --metrics " + b.string()).code, 0);
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_FALSE(slurp(a).empty());
  expect_one_line_error(run(std::string(kTinyRun) + " --tokens " + (dir_ / "none.bin").string()),
                        "none.bin");
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

// What the user set for the vector kernels is what runs (kernels/vector_kernels.h): OpenBLAS's
// Haswell kernels and ATen's scalar ("default") ones here, named by bench and train's header.
TEST_F(Cli, TheVectorKernelsTheUserSetAreKeptAndNamed) {
  const std::string env = "OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=default PARITY_GEMM=aten";
  const auto gemm = run("bench --what gemm --warmup-steps 0 --measured-steps 1", env);
  ASSERT_EQ(gemm.code, 0) << gemm.err;
  EXPECT_NE(gemm.err.find("bench gemm: fp32 GEMM ATen, bf16 GEMM ATen, OpenBLAS Haswell, ATen "
                          "default\n"),
            std::string::npos)
      << gemm.err;
  const auto train = run("train --flavor tiny --steps 1 --seq-len 16", env);
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_NE(train.out.find("thread(s) (fp32 GEMM ATen, bf16 GEMM ATen, OpenBLAS Haswell, ATen "
                           "default)"),
            std::string::npos)
      << train.out;
  // parity's own product runs everywhere in its scalar form; bf16 products then run in ATen,
  // as on a CPU without AVX-512 BF16.
  const auto scalar = run("train --flavor tiny --steps 1 --seq-len 16", "PARITY_GEMM=scalar");
  ASSERT_EQ(scalar.code, 0) << scalar.err;
  EXPECT_NE(scalar.out.find("(fp32 GEMM parity scalar, bf16 GEMM ATen, "), std::string::npos)
      << scalar.out;
}

// The malloc the build linked is the one the binary runs (cli/CMakeLists.txt): jemalloc
// where the build found it, and no restart with glibc's tunables then; glibc's otherwise.
TEST_F(Cli, TheVersionNamesTheMallocTheBuildLinked) {
  const auto v = run("--version");
  ASSERT_EQ(v.code, 0) << v.err;
  const std::string expected = PARITY_JEMALLOC_LINKED ? "; malloc jemalloc " : "; malloc glibc\n";
  EXPECT_NE(v.out.find(expected), std::string::npos) << v.out;
}

TEST_F(Cli, AnUnknownGemmChoiceIsBadInputThatNamesTheChoices) {
  const auto r = run("train --flavor tiny --steps 1 --seq-len 16", "PARITY_GEMM=avx1024");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("PARITY_GEMM=avx1024: unknown; use avx512, avx2, scalar or aten"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, LayoutJsonCarriesTheVolumeAndStages) {
  auto r = run("layout --layers 93 --block 12 --pp 4 --vp 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // docs/design.md section 9, pp4 x vp2: option1 18, naive 28, cached 18, cached peak 3,
  // naive peak 7.
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
  // docs/design.md section 9: rank 1's order starts 1F0 1F1 3F0 3B0, after one idle slot.
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

// A diverged run's dump (lr 1e9: step 3's gradients hold NaN) compared with itself: the same
// bits on both sides, and still a failure, since NaN is not a match; --allow-nonfinite lets it
// pass and says so.
TEST_F(Cli, CompareFailsOnANanDumpEvenAgainstItself) {
  const auto d = dir_ / "nan";
  ASSERT_EQ(run("train --flavor tiny --steps 3 --seq-len 16 --lr 1e9 --quiet --dump-steps 3 "
                "--dump " + d.string()).code, 0);
  auto r = run("compare " + d.string() + " " + d.string());
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("# non-finite: grads/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(run("compare " + d.string() + " " + d.string() + " --json").out);
  EXPECT_EQ(j["summary"]["differing"], 0);  // every bit agrees
  EXPECT_FALSE(j["summary"]["pass"].get<bool>());
  auto allowed = run("compare " + d.string() + " " + d.string() + " --allow-nonfinite");
  EXPECT_EQ(allowed.code, 0) << allowed.out << allowed.err;
  EXPECT_NE(allowed.out.find("# non-finite (allowed by --allow-nonfinite)"), std::string::npos)
      << allowed.out;
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
  // Grads and params of every tiny parameter: tiny has the debugmodel's 443 tensors (its list
  // is worked by hand in test_torchtitan.cpp).
  ASSERT_EQ(rows.size(), 2u * 443);
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

// ---- multi-process (c10d Gloo) ----

bool have_gloo() {
  const std::string cmd = std::string(PARITY_BIN) + " --version";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) ::pclose(p);
  return out.find("c10d gloo") != std::string::npos;
}

int free_port() {
  int port = 0;
  ::close(parity::testing::loopback_socket(port, /*listen=*/false));
  return port;
}

const char* kMpCell = "train --trainer pipelined --flavor tiny --steps 5 --seq-len 16 --quiet "
                      "--dump-steps 1,5 ";

// --documents on reaches every stage: the pipelined naive run (whose stages past the first
// rebuild the documents from the micro-batch's tokens) prints the reference's bits, a
// two-process cached run prints the in-process cached run's, and masking changes the loss
// (the fortunes are a few dozen tokens each, so a 64-token row holds several).
TEST_F(Cli, DocumentsReachEveryStageAndEveryProcess) {
  const std::string run1 = "train --flavor tiny --steps 2 --seq-len 64 --quiet ";
  auto metrics = [&](const std::string& args, const std::string& name) {
    const auto f = dir_ / (name + ".jsonl");
    auto r = run(run1 + args + " --metrics " + f.string());
    EXPECT_EQ(r.code, 0) << r.err;
    return metric_bits(slurp(f));
  };
  const auto ref = metrics("--documents on", "ref");
  ASSERT_EQ(ref.size(), 2u);
  EXPECT_EQ(metrics("--documents on --trainer pipelined --pp 2 --vp 2 --cache off", "naive"), ref);
  EXPECT_NE(metrics("--documents off", "off"), ref);
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  const std::string cached = "--documents on --trainer pipelined --pp 2 --vp 2 --cache on";
  EXPECT_EQ(metrics(cached + " --nproc 2 --backend gloo", "mp"), metrics(cached, "cached"));
}

TEST_F(Cli, MultiProcessGlooRunsEqualTheInProcessExecutorBitwise) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  struct Shape {
    int pp, vp;
    const char* cache;
  };
  for (const Shape sh : {Shape{4, 2, "on"}, Shape{4, 2, "off"}, Shape{2, 4, "on"},
                         Shape{4, 4, "on"}, Shape{4, 4, "off"}}) {
    const std::string cell = std::string(kMpCell) + "--pp " + std::to_string(sh.pp) + " --vp " +
                             std::to_string(sh.vp) + " --cache " + sh.cache;
    SCOPED_TRACE(cell);
    const auto m = dir_ / "m", i = dir_ / "i";
    fs::remove_all(m);
    fs::remove_all(i);
    auto mp = run(cell + " --nproc " + std::to_string(sh.pp) + " --backend gloo --dump " +
                  m.string() + " --metrics " + (dir_ / "m.jsonl").string());
    ASSERT_EQ(mp.code, 0) << mp.err;
    ASSERT_EQ(run(cell + " --dump " + i.string() + " --metrics " + (dir_ / "i.jsonl").string()).code, 0);
    auto c = run("compare " + m.string() + " " + i.string());
    EXPECT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(metric_bits(slurp(dir_ / "m.jsonl")), metric_bits(slurp(dir_ / "i.jsonl")));
    EXPECT_EQ(metric_bits(slurp(dir_ / "m.jsonl")).size(), 5u);
  }
}

TEST_F(Cli, RanksStartedSeparatelyWithTorchrunVariablesGiveTheSameBits) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  const std::string cell = std::string(kMpCell) + "--pp 4 --vp 2 --cache on --backend gloo";
  const auto e = dir_ / "e", i = dir_ / "i";
  const int port = free_port();
  std::string script;
  for (int r = 0; r < 4; ++r)
    script += "RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
              " WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " +
              PARITY_BIN + " " + cell + " --timeout-s 60 --dump " + e.string() + " > " +
              (dir_ / ("r" + std::to_string(r) + ".log")).string() + " 2>&1 & p" +
              std::to_string(r) + "=$!; ";
  script += "s=0; for p in $p0 $p1 $p2 $p3; do wait $p || s=1; done; exit $s";
  const std::string cmd = "bash -c '" + script + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir_ / "r0.log") << slurp(dir_ / "r1.log");
  ASSERT_EQ(run(std::string(kMpCell) + "--pp 4 --vp 2 --cache on --dump " + i.string()).code, 0);
  auto c = run("compare " + e.string() + " " + i.string());
  EXPECT_EQ(c.code, 0) << c.out;
}

// The checkpoint is read once per process: validation reads it and the trainers, the local
// launcher's forked workers and the matrix cells use what it read. Every read is traced on
// stderr with PARITY_TRACE=checkpoint-reads (dumps/checkpoint.h); the trace lines are counted.
int checkpoint_reads(const std::string& text) {
  int n = 0;
  for (size_t at = text.find("parity: trace: checkpoint read"); at != std::string::npos;
       at = text.find("parity: trace: checkpoint read", at + 1))
    ++n;
  return n;
}

TEST_F(Cli, TheCheckpointIsReadOncePerProcess) {
  const auto ckpt = dir_ / "c.h5";
  ASSERT_EQ(run("init --flavor tiny --out " + ckpt.string()).code, 0);
  const std::string trace = "PARITY_TRACE=checkpoint-reads";
  const std::string cell = "train --flavor tiny --steps 2 --seq-len 16 --quiet --init " + ckpt.string();
  auto ref = run(cell, trace);
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_EQ(checkpoint_reads(ref.err), 1) << ref.err;
  auto pipe = run(cell + " --trainer pipelined --pp 2 --vp 2", trace);
  ASSERT_EQ(pipe.code, 0) << pipe.err;
  EXPECT_EQ(checkpoint_reads(pipe.err), 1) << pipe.err;
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo: the multi-process half is not run";
  // --nproc 2: the launcher reads it, its two forked workers take what it read.
  auto local = run(cell + " --trainer pipelined --pp 2 --nproc 2 --backend gloo", trace);
  ASSERT_EQ(local.code, 0) << local.err;
  EXPECT_EQ(checkpoint_reads(local.err), 1) << local.err;
  // Two ranks started on their own (torchrun's way): one read in each process.
  const int port = free_port();
  std::string script;
  for (int r = 0; r < 2; ++r)
    script += trace + " RANK=" + std::to_string(r) + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 " +
              "MASTER_PORT=" + std::to_string(port) + " " + PARITY_BIN + " " + cell +
              " --trainer pipelined --pp 2 --backend gloo --timeout-s 60 > " +
              (dir_ / ("r" + std::to_string(r) + ".log")).string() + " 2>&1 & p" +
              std::to_string(r) + "=$!; ";
  script += "s=0; for p in $p0 $p1; do wait $p || s=1; done; exit $s";
  ASSERT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0) << slurp(dir_ / "r0.log");
  for (int r = 0; r < 2; ++r) {
    const std::string log = slurp(dir_ / ("r" + std::to_string(r) + ".log"));
    EXPECT_EQ(checkpoint_reads(log), 1) << "rank " << r << ": " << log;
  }
}

TEST_F(Cli, DataParallelProcessesEqualInProcessDpAndTheReference) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  const auto m = dir_ / "m", i = dir_ / "i", r = dir_ / "r", n = dir_ / "n";
  const std::string dp = std::string(kMpCell) + "--dp 2 --pp 2 --vp 2 ";
  ASSERT_EQ(run(dp + "--cache on --nproc 4 --backend gloo --dump " + m.string()).code, 0);
  ASSERT_EQ(run(dp + "--cache on --dump " + i.string()).code, 0);
  EXPECT_EQ(run("compare " + m.string() + " " + i.string()).code, 0);
  ASSERT_EQ(run(dp + "--cache off --nproc 4 --backend gloo --dump " + n.string()).code, 0);
  ASSERT_EQ(run("train --flavor tiny --steps 5 --seq-len 16 --quiet --dump-steps 1,5 --dp 2 "
                "--dump " + r.string()).code, 0);
  auto c = run("compare " + n.string() + " " + r.string());
  EXPECT_EQ(c.code, 0) << c.out;
}

// The quantile-balanced expert bias (on by default) over Gloo, in bf16: two processes of pp2 x vp2 with
// the naive transport equal the single-device reference bit for bit on every one of 5 steps:
// loss and grad norm from the metrics, and every gradient, parameter and expert bias from the
// dumps. Against a run with --no-expert-balance, every layer's bias has moved off zero by the
// end of step 1.
TEST_F(Cli, ExpertBalanceOverGlooEqualsTheReferenceOnEveryStep) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  // bf16, torchtitan's mode: its gradients cross the processes in bf16 (the other multi-process
  // tests run fp32).
  const std::string common =
      "--flavor tiny --dtype bf16 --steps 5 --seq-len 16 --quiet --dump-steps 1,2,3,4,5 ";
  const auto r = dir_ / "r", m = dir_ / "m", o = dir_ / "o";
  ASSERT_EQ(run("train " + common + "--dump " + r.string() + " --metrics " +
                (dir_ / "r.jsonl").string()).code, 0);
  auto mp = run("train --trainer pipelined " + common + "--pp 2 --vp 2 --cache off --nproc 2 "
                "--backend gloo --dump " + m.string() + " --metrics " + (dir_ / "m.jsonl").string());
  ASSERT_EQ(mp.code, 0) << mp.err;
  EXPECT_EQ(metric_bits(slurp(dir_ / "m.jsonl")), metric_bits(slurp(dir_ / "r.jsonl")));
  EXPECT_EQ(metric_bits(slurp(dir_ / "m.jsonl")).size(), 5u);

  auto same = run("compare " + m.string() + " " + r.string() + " --json");
  ASSERT_EQ(same.code, 0) << same.out;
  const auto same_rows = nlohmann::json::parse(same.out)["rows"];
  ASSERT_GT(same_rows.size(), 0u);
  int biases = 0;
  for (const auto& row : same_rows) {
    EXPECT_TRUE(row["bitwise"].get<bool>()) << row["tensor"] << " step " << row["step"];
    biases += row["tensor"].get<std::string>().rfind("buffers/", 0) == 0;
  }
  EXPECT_EQ(biases, 16 * 5);  // tiny's 16 MoE layers, 5 dumped steps

  ASSERT_EQ(run("train " + common + "--no-expert-balance --dump " + o.string()).code, 0);
  auto moved = nlohmann::json::parse(run("compare " + r.string() + " " + o.string() + " --json").out);
  int moved_at_step1 = 0;
  for (const auto& row : moved["rows"])
    if (row["step"] == 1 && row["tensor"].get<std::string>().rfind("buffers/", 0) == 0) {
      EXPECT_FALSE(row["bitwise"].get<bool>()) << row["tensor"] << " stayed at zero";
      ++moved_at_step1;
    }
  EXPECT_EQ(moved_at_step1, 16);
}

TEST_F(Cli, BytesSentBetweenProcessesAreTheInProcessFigures) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  for (const char* cache : {"on", "off"}) {
    const std::string bench = std::string("bench --what pipelined --flavor tiny --seq-len 16 ") +
                              "--pp 4 --vp 4 --warmup-steps 0 --measured-steps 1 --cache " + cache;
    auto mp = run(bench + " --nproc 4 --backend gloo");
    auto ip = run(bench);
    ASSERT_EQ(mp.code, 0) << mp.err;
    ASSERT_EQ(ip.code, 0) << ip.err;
    // The last two columns: forward and backward bytes of micro-batch 0.
    auto tail = [](const std::string& out) {
      std::stringstream ss(out.substr(out.rfind("tiny")));
      std::vector<std::string> f;
      std::string w;
      while (ss >> w) f.push_back(w);
      return std::make_pair(f.at(f.size() - 2), f.back());
    };
    EXPECT_EQ(tail(mp.out), tail(ip.out)) << mp.out << ip.out;
    EXPECT_NE(tail(ip.out).first, "0");
  }
}

// The table of a paired bench (--what ratio, ac-ratio, threads-ratio): a head row, then one
// row per pair, `flavor dtype <what> n a_ms b_ms figure` with figure = of(a, b) (printed to 3
// decimals) and n the step, counting from `first`, then "<name> (median of N steps): " and the
// median of the figures. The times are the machine's and never asserted.
void expect_paired_table(const std::string& out, const std::string& what, int pairs,
                         const std::string& name, double (*of)(double, double),
                         int first = 1) {
  std::stringstream ss(out);
  std::string line;
  std::getline(ss, line);
  EXPECT_EQ(line.rfind("flavor", 0), 0u) << line;
  std::vector<double> figures;
  for (int pair = 1; pair <= pairs; ++pair) {
    ASSERT_TRUE(std::getline(ss, line)) << out;
    std::vector<std::string> f;
    std::stringstream row(line);
    for (std::string w; row >> w;) f.push_back(w);
    ASSERT_GE(f.size(), 7u) << line;
    EXPECT_EQ(f[0], "tiny") << line;
    const size_t n = f.size();
    std::string middle;
    for (size_t i = 2; i + 4 < n; ++i) middle += (middle.empty() ? "" : " ") + f[i];
    EXPECT_EQ(middle, what) << line;
    EXPECT_EQ(std::stoi(f[n - 4]), first + pair - 1) << line;
    const double a = std::stod(f[n - 3]), b = std::stod(f[n - 2]), figure = std::stod(f[n - 1]);
    ASSERT_GT(a, 0) << line;
    ASSERT_GT(b, 0) << line;
    // The times print to 0.1 ms: the figure from them is within that rounding of the one
    // printed (relative 0.05 / a + 0.05 / b), plus the figure's own 0.0005.
    EXPECT_NEAR(figure, of(a, b), 5e-4 + figure * (0.05 / a + 0.05 / b)) << line;
    figures.push_back(figure);
  }
  ASSERT_TRUE(std::getline(ss, line)) << out;
  std::sort(figures.begin(), figures.end());
  const std::string head = name + " (median of " + std::to_string(pairs) + " steps): ";
  ASSERT_EQ(line.rfind(head, 0), 0u) << line;
  if (pairs % 2 == 1) {  // the middle row's figure itself, printed alike
    std::stringstream want;
    want << head << std::fixed << std::setprecision(3) << figures[pairs / 2];
    EXPECT_EQ(line, want.str());
  } else {
    // The mean of the two middle figures, taken from their unrounded values: each printed
    // figure is within 0.0005 of its value, so their mean is too, and the printed median
    // within another 0.0005 of that.
    const double mid = 0.5 * (figures[pairs / 2 - 1] + figures[pairs / 2]);
    EXPECT_NEAR(std::stod(line.substr(head.size())), mid, 1e-3 + 1e-9) << line;
  }
}

double b_over_a(double a, double b) { return b / a; }
double a_over_b(double a, double b) { return a / b; }

// bench --what ratio: one row per measured step whose ratio is its pipelined / reference
// columns, and the median of those ratios.
TEST_F(Cli, BenchRatioPrintsEachStepAndTheMedian) {
  auto r = run("bench --what ratio --flavor tiny --seq-len 16 --pp 2 --vp 2 "
               "--warmup-steps 0 --measured-steps 3");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_paired_table(r.out, "pp2xvp2 cache on", 3, "ratio", b_over_a);
}

// bench --what ac-ratio: the --ac layer step over the --ac none one, per measured step (the
// warm-up steps are not rows) and the median.
TEST_F(Cli, BenchAcRatioPrintsEachStepAndTheMedian) {
  auto r = run("bench --what ac-ratio --flavor tiny --seq-len 16 --warmup-steps 1 "
               "--measured-steps 2");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_paired_table(r.out, "ac layer / none", 2, "ratio", b_over_a, 2);
}

// bench --what threads-ratio: the one-thread step over the two-thread one (a speedup).
TEST_F(Cli, BenchThreadsRatioPrintsEachStepAndTheMedian) {
  auto r = run("bench --what threads-ratio --threads 2 --flavor tiny --seq-len 16 "
               "--warmup-steps 0 --measured-steps 3");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_paired_table(r.out, "2 threads / 1", 3, "speedup", a_over_b);
}

// bench --breakdown turns the reference trainer's side-by-side micro-batches off (the per-family
// clock times one op at a time), so at two threads it says its step time is not the two-thread
// step; at one thread, and for the pipelined trainer, there is nothing to say.
TEST_F(Cli, BenchBreakdownSaysWhenItIsNotTheThreadedStep) {
  const std::string bench =
      "bench --flavor tiny --seq-len 16 --breakdown --warmup-steps 0 --measured-steps 1 ";
  const std::string note = "note: the per-family clock runs the micro-batches one after the other";
  auto two = run(bench + "--what step --threads 2");
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_NE(two.out.find(note), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("this is not the 2-thread step"), std::string::npos) << two.out;
  auto one = run(bench + "--what step --threads 1");
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("\nstep: "), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find(note), std::string::npos) << one.out;
  auto single = run(bench + "--what step --threads 2 --microbatches 1");
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_NE(single.out.find("\nstep: "), std::string::npos) << single.out;
  EXPECT_EQ(single.out.find(note), std::string::npos) << single.out;
  auto pipe = run(bench + "--what pipelined --pp 2 --threads 2");
  ASSERT_EQ(pipe.code, 0) << pipe.err;
  EXPECT_NE(pipe.out.find("\nstep: "), std::string::npos) << pipe.out;
  EXPECT_EQ(pipe.out.find(note), std::string::npos) << pipe.out;
}

// bench --breakdown holds each measured step against the fp32 GEMM peak measured right after
// it (a share per step, then their median); stderr names each step's peak. Structure only: the
// figures are the machine's.
TEST_F(Cli, BenchBreakdownHoldsEachStepAgainstThePeakAfterIt) {
  auto r = run("bench --flavor tiny --seq-len 16 --breakdown --what step --warmup-steps 1 "
               "--measured-steps 3");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string head = "each step against the fp32 peak measured right after it:";
  const auto at = r.out.find(head);
  ASSERT_NE(at, std::string::npos) << r.out;
  std::stringstream line(r.out.substr(at + head.size(), r.out.find('\n', at) - at - head.size()));
  std::vector<double> shares;
  std::string w;
  while (line >> w && w.back() == '%') shares.push_back(std::stod(w));
  ASSERT_EQ(shares.size(), 3u) << r.out;  // the measured steps, not the warm-up one
  for (double v : shares) EXPECT_GT(v, 0) << r.out;
  std::string rest, last;
  std::getline(line, rest);
  std::stringstream tail(rest);
  while (tail >> w) last = w;
  std::sort(shares.begin(), shares.end());
  EXPECT_EQ(last, std::to_string(static_cast<int>(shares[1])) + "%") << r.out;
  int peaks = 0;
  for (auto p = r.err.find("fp32 GEMM peak after it"); p != std::string::npos;
       p = r.err.find("fp32 GEMM peak after it", p + 1))
    ++peaks;
  EXPECT_EQ(peaks, 4) << r.err;  // every step, the warm-up one too
}

// bench --what gemm: one row per size, n and the rate consistent with 2 n^3 flops per product
// (the rate's value is the machine's, never asserted).
TEST_F(Cli, BenchGemmPrintsARowPerSizeWithItsRate) {
  auto r = run("bench --what gemm --dtype fp32 --warmup-steps 0 --measured-steps 1");
  ASSERT_EQ(r.code, 0) << r.err;
  std::stringstream ss(r.out);
  std::string line;
  std::getline(ss, line);
  EXPECT_EQ(line.rfind("dtype", 0), 0u) << line;
  for (int64_t n : {256, 512, 1024, 2048}) {
    ASSERT_TRUE(std::getline(ss, line)) << r.out;
    std::stringstream row(line);
    std::string dtype;
    int threads = 0;
    int64_t size = 0;
    double ms = 0, gflops = 0;
    row >> dtype >> threads >> size >> ms >> gflops;
    EXPECT_EQ(dtype, "fp32");
    EXPECT_EQ(threads, 1);
    EXPECT_EQ(size, n);
    ASSERT_GT(ms, 0) << line;
    // Both columns are printed rounded (3 and 2 decimals): agree to 1% when ms is not tiny.
    if (ms > 1) {
      EXPECT_NEAR(gflops, 2.0 * n * n * n / (ms * 1e-3) / 1e9, 0.01 * gflops) << line;
    }
  }
}

TEST_F(Cli, AKilledWorkerStopsEveryRankWithinTheTimeout) {
  if (!have_gloo()) GTEST_SKIP() << "built without Gloo";
  const auto err = dir_ / "kill.err";
  const std::string cmd = std::string(PARITY_BIN) + " " +
                          "train --trainer pipelined --flavor tiny --steps 500 --seq-len 32 "
                          "--quiet --pp 4 --vp 2 --nproc 4 --backend gloo --timeout-s 10 "
                          "--dump-steps 1 --dump " + (dir_ / "d").string() + " 2>" + err.string() +
                          " & L=$!; for i in $(seq 300); do ls " + (dir_ / "d").string() +
                          "/rank0.h5.tmp.* >/dev/null 2>&1 && break; sleep 0.2; done; "
                          "kill -9 $(pgrep -P $L | sed -n 3p); "
                          "wait $L; rc=$?; echo \"rc=$rc\" >" +
                          (dir_ / "rc.txt").string() + "; pgrep -P $L >/dev/null && echo left >>" +
                          (dir_ / "rc.txt").string() + "; exit 0";
  ASSERT_EQ(std::system(("bash -c '" + cmd + "'").c_str()), 0);
  const auto rc = slurp(dir_ / "rc.txt");
  EXPECT_EQ(rc.find("rc=0"), std::string::npos) << rc;
  EXPECT_EQ(rc.find("left"), std::string::npos) << rc;
  const auto text = slurp(err);
  EXPECT_NE(text.find("worker rank 2 was killed by signal 9"), std::string::npos) << text;
  // Each surviving rank stopped by itself, within its own --timeout-s, and says who it is, what
  // it waited for and from whom: one line each. (A rank the launcher had to stop after the
  // grace period would print no such line.)
  for (int r : {0, 1, 3}) {
    const auto at = text.find("parity: rank " + std::to_string(r) + ": ");
    ASSERT_NE(at, std::string::npos) << "rank " << r << " did not report itself:\n" << text;
    const auto line = text.substr(at, text.find('\n', at) - at);
    EXPECT_TRUE(line.find(" from rank ") != std::string::npos ||
                line.find(" to rank ") != std::string::npos)
        << line;
  }
  // What rank 0 dumped before the failure is kept, marked incomplete.
  EXPECT_TRUE(fs::exists(dir_ / "d" / "rank0.h5")) << text;
}

TEST_F(Cli, MultiProcessBadInputIsOneLine) {
  const std::string cell = "train --trainer pipelined --flavor tiny --steps 1 --seq-len 16 --quiet "
                           "--pp 2 --vp 2 ";
  expect_one_line_error(run(cell + "--nproc 2 --backend nccl"), "backend 'nccl' is not built");
  if (!have_gloo()) return;
  expect_one_line_error(run(cell + "--nproc 3"), "--nproc 3 is not dp x pp");
  expect_one_line_error(
      run(cell + "--backend gloo", "RANK=0 WORLD_SIZE=3 MASTER_PORT=" + std::to_string(free_port())),
      "WORLD_SIZE 3 is not dp x pp");
  // A port someone else holds.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::listen(fd, 1);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  expect_one_line_error(run(cell + "--backend gloo --timeout-s 5",
                            "RANK=0 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port)),
                        "the port is in use");
  ::close(fd);
}

}  // namespace
