// Tests for parity::h5 (dumps/h5.h): round trips per dtype, groups, attributes, atomic
// writes, error messages, and that h5dump reads the bf16 layout.
#include "dumps/h5.h"

#include <hdf5.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;
namespace h5 = parity::h5;

namespace {

using H5Test = parity::testing::TempDirTest;

template <class T>
T from_bits(uint64_t bits) {
  T v;
  static_assert(sizeof(T) <= sizeof(bits));
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// Calls fn, expects an h5::Error and returns its message ("" and a failure otherwise).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const h5::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected h5::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected h5::Error, nothing was thrown";
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Writes `values` as 0-d (first value), 1-d (all), 3-d (2x3x4, cycling) and empty datasets,
// commits, reopens and compares dtype, shape and bytes exactly.
template <class T>
void round_trip(const std::string& path, h5::DType dtype, const std::vector<T>& values) {
  ASSERT_EQ(h5::dtype_size(dtype), sizeof(T));
  ASSERT_FALSE(values.empty());
  std::vector<T> cube(2 * 3 * 4);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = values[i % values.size()];

  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    const T* data;
    size_t n;
  };
  const std::vector<Case> cases = {
      {"/scalar", {}, values.data(), 1},
      {"/vector", {static_cast<int64_t>(values.size())}, values.data(), values.size()},
      {"/g/cube", {2, 3, 4}, cube.data(), cube.size()},
      {"/g/empty", {3, 0}, nullptr, 0},
  };
  {
    h5::File f = h5::File::create(path);
    for (const Case& c : cases) h5::write(f, c.name, dtype, c.shape, c.data);
    f.commit();
  }
  const h5::File f = h5::File::open_read(path);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(h5::dtype_name(dtype)) + " " + c.name);
    const h5::Array a = h5::read(f, c.name);
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_EQ(a.shape, c.shape);
    EXPECT_EQ(a.numel(), static_cast<int64_t>(c.n));
    ASSERT_EQ(a.bytes.size(), c.n * sizeof(T));
    if (c.n > 0) {
      EXPECT_EQ(std::memcmp(a.bytes.data(), c.data, a.bytes.size()), 0);
    }
  }
}

}  // namespace

TEST(H5DType, SizesAndNames) {
  EXPECT_EQ(h5::dtype_size(h5::DType::F32), 4u);
  EXPECT_EQ(h5::dtype_size(h5::DType::F64), 8u);
  EXPECT_EQ(h5::dtype_size(h5::DType::BF16), 2u);
  EXPECT_EQ(h5::dtype_size(h5::DType::I64), 8u);
  EXPECT_EQ(h5::dtype_size(h5::DType::I32), 4u);
  EXPECT_EQ(h5::dtype_size(h5::DType::U8), 1u);
  EXPECT_STREQ(h5::dtype_name(h5::DType::BF16), "bfloat16");
  EXPECT_STREQ(h5::dtype_name(h5::DType::F32), "float32");
}

TEST_F(H5Test, RoundTripF32) {
  round_trip<float>(file("f32.h5"), h5::DType::F32,
                    {1.5f, from_bits<float>(0x7fc12345),  // quiet NaN with payload
                     from_bits<float>(0xffa00001),         // signalling NaN, sign set
                     -0.0f, std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity(),
                     from_bits<float>(0x00000001),  // smallest denormal
                     from_bits<float>(0x807fffff),  // largest negative denormal
                     std::numeric_limits<float>::max(), 3.14159265f});
}

TEST_F(H5Test, RoundTripF64) {
  round_trip<double>(file("f64.h5"), h5::DType::F64,
                     {-2.25, from_bits<double>(0x7ff8000000abcdefULL),
                      from_bits<double>(0xfff0000000000001ULL), -0.0,
                      std::numeric_limits<double>::infinity(),
                      -std::numeric_limits<double>::infinity(),
                      from_bits<double>(0x0000000000000001ULL),
                      from_bits<double>(0x800fffffffffffffULL),
                      std::numeric_limits<double>::lowest(), 1e-300});
}

