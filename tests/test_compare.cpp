// The comparison engine's first layer: element comparison in each dtype, dumps written and
// read back (merged by FQN), and the reader's refusals. Bitwise facts only; no tolerances.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "dumps/dump.h"
#include "compare/dump_compare.h"
#include "dumps/h5.h"
#include "compare/tensor_compare.h"
#include "compare/truth.h"

namespace fs = std::filesystem;

namespace parity::compare {
using namespace dumps;  // the dumps these tests write and read
namespace {

h5::Array f32_array(const std::vector<float>& v) {
  h5::Array a;
  a.dtype = h5::DType::F32;
  a.shape = {static_cast<int64_t>(v.size())};
  a.bytes.resize(v.size() * 4);
  std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

TEST(UlpDistance, AdjacentValuesAreOneUlpApartInEachDtype) {
  const float x = 1.0f;
  EXPECT_EQ(ulp_distance_f32(x, std::nextafter(x, 2.0f)), 1u);
  EXPECT_EQ(ulp_distance_f32(-x, std::nextafter(-x, -2.0f)), 1u);
  // Across zero: the smallest positive and negative denormals are 2 ulps apart (via +-0).
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ulp_distance_f32(tiny, -tiny), 2u);
  EXPECT_EQ(ulp_distance_f32(0.0f, -0.0f), 0u);
  const double y = 3.0;
  EXPECT_EQ(ulp_distance_f64(y, std::nextafter(y, 4.0)), 1u);
  EXPECT_EQ(ulp_distance_f64(-std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::max()),
            2 * ((uint64_t{0x7fe} << 52) | 0xfffffffffffffULL));
  // bf16 1.0 = 0x3f80, the next value 0x3f81.
  EXPECT_EQ(ulp_distance_bf16(0x3f80, 0x3f81), 1u);
  EXPECT_EQ(ulp_distance_bf16(0x3f80, 0xbf80), 2u * 0x3f80);
}

TEST(CompareArrays, CountsWrongElementsAndLocatesTheLargest) {
  const float one_up = std::nextafter(1.0f, 2.0f);
  auto a = f32_array({1.0f, 2.0f, 3.0f, 4.0f});
  auto b = f32_array({1.0f, 2.5f, 3.0f, one_up == 4.0f ? 4.0f : std::nextafter(4.0f, 5.0f)});
  auto d = compare_arrays("t", a, b);
  EXPECT_FALSE(d.bitwise);
  EXPECT_EQ(d.wrong, 2);
  EXPECT_EQ(d.first_diff, 1);
  EXPECT_EQ(d.max_abs_index, 1);
  EXPECT_EQ(d.max_abs_a, 2.0);
  EXPECT_EQ(d.max_abs_b, 2.5);
  // 2.0 -> 2.5 in fp32 is 0.5 / 2^-22 = 2^21 ulps.
  EXPECT_EQ(d.max_ulp, uint64_t{1} << 21);
  // NMSE = sum (a-b)^2 / sum b^2 = (0.25 + u4^2) / (1 + 6.25 + 9 + (4 + u4)^2)
  const double u4 = std::nextafter(4.0f, 5.0f) - 4.0f;
  // Every operand is exact in fp64 (u4 = 2^-21), so the quotient is one correctly rounded
  // division on both sides: equal bits.
  EXPECT_EQ(d.nmse, (0.25 + u4 * u4) / (1 + 6.25 + 9 + (4 + u4) * (4 + u4)));
  auto same = compare_arrays("t", a, a);
  EXPECT_TRUE(same.bitwise);
  EXPECT_EQ(same.wrong, 0);
  EXPECT_EQ(same.first_diff, -1);
}

TEST(CompareArrays, NanAndInfAreHandledFirstAndSignedZeroIsNotBitwise) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto d = compare_arrays("t", f32_array({nan, 1.0f, inf, 0.0f}), f32_array({1.0f, 1.0f, -inf, -0.0f}));
  EXPECT_EQ(d.nan_a, 1);
  EXPECT_EQ(d.inf_a, 1);
  EXPECT_EQ(d.inf_b, 1);
  EXPECT_EQ(d.nan_mismatch, 2);  // NaN vs 1, +inf vs -inf
  EXPECT_EQ(d.max_ulp, kInfiniteUlp);
  EXPECT_EQ(d.signed_zero_diff, 1);
  EXPECT_EQ(d.wrong, 3);
  // Two NaNs: not bitwise when payloads differ, but not a NaN mismatch either.
  uint32_t bits = 0x7fc00001;
  float nan2;
  std::memcpy(&nan2, &bits, 4);
  auto n = compare_arrays("t", f32_array({nan}), f32_array({nan2}));
  EXPECT_EQ(n.nan_mismatch, 0);
  EXPECT_FALSE(n.bitwise);
}

TEST(CompareArrays, IdenticalBuffersStillCountNanAndInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto a = f32_array({nan, -inf, 0.0f, -0.0f});
  auto d = compare_arrays("t", a, a);
  EXPECT_TRUE(d.bitwise);
  EXPECT_EQ(d.nan_a, 1);
  EXPECT_EQ(d.nan_b, 1);
  EXPECT_EQ(d.inf_a, 1);
  EXPECT_FALSE(d.all_zero);
  EXPECT_TRUE(compare_arrays("z", f32_array({0.0f, -0.0f}), f32_array({0.0f, -0.0f})).all_zero);
}

// A NaN or Inf never agrees, under any tolerance, even bit for bit against itself; only
// allow_nonfinite lets the bitwise-equal specials through (and a finite tensor is unaffected).
TEST(CompareArrays, NonFiniteNeverAgreesUnderAnyToleranceUnlessAllowed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& values : {std::vector<float>{1.0f, nan}, std::vector<float>{inf, 2.0f}}) {
    const auto a = f32_array(values);
    const auto d = compare_arrays("t", a, a);
    ASSERT_TRUE(d.bitwise);
    EXPECT_EQ(d.nonfinite(), 2);  // one special, counted on each side
    for (auto kind : {Tolerance::Bitwise, Tolerance::Ulp, Tolerance::Torch}) {
      EXPECT_FALSE(within(d, Tolerance{kind, 1000}));
      EXPECT_EQ(within(d, Tolerance{kind, 1000, /*allow_nonfinite=*/true}),
                kind != Tolerance::Torch || values[0] == inf)  // torch: NaN fails assert_close
          << to_string(Tolerance{kind, 1000});
    }
  }
  const auto fin = f32_array({1.0f, 2.0f});
  EXPECT_TRUE(within(compare_arrays("f", fin, fin), Tolerance{}));
}

