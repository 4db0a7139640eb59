// Tests for read_torch_save (dumps/tensor_file.h) against files the real torch.save wrote
// (tests/py/torch_save_fixtures.py under PARITY_PYTHON, see Fixtures below): names, dtypes
// and shapes, and bytes bit for bit against torch's own bytes; one table row per file that
// must be refused; and in-process fuzzing of truncated and mutated archives, each of which must
// be read or refused with a DumpError, never crash, hang or throw anything else.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dumps/dump.h"
#include "dumps/tensor_file.h"
#include "tests/py_fixtures.h"

namespace fs = std::filesystem;
using parity::dumps::DumpError;
using parity::dumps::NamedArray;
using parity::dumps::read_torch_save;
namespace h5 = parity::h5;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Fixtures = parity::testing::PyFixtures;

const Fixtures& fixtures() {
  static const Fixtures f("torch_save_fixtures.py", "torch_save_fixtures", {"tensor_bits.py"});
  return f;
}

class TorchSave : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fixtures(); }
  void SetUp() override {
    if (!fixtures().skip.empty()) GTEST_SKIP() << fixtures().skip;
    ASSERT_TRUE(fixtures().error.empty()) << fixtures().error;
  }
  static std::string file_of(const std::string& valid_case) {
    return fixtures().path(fixtures().manifest["valid"][valid_case]["file"]);
  }
  static std::vector<NamedArray> read_case(const std::string& valid_case) {
    const auto p = file_of(valid_case);
    return read_torch_save(p, slurp(p));
  }
  static std::vector<std::string> names(const std::vector<NamedArray>& v) {
    std::vector<std::string> out;
    for (const auto& a : v) out.push_back(a.name);
    return out;
  }
  static const NamedArray& by_name(const std::vector<NamedArray>& v, const std::string& name) {
    for (const auto& a : v)
      if (a.name == name) return a;
    static const NamedArray none{};
    ADD_FAILURE() << "no tensor named " << name;
    return none;
  }
  template <class T>
  static std::vector<T> values(const NamedArray& a) {
    std::vector<T> v(a.array.bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), a.array.bytes.data(), v.size() * sizeof(T));
    return v;
  }
};

// Compares what the reader returns for one valid case with torch's names, dtypes, shapes and
// bytes; counts the wrong bytes per tensor.
void expect_matches_torch(const std::string& valid_case) {
  SCOPED_TRACE(valid_case);
  const auto& f = fixtures();
  const auto& spec = f.manifest["valid"][valid_case];
  const std::string file = f.path(spec["file"]);
  const std::string expected = slurp(f.path(valid_case + ".bin"));
  const auto got = read_torch_save(file, slurp(file));
  ASSERT_EQ(got.size(), spec["tensors"].size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& want = spec["tensors"][i];
    const auto& a = got[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, want["name"].get<std::string>());
    EXPECT_EQ(std::string(h5::dtype_name(a.array.dtype)), want["dtype"].get<std::string>());
    EXPECT_EQ(a.array.shape, want["shape"].get<std::vector<int64_t>>());
    const size_t offset = want["offset"], nbytes = want["nbytes"];
    ASSERT_EQ(a.array.bytes.size(), nbytes);
    ASSERT_LE(offset + nbytes, expected.size());
    size_t wrong = 0;
    for (size_t b = 0; b < nbytes; ++b)
      wrong += a.array.bytes[b] != static_cast<unsigned char>(expected[offset + b]);
    EXPECT_EQ(wrong, 0u) << "#wrong bytes of " << nbytes;
  }
}

TEST_F(TorchSave, EveryValidFixtureMatchesTorchBitwise) {
  const auto& valid = fixtures().manifest["valid"];
  ASSERT_GE(valid.size(), 9u);
  std::cout << "[ observed ] torch " << fixtures().manifest["torch"].get<std::string>()
            << ", numpy " << fixtures().manifest["numpy"].get<std::string>() << ", "
            << valid.size() << " valid fixtures\n";
  for (const auto& [name, spec] : valid.items()) expect_matches_torch(name);
}