TEST_F(H5Test, RoundTripBF16RawBits) {
  round_trip<uint16_t>(file("bf16.h5"), h5::DType::BF16,
                       {0x3fc0,   // 1.5
                        0x7fc1,   // NaN with payload
                        0xff81,   // signalling NaN, sign set
                        0x8000,   // -0
                        0x7f80,   // +inf
                        0xff80,   // -inf
                        0x0001,   // smallest denormal
                        0x807f,   // largest negative denormal
                        0x7f7f,   // max
                        0xc049}); // about -3.14
}

TEST_F(H5Test, RoundTripI64) {
  round_trip<int64_t>(file("i64.h5"), h5::DType::I64,
                      {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                       -1, 0, 1, 1234567890123LL});
}

TEST_F(H5Test, RoundTripI32) {
  round_trip<int32_t>(file("i32.h5"), h5::DType::I32,
                      {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                       -1, 0, 7});
}

TEST_F(H5Test, RoundTripU8) {
  round_trip<uint8_t>(file("u8.h5"), h5::DType::U8, {0, 255, 128, 1, 127});
}

TEST_F(H5Test, NestedGroupsListAndExists) {
  const std::string p = file("groups.h5");
  const float one = 1.0f;
  {
    h5::File f = h5::File::create(p);
    // Creation order deliberately differs from name order.
    h5::write(f, "/step_000001/grads/layers.0.attention.wq_a.weight", h5::DType::F32, {1}, &one);
    h5::write(f, "/step_000001/grads/layers.0.attention.wq_b.weight", h5::DType::F32, {1}, &one);
    h5::write(f, "step_000001/grads/embed.weight", h5::DType::F32, {1}, &one);  // no leading '/'
    h5::write(f, "/step_000001/loss", h5::DType::F32, {}, &one);
    // More than 8 links: dense link storage must keep creation order too.
    for (int i = 19; i >= 0; --i) {
      h5::write(f, "/many/t" + std::to_string(100 + i), h5::DType::F32, {}, &one);
    }
    // Readable before commit.
    EXPECT_TRUE(h5::exists(f, "/step_000001/grads/embed.weight"));
    f.commit();
  }
  const h5::File f = h5::File::open_read(p);
  EXPECT_EQ(h5::list(f, "/"), (std::vector<std::string>{"step_000001", "many"}));
  EXPECT_EQ(h5::list(f, "/step_000001"), (std::vector<std::string>{"grads", "loss"}));
  EXPECT_EQ(h5::list(f, "/step_000001/grads"),
            (std::vector<std::string>{"layers.0.attention.wq_a.weight",
                                      "layers.0.attention.wq_b.weight", "embed.weight"}));
  std::vector<std::string> many;
  for (int i = 19; i >= 0; --i) many.push_back("t" + std::to_string(100 + i));
  EXPECT_EQ(h5::list(f, "/many"), many);

  EXPECT_TRUE(h5::exists(f, "/"));
  EXPECT_TRUE(h5::exists(f, "/step_000001"));
  EXPECT_TRUE(h5::exists(f, "/step_000001/grads"));
  EXPECT_TRUE(h5::exists(f, "/step_000001/grads/layers.0.attention.wq_a.weight"));
  EXPECT_TRUE(h5::exists(f, "step_000001/grads/embed.weight"));
  EXPECT_FALSE(h5::exists(f, "/step_000001/grads/missing.weight"));
  EXPECT_FALSE(h5::exists(f, "/step_000002/grads/layers.0.attention.wq_a.weight"));
  EXPECT_FALSE(h5::exists(f, "/step_000002"));
  // An intermediate component that is a dataset, not a group.
  EXPECT_FALSE(h5::exists(f, "/step_000001/loss/child"));

  const h5::Array a = h5::read(f, "/step_000001/grads/layers.0.attention.wq_b.weight");
  ASSERT_EQ(a.bytes.size(), sizeof(float));
  EXPECT_EQ(std::memcmp(a.bytes.data(), &one, sizeof(float)), 0);

  // list of a dataset or of a missing group is an error naming the object.
  EXPECT_TRUE(contains(error_of([&] { h5::list(f, "/step_000001/loss"); }), "/step_000001/loss"));
  EXPECT_TRUE(contains(error_of([&] { h5::list(f, "/nope"); }), "/nope"));
}