TEST(CompareArrays, AllZeroIsReported) {
  EXPECT_TRUE(compare_arrays("z", f32_array({0, 0}), f32_array({0, 0})).all_zero);
  EXPECT_FALSE(compare_arrays("z", f32_array({0, 1}), f32_array({0, 1})).all_zero);
}

TEST(CompareArrays, DtypeAndShapeMismatchesAreProblems) {
  auto a = f32_array({1, 2});
  auto b = f32_array({1, 2, 3});
  EXPECT_FALSE(compare_arrays("t", a, b).problem.empty());
  h5::Array c = a;
  c.dtype = h5::DType::I32;
  EXPECT_FALSE(compare_arrays("t", a, c).problem.empty());
}

h5::Array f64_array(const std::vector<double>& v) {
  h5::Array a;
  a.dtype = h5::DType::F64;
  a.shape = {static_cast<int64_t>(v.size())};
  a.bytes.resize(v.size() * 8);
  std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

TEST(Truth, ErrorIsCountedInTheRunsOwnUlpsFromTheRoundedTruth) {
  const std::vector<double> t{1.0, 1.0 / 3.0, -2.5};
  auto truth = f64_array(t);
  std::vector<float> exact{1.0f, static_cast<float>(1.0 / 3.0), -2.5f};
  auto e0 = error_vs_truth("x", f32_array(exact), truth);
  EXPECT_TRUE(e0.problem.empty());
  EXPECT_EQ(e0.max_ulp, 0u);
  exact[1] = std::nextafter(exact[1], 1.0f);
  auto e1 = error_vs_truth("x", f32_array(exact), truth);
  EXPECT_EQ(e1.max_ulp, 1u);
  EXPECT_EQ(e1.mean_ulp, 1.0 / 3.0);  // (0 + 1 + 0) / 3: one rounded division
  // bf16: 1.0 is 0x3f80; one bf16 ulp above is 0x3f81.
  h5::Array b;
  b.dtype = h5::DType::BF16;
  b.shape = {1};
  const uint16_t above = 0x3f81;
  b.bytes.resize(2);
  std::memcpy(b.bytes.data(), &above, 2);
  EXPECT_EQ(error_vs_truth("x", b, f64_array({1.0})).max_ulp, 1u);
  EXPECT_FALSE(error_vs_truth("x", f32_array({1.0f}), f32_array({1.0f})).problem.empty());
}

// ---- dumps ----

class DumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-dump-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  kernels::RunInfo info() const {
    kernels::RunInfo i;
    i.trainer = "reference";
    i.flavor = "tiny";
    i.precision = "fp32";
    i.fqns = {"a.weight", "b.weight"};
    return i;
  }

  // Two steps through the observer interface, tensors dumped at the given steps.
  void write_run(const fs::path& dir, std::set<int64_t> steps, bool finish = true,
                 float nan_at = 0) {
    DumpWriter w(dir.string(), std::move(steps), "testsha");
    w.on_start(info());
    for (int64_t s = 1; s <= 2; ++s) {
      kernels::StepRecord r;
      r.step = s;
      r.loss = torch::tensor(8.0f - s);
      r.grad_norm = torch::tensor(1.5f);
      r.mb_losses = {torch::tensor(2.0f), torch::tensor(2.0f)};
      std::vector<at::Tensor> grads{torch::full({2, 3}, 0.25f * s), torch::arange(4).to(at::kFloat)};
      if (nan_at != 0) grads[1][1] = std::numeric_limits<float>::quiet_NaN();
      std::vector<at::Tensor> params{torch::ones({2, 3}), torch::zeros({4})};
      if (w.wants_tensors(s)) {
        r.grads = &grads;
        r.params = &params;
      }
      w.on_step(r);
    }
    if (finish) w.on_end();
  }

  fs::path dir_;
};

