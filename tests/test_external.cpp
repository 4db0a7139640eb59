// Reading users' runs (dumps/external.h): a file's kind from its content, HDF5 files of any
// layout, directories merged by name, the name map, and the refusals. The torch.save and
// safetensors readers have suites of their own (test_torch_save, test_safetensors).
// Exact checks only.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "dumps/external.h"
#include "dumps/h5.h"

namespace fs = std::filesystem;

namespace parity::dumps {
namespace {

class External : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-external-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  // An HDF5 file of fp32 datasets at the given paths, each [2] = {v, v + 1}.
  std::string h5_file(const std::string& name, const std::vector<std::string>& paths) {
    const auto p = (dir_ / name).string();
    auto f = h5::File::create(p);
    float v = 1;
    for (const auto& path : paths) {
      const float data[2] = {v, v + 1};
      h5::write(f, path, h5::DType::F32, {2}, data);
      v += 2;
    }
    f.commit();
    return p;
  }

  fs::path dir_;
};

TEST_F(External, KindComesFromTheContentNotTheNameExact) {
  EXPECT_EQ(detect_kind(h5_file("a.pt", {"/w"})), FileKind::Hdf5);
  EXPECT_EQ(detect_kind(write("b.h5", std::string("PK\x03\x04rest", 8))), FileKind::TorchSave);
  std::string st(8, '\0');
  st[0] = 2;
  EXPECT_EQ(detect_kind(write("c.bin", st + "{}")), FileKind::Safetensors);
  EXPECT_EQ(detect_kind(write("d.safetensors", "hello, world")), FileKind::Unknown);
  EXPECT_EQ(detect_kind(write("e", "")), FileKind::Unknown);
  // A legacy torch.save is a bare pickle: its reader refuses it by name.
  EXPECT_EQ(detect_kind(write("f.pt", std::string("\x80\x02\x8a\x0a", 4))), FileKind::TorchSave);
}

// An h5py-style file: groups name the tensors' kinds ("grads/", "params/"), nesting deeper
// keeps the path as the name, and a top-level dataset is a parameter.
TEST_F(External, Hdf5OfAnyLayoutGroupsByTheFirstComponentExact) {
  const auto f = h5_file("run.h5", {"/grads/layers.0.w", "/params/layers.0.w", "/top",
                                    "/params/deep/er"});
  const Dump d = read_run(f);
  ASSERT_EQ(d.steps.size(), 1u);
  const auto& s = d.steps.at(1);
  EXPECT_EQ(s.grads.size(), 1u);
  EXPECT_TRUE(s.grads.count("layers.0.w"));
  EXPECT_TRUE(s.params.count("layers.0.w"));
  EXPECT_TRUE(s.params.count("top"));
  EXPECT_TRUE(s.params.count("deep/er"));
  EXPECT_EQ(d.meta.at("kind"), "HDF5");
  EXPECT_FALSE(is_parity_dump(d));
  float v[2];
  std::memcpy(v, s.grads.at("layers.0.w").bytes.data(), 8);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  // Another step number when the file stands for another step.
  EXPECT_EQ(read_run(f, {}, 7).steps.count(7), 1u);
}

TEST_F(External, ADirectoryMergesByNameAndRefusesTwoHoldersExact) {
  fs::create_directories(dir_ / "run");
  h5_file("run/rank0.h5", {"/grads/a", "/params/a"});
  h5_file("run/rank1.h5", {"/grads/b", "/params/b"});
  const Dump d = read_run((dir_ / "run").string());
  EXPECT_EQ(d.steps.at(1).grads.size(), 2u);
  EXPECT_EQ(d.steps.at(1).params.size(), 2u);

  h5_file("run/rank2.h5", {"/grads/a"});
  try {
    read_run((dir_ / "run").string());
    FAIL() << "two files holding grads/a were merged";
  } catch (const DumpError& e) {
    EXPECT_NE(std::string(e.what()).find("both hold grads/a"), std::string::npos) << e.what();
  }
}

TEST_F(External, UnknownFilesAndMissingPathsAreRefusedNamingThem) {
  const auto bad = write("notes.txt", "just text");
  for (const auto& path : {bad, (dir_ / "missing.pt").string()}) {
    try {
      read_run(path);
      FAIL() << path << " was read";
    } catch (const DumpError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  fs::create_directories(dir_ / "mixed");
  h5_file("mixed/rank0.h5", {"/grads/a"});
  write("mixed/README", "about this run");
  try {
    read_run((dir_ / "mixed").string());
    FAIL() << "a directory with a stray file was read";
  } catch (const DumpError& e) {
    EXPECT_NE(std::string(e.what()).find("README"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("keep only the run's files"), std::string::npos);
  }
}

// A named pipe blocked the reader for ever (opening it waits for a writer); it is refused
// before it is opened, naming the path. (With the defect this test hangs: ctest's timeout.)
TEST_F(External, ANamedPipeIsRefusedBeforeItIsOpened) {
  const std::string fifo = (dir_ / "pipe.pt").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_run(fifo);
    FAIL() << "the pipe was read";
  } catch (const DumpError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'" + fifo + "' is not a regular file"), std::string::npos) << m;
  }
}

// 25 levels of groups, each holding two hard links to the next, make 2^25 paths to one dataset
// in a file of a few KB: the walk, which bounded depth but not visits, took hours. A group
// reached a second time is now refused at once, naming both paths.
TEST_F(External, HardLinkedGroupsAreRefusedNotWalkedExponentially) {
  const std::string path = (dir_ / "links.h5").string();
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::string below = "/g25";
  ASSERT_GE(H5Gclose(H5Gcreate2(f, below.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), 0);
  const hsize_t dims[1] = {2};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t d = H5Dcreate2(f, "/g25/x", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Sclose(space);
  for (int level = 24; level >= 0; --level) {
    const std::string g = "/g" + std::to_string(level);
    ASSERT_GE(H5Gclose(H5Gcreate2(f, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), 0);
    for (const char* name : {"/a", "/b"})
      ASSERT_GE(H5Lcreate_hard(f, below.c_str(), f, (g + name).c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Ldelete(f, below.c_str(), H5P_DEFAULT), 0);  // reachable only through g/a, g/b
    below = g;
  }
  H5Fclose(f);
  try {
    read_run(path);
    FAIL() << "2^25 paths were walked";
  } catch (const DumpError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("again (hard links)"), std::string::npos) << m;
    // Depth first: the first group met twice is the last level's, through b after a.
    std::string a24 = "/g0";
    for (int i = 0; i < 24; ++i) a24 += "/a";
    EXPECT_NE(m.find("group '" + a24 + "/b' is group '" + a24 + "/a' again"), std::string::npos) << m;
  }
}

// --map: exact names first, then prefix rules in file order; comments and blank lines ignored.
TEST_F(External, NameMapRenamesExactlyThenByPrefixExact) {
  const auto path = write("map.txt",
                          "# torchtitan names for a run saved from another model\n"
                          "\n"
                          "model.embed.weight tok_embeddings.weight  # the embedding\n"
                          "model.layers.* layers.*\n"
                          "model.* *\n");
  const auto m = read_name_map(path);
  EXPECT_EQ(m.apply("model.embed.weight"), "tok_embeddings.weight");
  EXPECT_EQ(m.apply("model.layers.3.attn.w"), "layers.3.attn.w");
  EXPECT_EQ(m.apply("model.norm.weight"), "norm.weight");
  EXPECT_EQ(m.apply("lm_head.weight"), "lm_head.weight");

  const auto f = h5_file("run.h5", {"/grads/model.layers.0.w", "/params/model.layers.0.w"});
  const Dump d = read_run(f, m);
  EXPECT_TRUE(d.steps.at(1).grads.count("layers.0.w"));
  EXPECT_EQ(d.steps.at(1).fqns, std::vector<std::string>{"layers.0.w"});
}

TEST_F(External, NameMapRefusesMalformedLinesNamingTheLine) {
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"a\n", "line 1: want two names"}, Bad{"a b c\n", "line 1: want two"},
                       Bad{"x y\nx z\n", "line 2: 'x' is mapped twice"},
                       Bad{"a* b\n", "line 1: a prefix rule ends both names with '*'"},
                       Bad{"# nothing\n", "holds no rule"}}) {
    try {
      read_name_map(write("m.txt", b.text));
      ADD_FAILURE() << b.text << " was accepted";
    } catch (const DumpError& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace parity::dumps