TEST_F(H5Test, WriteRejectsBadRequests) {
  const std::string p = file("bad.h5");
  const float v = 2.0f;
  h5::File f = h5::File::create(p);
  h5::write(f, "/a/x", h5::DType::F32, {1}, &v);
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/a/x", h5::DType::F32, {1}, &v); }),
                       "already exists"));
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/a/x/y", h5::DType::F32, {1}, &v); }),
                       "not a group"));
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/b", h5::DType::F32, {-1}, &v); }),
                       "negative"));
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/c", h5::DType::F32, {2}, nullptr); }),
                       "null"));
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/d//e", h5::DType::F32, {1}, &v); }),
                       "invalid object path"));
  EXPECT_TRUE(contains(error_of([&] { h5::read(f, "/a"); }), "not a dataset"));
  f.commit();
  EXPECT_FALSE(f.is_open());
  EXPECT_TRUE(contains(error_of([&] { h5::write(f, "/z", h5::DType::F32, {1}, &v); }), p));

  h5::File r = h5::File::open_read(p);
  EXPECT_TRUE(contains(error_of([&] { h5::write(r, "/z", h5::DType::F32, {1}, &v); }),
                       "read-only"));
  EXPECT_TRUE(contains(error_of([&] { h5::set_attr(r, "/", "k", int64_t{1}); }), "read-only"));
}

TEST_F(H5Test, AttributesRoundTrip) {
  const std::string p = file("attrs.h5");
  std::string big = "{\"config\": \"caf\xc3\xa9 \xe2\x86\x92 ";  // UTF-8 content
  while (big.size() < 100 * 1024) big += "0123456789abcdef";
  big += "\"}";
  const double third = 1.0 / 3.0;
  const float x = 0.5f;
  {
    h5::File f = h5::File::create(p);
    h5::write(f, "/step_000001/grads/w.weight", h5::DType::F32, {1}, &x);
    h5::set_attr(f, "/", "config_json", big);
    h5::set_attr(f, "/", "step", int64_t{-42});
    h5::set_attr(f, "/", "lr", third);
    h5::set_attr(f, "/", "count", 7);  // int goes through the integral template
    h5::set_attr(f, "/", "max", std::numeric_limits<int64_t>::max());
    h5::set_attr(f, "/step_000001", "kind", "grads");
    h5::set_attr(f, "/step_000001/grads/w.weight", "scale", -0.0);
    h5::set_attr(f, "/step_000001/grads/w.weight", "note", "first");
    h5::set_attr(f, "/step_000001/grads/w.weight", "note", "replaced");
    h5::set_attr(f, "/step_000001", "empty", std::string());
    EXPECT_TRUE(contains(error_of([&] { h5::set_attr(f, "/missing", "a", 1.0); }), "/missing"));
    EXPECT_TRUE(contains(
        error_of([&] { h5::set_attr(f, "/", "nul", std::string("a\0b", 3)); }), "NUL"));
    f.commit();
  }
  const h5::File f = h5::File::open_read(p);
  EXPECT_EQ(h5::attr_string(f, "/", "config_json"), big);
  EXPECT_EQ(h5::attr_int(f, "/", "step"), -42);
  EXPECT_EQ(h5::attr_int(f, "/", "count"), 7);
  EXPECT_EQ(h5::attr_int(f, "/", "max"), std::numeric_limits<int64_t>::max());
  const double lr = h5::attr_double(f, "/", "lr");
  EXPECT_EQ(std::memcmp(&lr, &third, sizeof(double)), 0);
  EXPECT_EQ(h5::attr_double(f, "/", "step"), -42.0);  // integers read as reals too
  EXPECT_EQ(h5::attr_string(f, "/step_000001", "kind"), "grads");
  EXPECT_EQ(h5::attr_string(f, "/step_000001", "empty"), "");
  const double scale = h5::attr_double(f, "/step_000001/grads/w.weight", "scale");
  EXPECT_TRUE(std::signbit(scale));
  EXPECT_EQ(scale, 0.0);
  EXPECT_EQ(h5::attr_string(f, "step_000001/grads/w.weight", "note"), "replaced");

  EXPECT_TRUE(h5::has_attr(f, "/", "config_json"));
  EXPECT_FALSE(h5::has_attr(f, "/", "nope"));
  EXPECT_FALSE(h5::has_attr(f, "/step_000001/grads/w.weight", "kind"));

  const std::string missing = error_of([&] { h5::attr_int(f, "/", "nope"); });
  EXPECT_TRUE(contains(missing, "no such attribute")) << missing;
  EXPECT_TRUE(contains(missing, p)) << missing;
  EXPECT_TRUE(contains(error_of([&] { h5::attr_int(f, "/", "lr"); }), "not an integer"));
  EXPECT_TRUE(contains(error_of([&] { h5::attr_string(f, "/", "step"); }), "not a string"));
  EXPECT_TRUE(contains(error_of([&] { h5::attr_double(f, "/", "config_json"); }), "not a number"));
  EXPECT_TRUE(contains(error_of([&] { h5::has_attr(f, "/nope", "x"); }), "/nope"));
}