TEST_F(DumpTest, RoundTripKeepsEveryBitAndTheFqnOrder) {
  write_run(dir_, {1, 2});
  auto d = read_dump(dir_.string());
  EXPECT_EQ(d.meta.at("flavor"), "tiny");
  EXPECT_EQ(d.losses, (std::vector<double>{7.0, 6.0}));
  ASSERT_EQ(d.steps.size(), 2u);
  const auto& s2 = d.steps.at(2);
  EXPECT_EQ(s2.fqns, (std::vector<std::string>{"a.weight", "b.weight"}));
  const auto& g = s2.grads.at("a.weight");
  EXPECT_EQ(g.shape, (std::vector<int64_t>{2, 3}));
  float v;
  std::memcpy(&v, g.bytes.data(), 4);
  EXPECT_EQ(v, 0.5f);
  EXPECT_EQ(s2.scalars.at("mb_losses").shape, (std::vector<int64_t>{2}));
}

TEST_F(DumpTest, AFailedRunKeepsWhatItDumpedMarkedIncomplete) {
  write_run(dir_, {1}, /*finish=*/false);  // the writer is destroyed without on_end
  auto f = h5::File::open_read((dir_ / "rank0.h5").string());
  EXPECT_EQ(h5::attr_int(f, "/meta", "complete"), 0);
  EXPECT_TRUE(h5::exists(f, "/step_000001/grads/a.weight"));
}

TEST_F(DumpTest, RefusesMissingTruncatedForeignAndFutureFiles) {
  EXPECT_THROW(read_dump((dir_ / "none").string()), DumpError);
  write_run(dir_, {1});
  const auto file = dir_ / "rank0.h5";
  // Truncated.
  const auto cut = dir_ / "cut.h5";
  fs::copy_file(file, cut);
  fs::resize_file(cut, fs::file_size(file) / 2);
  EXPECT_THROW(read_dump(cut.string()), DumpError);
  // Not a dump.
  {
    auto f = h5::File::create((dir_ / "other.h5").string());
    h5::create_group(f, "/meta");
    h5::set_attr(f, "/meta", "schema", "something-else");
    f.commit();
  }
  EXPECT_THROW(read_dump((dir_ / "other.h5").string()), DumpError);
  // Another schema version: the message says how to regenerate.
  {
    auto f = h5::File::create((dir_ / "v9.h5").string());
    h5::create_group(f, "/meta");
    h5::set_attr(f, "/meta", "schema", "parity-dump");
    h5::set_attr(f, "/meta", "schema_version", int64_t{9});
    f.commit();
  }
  try {
    read_dump((dir_ / "v9.h5").string());
    FAIL();
  } catch (const DumpError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 9"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("regenerate"), std::string::npos);
  }
}

