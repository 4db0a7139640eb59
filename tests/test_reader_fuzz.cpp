// The reader fuzz suite: for every file format parity reads, hostile variants of a valid file
// (tests/py/reader_fuzz_cases.py writes them and the command that reads each), every one read
// by the `parity` binary in its own process, under a 4 GiB address-space cap and a 20 s limit.
// Whatever a file holds, the run must
//   * exit 0, 1 or 2, never die of a signal, never time out, never report a failed allocation;
//   * on a refusal (exit 2), say so in exactly one line on stderr, "parity: ...";
//   * change none of its inputs, write nothing when it does not succeed, and leave no
//     temporary file, nothing in TMPDIR and no process behind (tests/sandbox.h).
// The valid file of each format (the case "seed") must be read and exit 0, so that the
// variants are known to reach the reader's inner layers, not only its first check.
//
// One test per format, so that ctest runs them side by side; a format whose writer module
// (torch, h5py, numpy) cannot be imported skips itself and says which.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/sandbox.h"

namespace {

namespace fs = std::filesystem;
using parity::testing::joined;
using parity::testing::read_file;
using parity::testing::RunResult;
using parity::testing::Sandbox;

constexpr double kTimeLimitS = 20;
constexpr uint64_t kAddressSpace = uint64_t{4} << 30;

const std::vector<std::string> kFormats = {
    "torch-zip", "pickle", "safetensors", "hdf5", "dcp", "torchtitan", "megatron",
    "golden", "loss-file", "metrics", "npy", "bin", "toml"};

struct Case {
  std::string name;
  std::vector<std::string> args;
};

std::vector<Case> read_cases(const fs::path& manifest) {
  std::vector<Case> cases;
  std::ifstream in(manifest);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    std::string f;
    while (std::getline(ss, f, '\t')) fields.push_back(f);
    if (fields.size() < 2) throw std::runtime_error("bad manifest line: " + line);
    cases.push_back({fields[0], {fields.begin() + 1, fields.end()}});
  }
  return cases;
}

size_t lines_in(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// Whether the run changed, removed or (unless it succeeded) added anything in its directory.
std::string forbidden_changes(const std::string& changes, bool succeeded) {
  if (!succeeded) return changes;
  std::string out;
  std::stringstream ss(changes);
  std::string line;
  while (std::getline(ss, line))
    if (line.rfind("  new: ", 0) != 0) out += line + "\n";
  return out;
}

class ReaderFuzz : public ::testing::TestWithParam<std::string> {};

TEST_P(ReaderFuzz, EveryVariantEndsInZeroOneOrTwoAndLeavesNothing) {
  const std::string format = GetParam();
  const fs::path corpus = fs::path(PARITY_FIXTURE_DIR) / "reader-fuzz" / format;
  fs::remove_all(corpus);
  fs::create_directories(corpus);
  const fs::path log = corpus.parent_path() / (format + ".gen.txt");
  const std::string gen = std::string(PARITY_PYTHON) + " " + PARITY_SOURCE_DIR +
                          "/tests/py/reader_fuzz_cases.py " + format + " " + corpus.string() +
                          " 2>" + log.string();
  const int rc = std::system(gen.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << read_file(log);
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << gen << "\n" << read_file(log);
  const auto cases = read_cases(corpus / "cases.tsv");
  ASSERT_GE(cases.size(), 20u) << "too few cases for " << format;

  std::map<int, int> by_code;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& c : cases) {
    Sandbox box(c.name, corpus);
    const RunResult r = box.run(c.args, {}, kTimeLimitS, {}, kAddressSpace);
    SCOPED_TRACE(format + "/" + c.name + ": parity " + joined(c.args) + " -> " + r.how());
    EXPECT_FALSE(r.timed_out) << r.err;
    EXPECT_FALSE(r.signalled()) << r.err;
    EXPECT_TRUE(r.exited() && r.code() >= 0 && r.code() <= 2) << r.err;
    ++by_code[r.code()];
    for (const char* sign : {"bad_alloc", "terminate called", "outlived it", "Segmentation"})
      EXPECT_EQ(r.err.find(sign), std::string::npos) << r.err;
    if (r.code() == 2) {
      EXPECT_EQ(lines_in(r.err), 1u) << r.err;
      EXPECT_EQ(r.err.rfind("parity: ", 0), 0u) << r.err;
    }
    if (c.name == "seed") {
      EXPECT_EQ(r.code(), 0) << "the valid file must be read\n" << r.err;
    }
    EXPECT_EQ(forbidden_changes(box.changes(), r.code() == 0), "");
    EXPECT_EQ(box.temporaries_left(), "");
    EXPECT_EQ(box.left_in_tmp(), "");
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("reader fuzz %s: %zu runs in %.1f s; exit 0: %d, exit 1: %d, exit 2: %d\n",
              format.c_str(), cases.size(), s, by_code[0], by_code[1], by_code[2]);
}

INSTANTIATE_TEST_SUITE_P(Formats, ReaderFuzz, ::testing::ValuesIn(kFormats),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