TEST_F(H5Test, AtomicCreateAndCommit) {
  const std::string p = file("atomic.h5");
  const int32_t v = 5;
  std::string temp;
  {
    h5::File f = h5::File::create(p);
    temp = f.temp_path();
    EXPECT_EQ(f.path(), p);
    EXPECT_EQ(temp, p + ".tmp." + std::to_string(::getpid()));
    h5::write(f, "/x", h5::DType::I32, {1}, &v);
    EXPECT_TRUE(fs::exists(temp));
    EXPECT_FALSE(fs::exists(p));
    // destroyed without commit
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(temp));

  {
    h5::File f = h5::File::create(p);
    h5::write(f, "/x", h5::DType::I32, {1}, &v);
    h5::File moved = std::move(f);  // ownership moves, the temp file stays
    EXPECT_FALSE(f.is_open());
    EXPECT_TRUE(fs::exists(temp));
    moved.commit();
    EXPECT_TRUE(fs::exists(p));
    EXPECT_FALSE(fs::exists(temp));
    EXPECT_TRUE(contains(error_of([&] { moved.commit(); }), p));
  }
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(fs::exists(temp));
  const h5::File r = h5::File::open_read(p);
  EXPECT_EQ(h5::read(r, "/x").bytes.size(), sizeof(int32_t));

  // A second create() over an existing final file leaves it intact until commit.
  {
    h5::File f = h5::File::create(p);
    h5::write(f, "/y", h5::DType::I32, {1}, &v);
  }
  const h5::File again = h5::File::open_read(p);
  EXPECT_TRUE(h5::exists(again, "/x"));
  EXPECT_FALSE(h5::exists(again, "/y"));
}

TEST_F(H5Test, OpenMissingFileThrows) {
  const std::string p = file("does_not_exist.h5");
  const std::string msg = error_of([&] { h5::File::open_read(p); });
  EXPECT_TRUE(contains(msg, p)) << msg;
  EXPECT_TRUE(contains(msg, "no such file")) << msg;
}