TEST_F(TorchSave, FlatDictOfEveryDtypeBitwise) {
  const auto got = read_case("flat");
  EXPECT_EQ(names(got),
            (std::vector<std::string>{"bf16", "fp16", "fp32", "fp64", "i64", "i32", "u8"}));
  const std::map<std::string, h5::DType> dtypes = {
      {"bf16", h5::DType::BF16}, {"fp16", h5::DType::F16}, {"fp32", h5::DType::F32},
      {"fp64", h5::DType::F64},  {"i64", h5::DType::I64},  {"i32", h5::DType::I32},
      {"u8", h5::DType::U8}};
  for (const auto& a : got) EXPECT_EQ(a.array.dtype, dtypes.at(a.name)) << a.name;
  EXPECT_EQ(by_name(got, "bf16").array.shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(by_name(got, "fp32").array.shape, (std::vector<int64_t>{2, 3, 4}));
  // The special values the script put first, as bit patterns: NaN payloads, +-inf, -0 and
  // subnormals survive untouched.
  const auto bf16 = values<uint16_t>(by_name(got, "bf16"));
  EXPECT_EQ(std::vector<uint16_t>(bf16.begin(), bf16.begin() + 8),
            (std::vector<uint16_t>{0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x807F,
                                   0x3F80}));
  const auto fp16 = values<uint16_t>(by_name(got, "fp16"));
  EXPECT_EQ(std::vector<uint16_t>(fp16.begin(), fp16.begin() + 7),
            (std::vector<uint16_t>{0x7E01, 0xFC00, 0x7C00, 0x8000, 0x0001, 0x03FF, 0x3C00}));
  const auto fp32 = values<uint32_t>(by_name(got, "fp32"));
  EXPECT_EQ(std::vector<uint32_t>(fp32.begin(), fp32.begin() + 8),
            (std::vector<uint32_t>{0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000,
                                   0x00000001, 0x807FFFFF, 0x3F800000}));
  const auto fp64 = values<uint64_t>(by_name(got, "fp64"));
  EXPECT_EQ(fp64[0], 0x7FF8000000000001ull);
  EXPECT_EQ(fp64[3], 0x8000000000000000ull);
  EXPECT_EQ(values<int64_t>(by_name(got, "i64")),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1, 12345678901234}));
  EXPECT_EQ(values<int32_t>(by_name(got, "i32")),
            (std::vector<int32_t>{INT32_MIN, INT32_MAX, 0, -1, 7, 8}));
  const auto u8 = values<uint8_t>(by_name(got, "u8"));
  ASSERT_EQ(u8.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(u8[i], i);
}

TEST_F(TorchSave, NestedDictKeysJoinWithDots) {
  EXPECT_EQ(names(read_case("nested")),
            (std::vector<std::string>{"grads.w", "grads.b", "params.w", "params.b"}));
  EXPECT_EQ(names(read_case("byteorder_little")),
            (std::vector<std::string>{"grads.w", "grads.b", "params.w", "params.b"}));
}

TEST_F(TorchSave, ModuleStateDictReadsLikeADict) {
  const auto got = read_case("state_dict");
  EXPECT_EQ(names(got), (std::vector<std::string>{
                            "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                            "1.running_var", "1.num_batches_tracked", "2.weight", "2.bias"}));
  const auto& tracked = by_name(got, "1.num_batches_tracked").array;
  EXPECT_EQ(tracked.dtype, h5::DType::I64);
  EXPECT_TRUE(tracked.shape.empty());
  EXPECT_EQ(values<int64_t>(by_name(got, "1.num_batches_tracked")), std::vector<int64_t>{1});
}

TEST_F(TorchSave, ViewsReadAsContiguousCopiesBitwise) {
  const auto got = read_case("views");
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"transposed", {6, 4}}, {"sliced", {2, 3}},   {"strided", {4, 3}}, {"expanded", {3, 5}},
      {"shared_a", {2, 3}},   {"shared_b", {8}},    {"scalar", {}},      {"empty", {0, 3}},
      {"param", {2, 2}},      {"fp16_t", {2, 3}}};
  ASSERT_EQ(got.size(), shapes.size());
  for (const auto& a : got) EXPECT_EQ(a.array.shape, shapes.at(a.name)) << a.name;
  // Exact by construction: two views of arange(12) share one storage.
  EXPECT_EQ(values<float>(by_name(got, "shared_a")), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values<float>(by_name(got, "shared_b")),
            (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  // A stride-0 view repeats one element along its row.
  const auto expanded = values<uint32_t>(by_name(got, "expanded"));
  for (int r = 0; r < 3; ++r)
    for (int c = 1; c < 5; ++c) EXPECT_EQ(expanded[r * 5 + c], expanded[r * 5]) << r << "," << c;
  EXPECT_TRUE(by_name(got, "empty").array.bytes.empty());
  EXPECT_EQ(by_name(got, "scalar").array.bytes.size(), 8u);
  expect_matches_torch("views");
}

TEST_F(TorchSave, ListsAndTuplesNumberTheirItems) {
  EXPECT_EQ(names(read_case("containers")),
            (std::vector<std::string>{"a.0", "a.1", "b.0", "b.1.c", "d.1", "d.2", "e.0.0"}));
}

TEST_F(TorchSave, PickleProtocol4Bitwise) {
  EXPECT_EQ(names(read_case("proto4")), (std::vector<std::string>{"w", "h", "inner.i"}));
  expect_matches_torch("proto4");
}

// data.pkl assembled by hand from the rarer opcodes (the file torch.load reads the same way).
TEST_F(TorchSave, HandAssembledPickleBitwise) {
  const auto got = read_case("handmade");
  EXPECT_EQ(names(got), (std::vector<std::string>{"x", "y", "group.a", "group.b", "list.0",
                                                  "list.2"}));
  EXPECT_EQ(by_name(got, "group.a").array.bytes, by_name(got, "x").array.bytes);
  EXPECT_EQ(by_name(got, "list.2").array.bytes, by_name(got, "y").array.bytes);
  const auto& y = by_name(got, "y").array.bytes;
  const auto& b = by_name(got, "group.b").array.bytes;
  ASSERT_EQ(b.size(), 6u);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), y.begin() + 2));
  expect_matches_torch("handmade");
}

