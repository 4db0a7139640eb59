// results.json (reports/results.h): the round trip keeps every field, and an empty, wrong or
// malformed directory is refused naming the file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "reports/render.h"
#include "reports/results.h"
#include "tests/report_fixtures.h"
#include "tests/temp_dir.h"

namespace rp = parity::reports;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace parity::testing;

namespace {

using Results = TempDirTest;

TEST_F(Results, RoundTripKeepsEveryFieldAndWritesInfiniteUlpsAsInf) {
  auto r = rendered();
  auto& c = cell_of(r, "cached");
  c.step1.have = true;
  c.step1.tensors = 3;
  c.step1.wrong_tensors = 2;
  c.step1.max_ulp = rp::kUlpInfinite;
  c.step1.grad_ulps = {0, 37, rp::kUlpInfinite};
  c.step1.scalars_equal = false;
  c.verdicts.why_not = "";
  c.verdicts.first_wrong = "grads/w: why";
  c.verdicts.divergence = "step 1, micro-batch 0";
  c.cell.inject = {"drop-deposit:block=1,stage=3"};
  c.cell.seed = 18446744073709551615ull;  // the largest seed survives too
  c.layout = json{{"pp", 2}, {"vp", 2}};
  c.tokens_per_step = 1024;
  c.bytes_forward_per_mb = 7168;
  c.wall_seconds = 3.25;
  c.log = "cells/cached/log.txt";
  rp::write_results(dir_.string(), r);

  // In the file: the infinite ulps as the string "inf".
  std::ifstream in(dir_ / "results.json");
  const json file = json::parse(in);
  const auto& jc = file["cells"][2];
  EXPECT_EQ(jc["cell"]["name"], "cached");
  EXPECT_EQ(jc["step1"]["max_ulp"], "inf");
  EXPECT_EQ(jc["step1"]["grad_ulps"], json({0, 37, "inf"}));
  EXPECT_FALSE(fs::exists(dir_ / "results.json.tmp"));

  const auto back = rp::read_results(dir_.string());
  EXPECT_EQ(rp::to_json(back), rp::to_json(r));
  const auto* bc = back.find("cached");
  ASSERT_NE(bc, nullptr);
  EXPECT_EQ(bc->step1.max_ulp, rp::kUlpInfinite);
  EXPECT_EQ(bc->step1.grad_ulps, (std::vector<uint64_t>{0, 37, rp::kUlpInfinite}));
  EXPECT_EQ(bc->cell.gate, rp::Gate::OrderOnly);
  EXPECT_EQ(bc->cell.seed, 18446744073709551615ull);
  EXPECT_EQ(bc->cell.inject, std::vector<std::string>{"drop-deposit:block=1,stage=3"});
  EXPECT_EQ(bc->steps.size(), 100u);
  EXPECT_EQ(bc->steps[99].loss, 7.5);
  EXPECT_EQ(bc->steps[1].loss, 9.0 - 2 / 64.0 + 0.0625);
  EXPECT_EQ(bc->steps[99].loss_hex, hex(7.5));
  EXPECT_EQ(bc->steps[99].grad_norm, 1.53);  // bit for bit through JSON
  const auto* bb = back.find("broken");
  ASSERT_NE(bb, nullptr);
  EXPECT_EQ(bb->status, "failed");
  EXPECT_EQ(bb->error, kBrokenError);
  EXPECT_FALSE(bb->gate.passed);
  EXPECT_EQ(back.report_steps, (std::vector<int64_t>{1, 10, 50, 100}));
  EXPECT_EQ(back.git_sha, "0123456789abcdef");
  EXPECT_EQ(back.wall_seconds, 12.5);
  // The renderings of the two agree.
  EXPECT_EQ(rp::render_markdown(back), rp::render_markdown(r));
}

TEST_F(Results, AnEmptyDirectoryNamesIt) {
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for an empty directory";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), dir_.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "results.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "parity matrix run")) << e.what();  // the remedy
  }
}

TEST_F(Results, ANonDirectoryNamesIt) {
  const auto file = dir_ / "plain.txt";
  std::ofstream(file) << "hello\n";
  for (const auto& p : {file, dir_ / "absent"}) {
    try {
      rp::read_results(p.string());
      ADD_FAILURE() << "no error for " << p;
    } catch (const rp::MatrixError& e) {
      EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
      EXPECT_TRUE(contains(e.what(), "not a directory")) << e.what();
    }
  }
}

TEST_F(Results, MalformedFilesNameTheFile) {
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"parity.matrix_result\", \"cells\": 3";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for truncated JSON";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), (dir_ / "results.json").string())) << e.what();
  }
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"something.else\"}";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for another schema";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), "results.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "something.else")) << e.what();
  }
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"parity.matrix_result\"}";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for a result without fields";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), "malformed")) << e.what();
  }
}

}  // namespace