TEST_F(H5Test, OpenNonHdf5FileThrows) {
  const std::string p = file("text.h5");
  std::ofstream(p) << "this is not an HDF5 file\n";
  try {
    h5::File::open_read(p);
    FAIL() << "no error";
  } catch (const h5::Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "cannot open '" + p + "' for reading: ")) << msg;
    EXPECT_EQ(e.file(), p);
    EXPECT_FALSE(e.reason().empty());
    // Callers add their own remedy.
    const h5::Error wrapped = e.with_remedy("regenerate it with parity init");
    const std::string w = wrapped.what();
    EXPECT_EQ(w, msg + "; regenerate it with parity init");
    EXPECT_EQ(wrapped.remedy(), "regenerate it with parity init");
  }
}

TEST_F(H5Test, OpenTruncatedFileThrows) {
  const std::string p = file("truncated.h5");
  {
    std::vector<double> data(4096, 1.25);
    h5::File f = h5::File::create(p);
    h5::write(f, "/big", h5::DType::F64, {static_cast<int64_t>(data.size())}, data.data());
    h5::set_attr(f, "/", "note", "will be truncated");
    f.commit();
  }
  const auto size = fs::file_size(p);
  fs::resize_file(p, size / 2);
  const std::string msg = error_of([&] {
    const h5::File f = h5::File::open_read(p);
    h5::read(f, "/big");  // in case the open itself were to succeed
  });
  EXPECT_TRUE(contains(msg, p)) << msg;
}

TEST_F(H5Test, ReadMissingDatasetNamesObject) {
  const std::string p = file("missing_ds.h5");
  const uint8_t b = 1;
  {
    h5::File f = h5::File::create(p);
    h5::write(f, "/step_000001/present", h5::DType::U8, {1}, &b);
    f.commit();
  }
  const h5::File f = h5::File::open_read(p);
  for (const std::string obj : {"/step_000001/absent", "/step_000009/grads/w"}) {
    try {
      h5::read(f, obj);
      ADD_FAILURE() << "no error for " << obj;
    } catch (const h5::Error& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, obj)) << msg;
      EXPECT_TRUE(contains(msg, p)) << msg;
      EXPECT_EQ(e.object(), obj);
    }
  }
}

TEST_F(H5Test, H5dumpReadsBf16) {
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not on PATH";
  const std::string p = file("bf16_dump.h5");
  const std::vector<uint16_t> bits = {0x3fc0, 0xc000, 0x4049};  // 1.5, -2, 3.140625
  {
    h5::File f = h5::File::create(p);
    h5::write(f, "/x", h5::DType::BF16, {3}, bits.data());
    f.commit();
  }
  const std::string cmd = "h5dump -d /x '" + p + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = ::pclose(pipe);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "(0): 1.5, -2, 3.14062")) << out;
}

// ---------------------------------------------------------------------------------------------
// Hostile declared shapes: a dataset that holds only its fill value costs the file a few
// hundred bytes whatever shape it declares. Written with the HDF5 C API, as another program
// would.

namespace {

// `count` datasets of shape `dims`: "/x", then "/x1", "/x2", ...
void write_fill_only(const std::string& path, std::vector<hsize_t> dims, float fill,
                     int count = 1) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunk(dims.size(), 1024);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill);
  for (int i = 0; i < count; ++i) {
    const std::string name = i ? "/x" + std::to_string(i) : "/x";
    const hid_t d = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                               H5P_DEFAULT);
    ASSERT_GE(d, 0);
    H5Dclose(d);
  }
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

}  // namespace

// (2^32, 2^32) elements: the count 2^64 wrapped to 0 and two such files of different fill
// values read as empty, hence equal (a false OK). Now the count is checked and the file refused.
TEST_F(H5Test, ADeclaredShapePast64BitsIsRefusedNotReadAsEmpty) {
  const std::string path = file("wrap.h5");
  write_fill_only(path, {hsize_t{1} << 32, hsize_t{1} << 32}, 1.0f);
  ASSERT_LT(std::filesystem::file_size(path), 100000u);
  auto f = h5::File::open_read(path);
  const std::string m = error_of([&] { h5::read(f, "/x"); });
  EXPECT_NE(m.find("more elements than 64 bits count"), std::string::npos) << m;
}