TEST_F(TorchSave, Zip64ExtraFieldsReadLikeTheOriginalBitwise) {
  const auto flat = read_case("flat"), zip64 = read_case("zip64");
  ASSERT_EQ(flat.size(), zip64.size());
  for (size_t i = 0; i < flat.size(); ++i) {
    EXPECT_EQ(flat[i].name, zip64[i].name);
    EXPECT_EQ(flat[i].array.bytes, zip64[i].array.bytes) << flat[i].name;
  }
}

// One row per file that must be refused: the substrings its one-line message must hold besides
// the file's name.
struct Refusal {
  const char* file_case;
  std::vector<std::string> parts;
};

const std::vector<Refusal> kRefusals = {
    {"legacy", {"legacy torch.save format", "_use_new_zipfile_serialization"}},
    {"module", {"names the global torch.nn.modules.linear.Linear", "state_dict()"}},
    {"numpy", {"names the global numpy.", "torch.from_numpy"}},
    // Accepted before: the global's result was popped, so no tensor path met it.
    {"global_popped", {"names the global os.system at byte", "weights_only=True"}},
    {"bool", {"'mask'", "bool", "torch.BoolStorage"}},
    {"int16", {"'w16'", "int16", "torch.ShortStorage"}},
    {"int8", {"'w8'", "int8", "torch.CharStorage"}},
    {"complex", {"'z'", "complex64"}},
    {"dtype_value", {"'dtype'", "torch.float32"}},
    {"top_tensor", {"the saved object is a tensor, not a dict"}},
    {"top_list", {"the saved object is a list, not a dict"}},
    {"no_tensors", {"holds no tensors"}},
    {"duplicate", {"two tensors are named 'a.b'"}},
    {"torchscript", {"TorchScript", "state_dict()"}},
    {"plain_pickle", {"a plain pickle, not a torch.save zip archive"}},
    {"deflated", {"'flat/data.pkl' is compressed", "torch.save"}},
    {"truncated", {"damaged zip archive"}},
    {"crc_mismatch", {"'flat/data/6' fails its CRC-32 check", "damaged"}},
    {"crc_zeroed_one", {"'flat/data/6' fails its CRC-32 check (recorded 0x00000000", "damaged"}},
    {"byteorder_big", {"big-endian"}},
    {"storage_short", {"tensor 't'", "'archive/data/0'", "holds 20 bytes"}},
    {"view_outside", {"tensor 't' views elements outside its storage"}},
    {"offset_outside", {"tensor 't' views elements outside its storage"}},
    {"missing_storage", {"tensor 't'", "'archive/data/9') is missing"}},
    {"unknown_storage", {"torch.FooStorage", "not a torch storage class"}},
    {"negative_size", {"_rebuild_tensor_v2", "size"}},
    {"no_data_pkl", {"no data.pkl entry", "torch.save(obj, path)"}},
    // Hand-made pickles that would cost a naive reader exponential time or unbounded memory.
    {"hostile_dag", {"refer to each other too often", "'dag.0.0."}},
    {"hostile_cycle", {"nest deeper than 100", "'loop.0.0."}},
    {"hostile_deep", {"nest deeper than 100", "'deep.0.0."}},
    {"hostile_expand", {"tensor 'big' would take 4398046511104 bytes"}},
    {"hostile_long_name", {"longer than 4096 bytes", "'n.kkk"}},
};