// A step group whose name is not "step_" and a step number from 0 to 2^63 - 1 is refused,
// naming the group: 20 digits threw std::out_of_range past the reader's catch (exit 1, no
// file named), and "step_1x" read as step 1.
TEST_F(DumpTest, StepGroupsPast64BitsOrWithTrailingTextAreRefused) {
  write_run(dir_, {1});
  for (const char* name : {"step_99999999999999999999", "step_1x", "step_-1", "step_"}) {
    const auto file = dir_ / "renamed.h5";
    fs::remove(file);
    fs::copy_file(dir_ / "rank0.h5", file);
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lmove(f, "/step_000001", f, name, H5P_DEFAULT, H5P_DEFAULT), 0) << name;
    H5Fclose(f);
    try {
      read_dump(file.string());
      ADD_FAILURE() << name << " was read";
    } catch (const DumpError& e) {
      EXPECT_NE(std::string(e.what()).find("has a step group '" + std::string(name) + "' whose step"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(DumpTest, MutatedBytesNeverCrashTheReader) {
  write_run(dir_, {1, 2});
  const auto file = dir_ / "rank0.h5";
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 rng(1234);
  int refused = 0, read_ok = 0;
  for (int trial = 0; trial < 150; ++trial) {
    auto mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    // Odd trials aim at the first 4 KiB (superblock and headers), even ones anywhere.
    const size_t span = trial % 2 ? std::min<size_t>(mutated.size(), 4096) : mutated.size();
    for (int k = 0; k < flips; ++k) mutated[rng() % span] ^= static_cast<char>(1 + rng() % 255);
    const auto path = dir_ / "mutated.h5";
    std::ofstream(path, std::ios::binary).write(mutated.data(), static_cast<std::streamsize>(mutated.size()));
    try {
      const Dump d = read_dump(path.string());
      ++read_ok;  // a flip inside tensor data reads fine; compare would then report it
      // What reads is whole: every array holds numel x element size bytes.
      for (const auto& [s, st] : d.steps)
        for (const auto* m : {&st.scalars, &st.grads, &st.params, &st.buffers})
          for (const auto& [name, a] : *m)
            ASSERT_EQ(a.bytes.size(), static_cast<size_t>(a.numel()) * h5::dtype_size(a.dtype))
                << name;
    } catch (const DumpError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("mutated.h5"), std::string::npos) << e.what();
    }
  }
  std::printf("[ observed ] 150 mutants: %d read, %d refused\n", read_ok, refused);
  // Both outcomes happen: a reader that refuses every file, or one that checks nothing, fails.
  EXPECT_GT(read_ok, 0) << "no mutant was read: intact tensor data is refused";
  EXPECT_GT(refused, 0) << "no mutant was refused: the reader checks nothing";
}

// compare_dumps on dumps built in memory: what makes two dumps incomparable, and what a NaN
// in one gradient looks like.
Dump small_dump(const std::string& flavor, const std::string& fqns, std::vector<int64_t> steps,
                float g0 = 0.5f) {
  Dump d;
  d.source = flavor + "-dump";
  d.meta["flavor"] = flavor;
  d.meta["fqns"] = fqns;
  for (int64_t s : steps) {
    auto& st = d.steps[s];
    st.step = s;
    st.scalars["loss"] = f32_array({7.5f});
    std::stringstream names(fqns);
    std::string fqn;
    while (std::getline(names, fqn)) {
      st.fqns.push_back(fqn);
      st.grads[fqn] = f32_array({g0, 0.25f});
      st.params[fqn] = f32_array({1.0f, 2.0f});
    }
  }
  return d;
}

TEST(CompareDumps, RefusesOtherFlavorsFqnSetsAndSteps) {
  const auto a = small_dump("tiny", "a.weight\nb.weight", {1, 2});
  EXPECT_NO_THROW(compare_dumps(a, a));
  EXPECT_THROW(compare_dumps(a, small_dump("debugmodel", "a.weight\nb.weight", {1, 2})), DumpError);
  EXPECT_THROW(compare_dumps(a, small_dump("tiny", "a.weight", {1, 2})), DumpError);
  try {
    compare_dumps(a, small_dump("tiny", "a.weight\nb.weight", {1}));
    FAIL() << "missing step accepted";
  } catch (const DumpError& e) {
    EXPECT_NE(std::string(e.what()).find("different steps"), std::string::npos) << e.what();
  }
}

TEST(CompareDumps, RowsComeInAFixedOrderWhateverTheThreadCount) {
  const auto a = small_dump("tiny", "a.weight\nb.weight\nc.weight", {1, 2, 3});
  const auto b = small_dump("tiny", "a.weight\nb.weight\nc.weight", {1, 2, 3}, 0.75f);
  auto one = compare_dumps(a, b, 1);
  auto two = compare_dumps(a, b, 2);
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), 3u * (1 + 2 * 3));  // per step: loss, then grads and params of 3 tensors
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].step, two[i].step);
    EXPECT_EQ(one[i].diff.name, two[i].diff.name);
    EXPECT_EQ(one[i].diff.wrong, two[i].diff.wrong);
  }
  EXPECT_EQ(one[1].diff.name, "grads/a.weight");
  EXPECT_EQ(one[1].diff.wrong, 1);  // 0.5 vs 0.75
  EXPECT_TRUE(one[2].diff.bitwise);  // params equal
}

TEST(CompareDumps, ANanGradientIsAHardMismatch) {
  const auto a = small_dump("tiny", "a.weight", {1});
  const auto b = small_dump("tiny", "a.weight", {1}, std::numeric_limits<float>::quiet_NaN());
  auto rows = compare_dumps(a, b);
  ASSERT_EQ(rows[1].diff.name, "grads/a.weight");
  EXPECT_EQ(rows[1].diff.nan_b, 1);
  EXPECT_EQ(rows[1].diff.nan_mismatch, 1);
  EXPECT_EQ(rows[1].diff.max_ulp, kInfiniteUlp);
}

}  // namespace
}  // namespace parity::compare