// 10^10 float32 fill values: 40 GB promised by a file of a few KB. Refused against the
// per-tensor budget before anything is allocated.
TEST_F(H5Test, ADeclaredShapePastTheTensorBudgetIsRefusedBeforeAllocating) {
  const std::string path = file("big.h5");
  write_fill_only(path, {hsize_t{10000000000}}, 1.0f);
  auto f = h5::File::open_read(path);
  const std::string m = error_of([&] { h5::read(f, "/x"); });
  EXPECT_NE(m.find("would take 40000000000 bytes in memory, past the limit"), std::string::npos)
      << m;
}

// Three datasets of 100,000,000 float32 fill values (400 MB each, within the per-tensor limit)
// in a file of a few KB: together they draw on one budget for the file, 16 x its size + 1 GiB,
// so the third is refused before it is allocated (before, each was read in full: enough such
// datasets exhaust any memory).
TEST_F(H5Test, DatasetsOfOneFileDrawOnOneBudget) {
  const std::string path = file("three.h5");
  write_fill_only(path, {hsize_t{100000000}}, 2.0f, 3);
  const auto size = std::filesystem::file_size(path);
  ASSERT_LT(size, 100000u);
  auto f = h5::File::open_read(path);
  EXPECT_EQ(f.read_budget_left(), 16 * size + (uint64_t{1} << 30));
  for (const char* name : {"/x", "/x1"}) {
    const auto a = h5::read(f, name);
    ASSERT_EQ(a.numel(), 100000000);
    float last = 0;
    std::memcpy(&last, a.bytes.data() + a.bytes.size() - 4, 4);
    EXPECT_EQ(last, 2.0f);
  }
  EXPECT_EQ(f.read_budget_left(), 16 * size + (uint64_t{1} << 30) - 800000000u);
  const std::string m = error_of([&] { h5::read(f, "/x2"); });
  EXPECT_NE(m.find("would take 400000000 bytes in memory, past the "), std::string::npos) << m;
  EXPECT_NE(m.find("left of this file's budget"), std::string::npos) << m;
  // Another handle on the same file starts with the whole budget.
  auto g = h5::File::open_read(path);
  EXPECT_EQ(h5::read(g, "/x2").numel(), 100000000);
}

// An external link opens another file, one the user never named (any HDF5 file the reader can
// reach): it was followed; now any path through one is refused, naming the link, before the
// other file is opened. The walk's listing still names it (listing follows nothing).
TEST_F(H5Test, ExternalLinksAreRefusedNotFollowed) {
  const std::string other = file("other.h5"), path = file("linking.h5");
  {
    auto f = h5::File::create(other);
    const float v[2] = {1.0f, 2.0f};
    h5::write(f, "/w", h5::DType::F32, {2}, v);
    h5::create_group(f, "/g");
    f.commit();
  }
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Lcreate_external(other.c_str(), "/w", f, "/w", H5P_DEFAULT, H5P_DEFAULT), 0);
  ASSERT_GE(H5Lcreate_external(other.c_str(), "/g", f, "/g", H5P_DEFAULT, H5P_DEFAULT), 0);
  H5Fclose(f);
  auto in = h5::File::open_read(path);
  EXPECT_EQ(h5::list(in, "/"), (std::vector<std::string>{"g", "w"}));
  for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"read", [&] { h5::read(in, "/w"); }},
           {"is_group", [&] { h5::is_group(in, "/g"); }},
           {"list", [&] { h5::list(in, "/g"); }},
           {"exists below", [&] { h5::exists(in, "/g/x"); }}}) {
    const std::string m = error_of(call);
    EXPECT_NE(m.find("is a link into another file (an HDF5 external link)"), std::string::npos)
        << what << ": " << m;
  }
}