TEST_F(TorchSave, RefusalsNameTheFileAndTheCulprit) {
  std::set<std::string> covered;
  for (const auto& row : kRefusals) {
    SCOPED_TRACE(row.file_case);
    covered.insert(row.file_case);
    const std::string file = fixtures().path(std::string(row.file_case) + ".pt");
    ASSERT_TRUE(fs::exists(file));
    std::string message;
    try {
      read_torch_save(file, slurp(file));
      ADD_FAILURE() << "read without an error";
    } catch (const DumpError& e) {
      message = e.what();
    }
    EXPECT_TRUE(contains(message, "'" + file + "'")) << message;
    EXPECT_FALSE(contains(message, "\n")) << message;
    for (const auto& part : row.parts) EXPECT_TRUE(contains(message, part)) << message;
  }
  // Every file the script marks as refused has its row.
  for (const auto& [name, file] : fixtures().manifest["refused"].items())
    EXPECT_TRUE(covered.count(name)) << "no row for refused fixture " << name;
}

// 100000 calls of one allowed global the reader never builds on one 50000-item tuple: each call costs the same small
// time whatever the tuple's size (a reader that copied the tuple per call would take minutes).
TEST_F(TorchSave, CallsOnOneBigTupleStayLinear) {
  const auto& hostile = fixtures().manifest["hostile_read"];
  ASSERT_EQ(hostile.size(), 1u);
  const std::string file = fixtures().path(hostile["hostile_wide_calls"]);
  const auto got = read_torch_save(file, slurp(file));
  ASSERT_EQ(names(got), std::vector<std::string>{"t"});
  EXPECT_EQ(values<float>(got[0]), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST_F(TorchSave, BytesThatAreNoArchiveAreRefused) {
  for (const std::string& bytes : {std::string(), std::string("PK"), std::string(100, 'x'),
                                  std::string(70000, '\0')}) {
    try {
      read_torch_save("junk.pt", bytes);
      ADD_FAILURE() << "read " << bytes.size() << " junk bytes";
    } catch (const DumpError& e) {
      EXPECT_TRUE(contains(e.what(), "'junk.pt'")) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Fuzzing. Every call must return or throw DumpError; anything else fails the test with the
// case that caused it. A returned result must still be well formed.

struct Outcomes {
  size_t read = 0, refused = 0, same = 0;
};

// Reads `bytes`; counts the outcome; `what` names the case in a failure.
void read_one(const std::string& bytes, const std::vector<NamedArray>& original,
              const std::string& what, Outcomes& out) {
  try {
    const auto got = read_torch_save("fuzz.pt", bytes);
    ++out.read;
    std::set<std::string> seen;
    bool same = got.size() == original.size();
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& a = got[i].array;
      int64_t numel = 1;
      for (auto d : a.shape) numel *= d;
      if (a.bytes.size() != static_cast<size_t>(numel) * h5::dtype_size(a.dtype) ||
          got[i].name.empty() || !seen.insert(got[i].name).second) {
        ADD_FAILURE() << what << ": malformed result for " << got[i].name;
        return;
      }
      same = same && got[i].name == original[i].name && a.bytes == original[i].array.bytes;
    }
    out.same += same;
  } catch (const DumpError& e) {
    ++out.refused;
    // One line of valid UTF-8 whatever bytes the file holds (dump() throws on invalid UTF-8).
    const std::string message = e.what();
    if (contains(message, "\n")) ADD_FAILURE() << what << ": a message of several lines";
    try {
      (void)nlohmann::json(message).dump();
    } catch (const nlohmann::json::exception&) {
      ADD_FAILURE() << what << ": a message that is not UTF-8";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-DumpError: " << e.what();
  }
}

// The valid fixtures' bytes and their regions: data.pkl's local header and data (from 0 to the
// second local header) and the zip directory (from the first central header to the end).
struct Sample {
  std::string name, bytes;
  std::vector<NamedArray> original;
  size_t pickle_end = 0, directory = 0;
};

std::vector<Sample> samples() {
  std::vector<Sample> out;
  for (const auto& [name, spec] : fixtures().manifest["valid"].items()) {
    Sample s;
    s.name = name;
    s.bytes = slurp(fixtures().path(spec["file"]));
    s.original = read_torch_save(s.name, s.bytes);
    s.pickle_end = s.bytes.find(std::string("PK\x03\x04", 4), 4);
    s.directory = s.bytes.find(std::string("PK\x01\x02", 4));
    EXPECT_NE(s.pickle_end, std::string::npos) << name;
    EXPECT_NE(s.directory, std::string::npos) << name;
    // The first central entry is data.pkl's.
    const size_t name_len = static_cast<unsigned char>(s.bytes[s.directory + 28]) |
                            static_cast<unsigned char>(s.bytes[s.directory + 29]) << 8;
    const std::string first = s.bytes.substr(s.directory + 46, name_len);
    EXPECT_TRUE(first.size() > 9 && first.compare(first.size() - 9, 9, "/data.pkl") == 0)
        << name << ": " << first;
    out.push_back(std::move(s));
  }
  return out;
}

TEST_F(TorchSave, FuzzTruncationsNeverCrash) {
  Outcomes all;
  size_t calls = 0;
  for (const auto& s : samples()) {
    Outcomes o;
    for (size_t len = 0; len <= s.bytes.size(); ++len, ++calls)
      read_one(s.bytes.substr(0, len), s.original, s.name + " cut to " + std::to_string(len), o);
    // Cutting the end cuts the end-of-central-directory record: only the whole file reads.
    EXPECT_EQ(o.refused, s.bytes.size()) << s.name;
    EXPECT_EQ(o.same, 1u) << s.name;
    all.read += o.read, all.refused += o.refused;
  }
  std::cout << "[ observed ] " << calls << " truncations: " << all.refused << " refused, "
            << all.read << " read (the whole files)\n";
}

TEST_F(TorchSave, FuzzMutatedBytesNeverCrash) {
  const auto files = samples();
  std::mt19937_64 rng(20240601);
  const unsigned char boundary[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE};
  const char* regions[] = {"zip directory", "data.pkl (its CRC-32 cleared)", "anywhere"};
  constexpr int kPerRegion = 2000;
  for (int region = 0; region < 3; ++region) {
    Outcomes o;
    for (int m = 0; m < kPerRegion; ++m) {
      const auto& s = files[rng() % files.size()];
      std::string bytes = s.bytes;
      size_t lo = 0, hi = bytes.size();
      if (region == 0) lo = s.directory;
      if (region == 1) {
        hi = s.pickle_end;
        // Every central entry's CRC-32 cleared: an archive that records none is not checked,
        // so the mutated pickle reaches the pickle machine instead of failing the checksum.
        const std::string sig("PK\x01\x02", 4);
        auto u16 = [&](size_t at) {
          return size_t{static_cast<unsigned char>(bytes[at])} |
                 size_t{static_cast<unsigned char>(bytes[at + 1])} << 8;
        };
        for (size_t p = s.directory; p + 46 <= bytes.size() && bytes.compare(p, 4, sig) == 0;
             p += 46 + u16(p + 28) + u16(p + 30) + u16(p + 32))
          std::memset(&bytes[p + 16], 0, 4);
      }
      const int changes = 1 + static_cast<int>(rng() % 8);
      std::string what = s.name + " (" + regions[region] + ") mutant " + std::to_string(m) + ":";
      for (int c = 0; c < changes; ++c) {
        const size_t at = lo + rng() % (hi - lo);
        const auto value = rng() % 2 ? static_cast<unsigned char>(rng())
                                     : boundary[rng() % sizeof boundary];
        bytes[at] = static_cast<char>(value);
        what += " [" + std::to_string(at) + "]=" + std::to_string(value);
      }
      read_one(bytes, s.original, what, o);
    }
    std::cout << "[ observed ] " << kPerRegion << " mutants in " << regions[region] << ": "
              << o.refused << " refused, " << o.read << " read (" << o.same
              << " unchanged by the mutation)\n";
    // Most mutations of the directory or of data.pkl break something the reader checks.
    EXPECT_GE(o.refused, kPerRegion / 2) << regions[region];
  }
}

}  // namespace
