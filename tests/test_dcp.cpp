// Tests for read_dcp (dumps/dcp.h) against DCP checkpoints whose chunks the real torch.save
// wrote and whose metadata is the real pickle of classes named as torch's
// (tests/py/dcp_fixtures.py under PARITY_PYTHON): names, dtypes, shapes and bytes bit for bit,
// whole and sharded tensors; one row per damaged checkpoint, each refused with one line that
// says what is wrong; and in-process fuzzing of the metadata, which must be read or refused with
// a DumpError, never crash or throw anything else.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dumps/dcp.h"
#include "dumps/dump.h"
#include "dumps/external.h"
#include "tests/py_fixtures.h"

namespace fs = std::filesystem;
using parity::dumps::DumpError;
using parity::dumps::read_dcp;
using parity::testing::contains_text;
using parity::testing::slurp_file;
namespace h5 = parity::h5;

namespace {

const parity::testing::PyFixtures& fixtures() {
  static const parity::testing::PyFixtures f("dcp_fixtures.py", "dcp_fixtures",
                                              {"dcp_writer.py", "tensor_bits.py"});
  return f;
}

class Dcp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fixtures().skip.empty()) GTEST_SKIP() << fixtures().skip;
    ASSERT_TRUE(fixtures().error.empty()) << fixtures().error;
  }
  static std::string dir_of(const std::string& group, const std::string& c) {
    return (fixtures().dir / fixtures().manifest[group][c]["dir"].get<std::string>()).string();
  }
};

// Each valid case: the metadata's tensors in its order, with torch's dtypes, shapes and bytes.
TEST_F(Dcp, WholeAndShardedCheckpointsMatchTorchBitwise) {
  const auto& valid = fixtures().manifest["valid"];
  ASSERT_EQ(valid.size(), 2u);
  for (const auto& [name, spec] : valid.items()) {
    SCOPED_TRACE(name);
    const std::string bin = slurp_file(fixtures().dir / (name + ".bin"));
    const auto got = read_dcp(dir_of("valid", name));
    ASSERT_EQ(got.size(), spec["tensors"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& want = spec["tensors"][i];
      SCOPED_TRACE(want["name"].get<std::string>());
      EXPECT_EQ(got[i].name, want["name"].get<std::string>());
      EXPECT_STREQ(h5::dtype_name(got[i].array.dtype), want["dtype"].get<std::string>().c_str());
      EXPECT_EQ(got[i].array.shape, want["shape"].get<std::vector<int64_t>>());
      const size_t offset = want["offset"], nbytes = want["nbytes"];
      ASSERT_EQ(got[i].array.bytes.size(), nbytes);
      EXPECT_EQ(std::string(got[i].array.bytes.begin(), got[i].array.bytes.end()),
                bin.substr(offset, nbytes));
    }
  }
}

// The sharded case really is sharded: its first tensor's chunks are in both data files.
TEST_F(Dcp, TheShardedCaseSpreadsItsChunksOverTwoDataFiles) {
  const fs::path d = dir_of("valid", "sharded");
  for (const char* f : {"__0_0.distcp", "__1_0.distcp"}) {
    ASSERT_TRUE(fs::exists(d / f)) << f;
    EXPECT_GT(fs::file_size(d / f), 0u) << f;
  }
}

// `compare` and `init --from` reach the reader through read_tensor_file and read_run.
TEST_F(Dcp, TheFileReadersTakeADcpDirectory) {
  const std::string d = dir_of("valid", "whole");
  EXPECT_TRUE(parity::dumps::is_dcp_dir(d));
  EXPECT_EQ(parity::dumps::read_tensor_file(d).size(), 5u);
  const auto run = parity::dumps::read_run(d);
  EXPECT_EQ(run.meta.at("kind"), "DCP");
  EXPECT_EQ(run.steps.at(1).params.count("model.tok_embeddings.weight"), 1u);
}

// Each damaged checkpoint: a DumpError of one line holding the phrase the fixture names.
TEST_F(Dcp, EveryDamagedCheckpointIsRefusedInOneLineSayingWhy) {
  const auto& refused = fixtures().manifest["refused"];
  ASSERT_GE(refused.size(), 10u);
  for (const auto& [name, spec] : refused.items()) {
    SCOPED_TRACE(name);
    const std::string says = spec["says"];
    try {
      read_dcp(dir_of("refused", name));
      ADD_FAILURE() << "read, not refused";
    } catch (const DumpError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(contains_text(m, says)) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

// Mutated metadata and data files, with a fixed seed: every outcome is a read (of the right
// tensor count) or a DumpError; a crash, a hang or another exception fails the suite.
TEST_F(Dcp, MutatedCheckpointsAreReadOrRefusedNeverCrash) {
  const fs::path src = dir_of("valid", "sharded");
  const fs::path work = fs::temp_directory_path() / ("parity-dcp-fuzz-" + std::to_string(::getpid()));
  std::mt19937_64 rng(1234);
  int read_ok = 0, refused = 0;
  for (int round = 0; round < 300; ++round) {
    fs::remove_all(work);
    fs::copy(src, work);
    const char* victim = round % 3 == 0 ? ".metadata" : round % 3 == 1 ? "__0_0.distcp" : "__1_0.distcp";
    std::string bytes = slurp_file(work / victim);
    ASSERT_FALSE(bytes.empty());
    if (round % 5 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      const int n = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < n; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::ofstream(work / victim, std::ios::binary | std::ios::trunc) << bytes;
    try {
      const auto got = read_dcp(work.string());
      EXPECT_EQ(got.size(), 3u);
      ++read_ok;
    } catch (const DumpError&) {
      ++refused;
    }
  }
  fs::remove_all(work);
  // Both outcomes occur: the mutations reach the checks (a truncated metadata is always refused)
  // and some leave a readable checkpoint (a flipped byte inside a tensor's data).
  EXPECT_GT(refused, 0);
  EXPECT_GT(read_ok, 0);
}

}  // namespace
