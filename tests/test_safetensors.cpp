// Tests for read_safetensors (dumps/tensor_file.h):
//   * SafetensorsTorch: a file written by tests/py/safetensors_fixtures.py (real torch tensors,
//     laid out by hand after the specification) read back bit for bit against torch's own
//     bytes, NaN payloads, -0.0, +-inf and subnormals included; skipped, naming the module,
//     where PARITY_PYTHON cannot import torch.
//   * SafetensorsHandWritten: small valid files built here, exact by construction.
//   * SafetensorsRefusal: the table of bad files, one row each, with the message parts.
//   * Fuzz*: every truncation, thousands of byte mutants and thousands of header edits (the
//     length kept right) of a valid file must each return or throw DumpError, nothing else;
//     run on the torch fixture and, so they run without torch too, on the hand-written file.
#include "dumps/tensor_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dumps/dump.h"

namespace {

namespace fs = std::filesystem;
namespace h5 = parity::h5;
using parity::dumps::DumpError;
using parity::dumps::NamedArray;
using parity::dumps::read_safetensors;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A safetensors file: the 8-byte little-endian header length, the header, the buffer.
std::string file_of(const std::string& header, const std::string& buffer = {}) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + buffer;
}

// Little-endian bytes of values (the host is little-endian: h5.h checks it).
template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string as_string(const std::vector<unsigned char>& b) { return {b.begin(), b.end()}; }

const NamedArray* find(const std::vector<NamedArray>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

h5::DType dtype_named(const std::string& s) {
  if (s == "BF16") return h5::DType::BF16;
  if (s == "F16") return h5::DType::F16;
  if (s == "F32") return h5::DType::F32;
  if (s == "F64") return h5::DType::F64;
  if (s == "I64") return h5::DType::I64;
  if (s == "I32") return h5::DType::I32;
  if (s == "U8") return h5::DType::U8;
  ADD_FAILURE() << "the sidecar names dtype " << s << ", which this test does not know";
  return h5::DType::F32;
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: shared by the torch fixture and the hand-written file.

struct FuzzCounts {
  int64_t returned = 0, refused = 0, other = 0;
};

// Reads `bytes`: counts a return or a DumpError; any other exception is a failure. A return
// must be self-consistent: every array holds numel * element size bytes, all of them together
// no more than the file.
void read_counted(const std::string& label, const std::string& bytes, FuzzCounts& c) {
  try {
    const auto ts = read_safetensors("fuzz.safetensors", bytes);
    size_t total = 0;
    for (const auto& t : ts) {
      ASSERT_EQ(t.array.bytes.size(),
                static_cast<size_t>(t.array.numel()) * h5::dtype_size(t.array.dtype))
          << label << ": tensor " << t.name;
      total += t.array.bytes.size();
    }
    ASSERT_LE(total, bytes.size()) << label;
    ++c.returned;
  } catch (const DumpError& e) {
    ++c.refused;
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "'fuzz.safetensors'")) << label << ": " << what;
    EXPECT_FALSE(contains(what, "\n")) << label << ": " << what;
  } catch (const std::exception& e) {
    ++c.other;
    ADD_FAILURE() << label << ": not a DumpError: " << e.what();
  } catch (...) {
    ++c.other;
    ADD_FAILURE() << label << ": a non-standard exception";
  }
}

// Every prefix of a valid file. The last tensor ends at the end of the file, so every strict
// prefix must be refused and only the whole file read.
void fuzz_truncations(const std::string& file) {
  FuzzCounts c;
  for (size_t len = 0; len <= file.size(); ++len)
    read_counted("truncation to " + std::to_string(len) + " bytes", file.substr(0, len), c);
  std::printf("[ observed ] %zu truncations: %lld returned, %lld refused (DumpError), %lld other\n",
              file.size() + 1, static_cast<long long>(c.returned),
              static_cast<long long>(c.refused), static_cast<long long>(c.other));
  EXPECT_EQ(c.returned, 1) << "only the whole file should read";
  EXPECT_EQ(c.refused, static_cast<int64_t>(file.size()));
  EXPECT_EQ(c.other, 0);
}

// `count` mutants of a valid file, each with 1..8 byte changes: a quarter in the 8 length
// bytes, half in the JSON header (often a JSON-significant character), a quarter anywhere.
void fuzz_mutants(const std::string& file, uint64_t seed, int count) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  ASSERT_LE(n + 8, file.size());
  static const char kJsonBytes[] = "{}[]\",:-0123456789 eE.\\ \x00\xff\x80";
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t k) { return static_cast<size_t>(rng() % k); };
  FuzzCounts c, c_len, c_header, c_any;
  for (int m = 0; m < count; ++m) {
    std::string mutant = file;
    const size_t changes = 1 + below(8);
    int first_region = -1;
    for (size_t k = 0; k < changes; ++k) {
      const size_t region = below(4);  // 0: length, 1-2: header, 3: anywhere
      size_t at = region == 0   ? below(8)
                  : region < 3 ? 8 + below(n)
                               : below(file.size());
      if (first_region < 0) first_region = region == 0 ? 0 : region < 3 ? 1 : 2;
      switch (below(3)) {
        case 0: mutant[at] = static_cast<char>(rng()); break;                  // any byte
        case 1: mutant[at] = static_cast<char>(mutant[at] ^ (1 << below(8))); break;  // a bit
        default: mutant[at] = kJsonBytes[below(sizeof(kJsonBytes) - 1)]; break;
      }
    }
    const std::string label = "mutant " + std::to_string(m) + " (seed " + std::to_string(seed) + ")";
    FuzzCounts before = c;
    read_counted(label, mutant, c);
    auto& region = first_region == 0 ? c_len : first_region == 1 ? c_header : c_any;
    region.returned += c.returned - before.returned;
    region.refused += c.refused - before.refused;
    region.other += c.other - before.other;
  }
  auto line = [](const FuzzCounts& x) {
    return std::to_string(x.returned) + " returned, " + std::to_string(x.refused) + " refused";
  };
  std::printf("[ observed ] %d mutants (seed %llu): %lld returned, %lld refused (DumpError), "
              "%lld other; first change in the length: %s; in the header: %s; anywhere: %s\n",
              count, static_cast<unsigned long long>(seed), static_cast<long long>(c.returned),
              static_cast<long long>(c.refused), static_cast<long long>(c.other),
              line(c_len).c_str(), line(c_header).c_str(), line(c_any).c_str());
  EXPECT_EQ(c.other, 0);
  // A change to the length bytes moves the header's end into the JSON or the buffer: nearly
  // every such mutant must be refused; overall at least half.
  EXPECT_GE(c.refused * 2, static_cast<int64_t>(count));
  EXPECT_GE(c_len.refused * 10, (c_len.refused + c_len.returned) * 9);
  EXPECT_GT(c.returned, 0) << "no mutant was read: the mutations never left a valid file";
}

// `count` mutants of a valid file's JSON header, each with 1..6 edits (replace, insert or
// delete JSON characters, or copy a piece of the header elsewhere), written back with the
// right length: they reach the checks after the JSON parse that byte changes rarely reach.
void fuzz_header_edits(const std::string& file, uint64_t seed, int count) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  ASSERT_LE(n + 8, file.size());
  const std::string header = file.substr(8, n), buffer = file.substr(8 + n);
  static const char kJsonBytes[] = "{}[]\",:-0123456789 eE.\\tfnul";
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t k) { return static_cast<size_t>(rng() % k); };
  auto json_byte = [&] { return kJsonBytes[below(sizeof(kJsonBytes) - 1)]; };
  FuzzCounts c;
  for (int m = 0; m < count; ++m) {
    std::string h = header;
    const size_t edits = 1 + below(6);
    for (size_t k = 0; k < edits && !h.empty(); ++k) {
      const size_t at = below(h.size());
      switch (below(4)) {
        case 0: h[at] = json_byte(); break;
        case 1: h.insert(at, 1, json_byte()); break;
        case 2: h.erase(at, 1 + below(8)); break;
        default: h.insert(at, h.substr(below(h.size()), 1 + below(40))); break;
      }
    }
    read_counted("header edit " + std::to_string(m) + " (seed " + std::to_string(seed) + ")",
                 file_of(h, buffer), c);
  }
  std::printf("[ observed ] %d header edits (seed %llu): %lld returned, %lld refused (DumpError), "
              "%lld other\n",
              count, static_cast<unsigned long long>(seed), static_cast<long long>(c.returned),
              static_cast<long long>(c.refused), static_cast<long long>(c.other));
  EXPECT_EQ(c.other, 0);
  EXPECT_GE(c.refused * 2, static_cast<int64_t>(count));
  EXPECT_GT(c.returned, 0) << "no edit left a valid header";
}

// ---------------------------------------------------------------------------------------------
// The torch fixture.

class SafetensorsTorch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() /
           ("parity_safetensors_" + std::to_string(static_cast<long long>(::getpid())));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path script = fs::path(__FILE__).parent_path() / "py" / "safetensors_fixtures.py";
    const fs::path err = dir_ / "stderr.txt";
    const std::string cmd = std::string("'") + PARITY_PYTHON + "' '" + script.string() + "' '" +
                            (dir_ / "out").string() + "' 2>'" + err.string() + "'";
    const int status = std::system(cmd.c_str());
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string why = slurp(err);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    if (rc == 3)  // the script could not import torch or numpy: "missing module: torch"
      skip_ = std::string(PARITY_PYTHON) + ": " + why +
              " (the torch fixtures need torch and numpy in this interpreter: python3-torch)";
    else if (rc == 127)
      skip_ = std::string("the interpreter ") + PARITY_PYTHON + " was not found";
    else if (rc != 0)
      error_ = "'" + cmd + "' exited with " + std::to_string(rc) + ": " + why;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << error_;
  }
  static std::string fixture() { return slurp(dir_ / "out" / "fixture.safetensors"); }

  static fs::path dir_;
  static std::string skip_, error_;
};

fs::path SafetensorsTorch::dir_;
std::string SafetensorsTorch::skip_, SafetensorsTorch::error_;

// Every tensor, in the writer's layout order (not name order, not header order), with torch's
// dtype, shape and bytes exactly.
TEST_F(SafetensorsTorch, MatchesTorchBitForBit) {
  const auto expected = nlohmann::json::parse(slurp(dir_ / "out" / "expected.json"));
  const std::string blob = slurp(dir_ / "out" / "expected.bin");
  const auto got = read_safetensors("fixture.safetensors", fixture());
  const auto& want = expected.at("tensors");
  ASSERT_EQ(got.size(), want.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& w = want[i];
    const auto& g = got[i];
    const std::string name = w.at("name");
    EXPECT_EQ(g.name, name) << "position " << i;
    EXPECT_EQ(g.array.dtype, dtype_named(w.at("dtype"))) << name;
    EXPECT_EQ(g.array.shape, w.at("shape").get<std::vector<int64_t>>()) << name;
    const std::string bytes = blob.substr(w.at("offset").get<size_t>(), w.at("nbytes").get<size_t>());
    ASSERT_EQ(g.array.bytes.size(), bytes.size()) << name;
    for (size_t b = 0; b < bytes.size(); ++b)
      if (g.array.bytes[b] != static_cast<unsigned char>(bytes[b])) {
        if (wrong++ == 0) ADD_FAILURE() << name << ": first wrong byte at " << b;
      }
  }
  EXPECT_EQ(wrong, 0) << "#wrong bytes";
}

// The special values, checked against bit patterns written here rather than the sidecar, so a
// sidecar and a reader wrong the same way cannot agree.
TEST_F(SafetensorsTorch, SpecialValuesSurvive) {
  const auto got = read_safetensors("fixture.safetensors", fixture());
  const auto* bf16 = find(got, "special.bf16");
  const auto* f16 = find(got, "special.f16");
  const auto* f32 = find(got, "special.f32");
  const auto* f64 = find(got, "special.f64");
  ASSERT_TRUE(bf16 && f16 && f32 && f64);
  EXPECT_EQ(as_string(bf16->array.bytes).substr(0, 16),
            bytes_of<uint16_t>({0x7F81, 0xFFC3, 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001}));
  EXPECT_EQ(as_string(f16->array.bytes).substr(0, 18),
            bytes_of<uint16_t>({0x7E01, 0xFD55, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001,
                                0x83FF}));
  EXPECT_EQ(as_string(f32->array.bytes).substr(0, 32),
            bytes_of<uint32_t>({0x7FC00001, 0xFF800123, 0x7F800001, 0x7F800000, 0xFF800000,
                                0x80000000, 0x00000001, 0x807FFFFF}));
  EXPECT_EQ(as_string(f64->array.bytes).substr(0, 56),
            bytes_of<uint64_t>({0x7FF8000000000001, 0xFFF0000000000ABC, 0x7FF0000000000000,
                                0xFFF0000000000000, 0x8000000000000000, 0x0000000000000001,
                                0x800FFFFFFFFFFFFF}));
}

TEST_F(SafetensorsTorch, ScalarEmptyAndNonAsciiNames) {
  const auto got = read_safetensors("fixture.safetensors", fixture());
  const auto* scalar = find(got, "scalar.loss");
  const auto* rows = find(got, "empty.rows");
  const auto* flat = find(got, "empty.flat");
  const auto* omega = find(got, "blocks.0.norm.\xcf\x89");
  ASSERT_TRUE(scalar && rows && flat && omega);
  EXPECT_TRUE(scalar->array.shape.empty());
  EXPECT_EQ(scalar->array.bytes.size(), 4u);
  EXPECT_EQ(rows->array.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(rows->array.bytes.empty());
  EXPECT_EQ(flat->array.dtype, h5::DType::BF16);
  EXPECT_TRUE(flat->array.bytes.empty());
  EXPECT_EQ(omega->array.shape, (std::vector<int64_t>{2, 2}));
}

TEST_F(SafetensorsTorch, FuzzTruncationsNeverCrash) { fuzz_truncations(fixture()); }

TEST_F(SafetensorsTorch, FuzzMutatedBytesNeverCrash) { fuzz_mutants(fixture(), 20240611, 6000); }

TEST_F(SafetensorsTorch, FuzzHeaderEditsNeverCrash) { fuzz_header_edits(fixture(), 11, 4000); }

// ---------------------------------------------------------------------------------------------
// Valid files built here.

// A small valid file: padded header, metadata, a NaN with a payload, a bf16 -0, an i64
// scalar, an empty u8 tensor between two others, and a header in another order than the
// buffer.
std::string hand_written_file() {
  const std::string f32 = bytes_of<uint32_t>({0x7FC00001, 0x80000000, 0x00000001, 0x3F800000,
                                              0x7F800000, 0xFF800000});
  const std::string bf16 = bytes_of<uint16_t>({0x8000, 0x7F81, 0x3F80, 0x0001});
  const std::string i64 = bytes_of<int64_t>({-5});
  const std::string f64 = bytes_of<uint64_t>({0x7FF0000000000001, 0x8000000000000000});
  std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("w.f64":{"dtype":"F64","shape":[2],"data_offsets":[42,58]},)"
      R"("w.f32":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("step":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
      R"("none":{"dtype":"U8","shape":[0],"data_offsets":[32,32]},)"
      R"("w.bf16":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
      R"("a":{"shape":[1],"data_offsets":[40,42],"dtype":"F16"}})";
  header += std::string((8 - header.size() % 8) % 8 + 8, ' ');
  return file_of(header, f32 + bf16 + i64 + bytes_of<uint16_t>({0xFC00}) + f64);
}

TEST(SafetensorsHandWritten, ReadsInLayoutOrderBitForBit) {
  const auto got = read_safetensors("hand.safetensors", hand_written_file());
  std::vector<std::string> names;
  for (const auto& t : got) names.push_back(t.name);
  // "none" (empty, at 32) sits before "step" (32..40): same begin, smaller end.
  EXPECT_EQ(names, (std::vector<std::string>{"w.f32", "w.bf16", "none", "step", "a", "w.f64"}));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].array.dtype, h5::DType::F32);
  EXPECT_EQ(got[0].array.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(as_string(got[0].array.bytes),
            bytes_of<uint32_t>({0x7FC00001, 0x80000000, 0x00000001, 0x3F800000, 0x7F800000,
                                0xFF800000}));
  EXPECT_EQ(as_string(got[1].array.bytes), bytes_of<uint16_t>({0x8000, 0x7F81, 0x3F80, 0x0001}));
  EXPECT_EQ(got[2].array.dtype, h5::DType::U8);
  EXPECT_EQ(got[2].array.shape, (std::vector<int64_t>{0}));
  EXPECT_TRUE(got[2].array.bytes.empty());
  EXPECT_EQ(got[3].array.dtype, h5::DType::I64);
  EXPECT_TRUE(got[3].array.shape.empty());
  EXPECT_EQ(as_string(got[3].array.bytes), bytes_of<int64_t>({-5}));
  EXPECT_EQ(got[4].array.dtype, h5::DType::F16);
  EXPECT_EQ(as_string(got[4].array.bytes), bytes_of<uint16_t>({0xFC00}));
  EXPECT_EQ(as_string(got[5].array.bytes),
            bytes_of<uint64_t>({0x7FF0000000000001, 0x8000000000000000}));
}

TEST(SafetensorsHandWritten, EmptyHeaderHasNoTensors) {
  EXPECT_TRUE(read_safetensors("e.safetensors", file_of("{}")).empty());
  EXPECT_TRUE(read_safetensors("e.safetensors", file_of(R"({"__metadata__":{}}      )")).empty());
}

// Empty tensors at one offset come back in the header's order, not name order.
TEST(SafetensorsHandWritten, EmptyTensorsAtOneOffsetKeepHeaderOrder) {
  const auto got = read_safetensors(
      "e.safetensors",
      file_of(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("a":{"dtype":"BF16","shape":[2,0],"data_offsets":[0,0]}})",
              bytes_of<float>({1.0f})));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "z");
  EXPECT_EQ(got[1].name, "a");
  EXPECT_EQ(got[2].name, "b");
}

// Bytes that no tensor uses, between tensors or after the last one, are refused, as the
// reference implementation refuses them: such a file was altered after it was written, or is
// two files in one. (They were accepted before.)
TEST(SafetensorsHandWritten, UnusedBufferBytesAreRefused) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                              R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})";
  EXPECT_EQ(read_safetensors("exact.safetensors", file_of(header, "abc")).size(), 2u);
  auto refused = [](const std::string& bytes, const std::string& part) {
    try {
      read_safetensors("gap.safetensors", bytes);
      ADD_FAILURE() << "accepted, expected: " << part;
    } catch (const DumpError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused(file_of(header, "abc.."), "2 bytes follow the last tensor's data");
  refused(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                  R"("b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})",
                  "ab..c"),
          "bytes [2, 4) of the buffer belong to no tensor (before tensor 'b')");
  refused(file_of(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", ".c"),
          "bytes [0, 1) of the buffer belong to no tensor");
}

TEST(SafetensorsHandWritten, FuzzTruncationsNeverCrash) { fuzz_truncations(hand_written_file()); }

TEST(SafetensorsHandWritten, FuzzMutatedBytesNeverCrash) {
  fuzz_mutants(hand_written_file(), 7, 6000);
}

TEST(SafetensorsHandWritten, FuzzHeaderEditsNeverCrash) {
  fuzz_header_edits(hand_written_file(), 13, 4000);
}

// ---------------------------------------------------------------------------------------------
// Refusals: one row per bad file, with the parts its one-line message must have besides the
// file's name.

struct Refusal {
  const char* id;
  std::string bytes;
  std::vector<std::string> parts;
};

std::string one_tensor(const std::string& entry, const std::string& buffer = std::string(16, 'x')) {
  return file_of(R"({"w":)" + entry + "}", buffer);
}

std::string with_length(uint64_t n, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + rest;
}

std::vector<Refusal> refusals() {
  const std::string ok_f32 = R"("dtype":"F32","shape":[4],"data_offsets":[0,16])";
  return {
      {"empty file", "", {"0 bytes long", "too short"}},
      // Parsing this succeeded; printing it for the message recursed once per level (SIGSEGV).
      {"nested 100000 deep",
       file_of(R"({"w":)" + std::string(100000, '[') + std::string(100000, ']') + "}"),
       {"nests more than 64 deep"}},
      {"bytes after the last tensor",
       one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", std::string(20, 'x')),
       {"4 bytes follow the last tensor's data"}},
      {"7 bytes", std::string(7, '\0'), {"7 bytes long"}},
      {"header length beyond the file", with_length(100, "{}"), {"header length is 100 bytes but only 2"}},
      {"header length over 100 MB", with_length(100'000'001, "{}"), {"100000001", "more than the 100000000"}},
      {"header length 2^64-1", with_length(~uint64_t{0}, "{}"), {"18446744073709551615"}},
      {"empty header", file_of(""), {"not valid JSON"}},
      {"bad JSON", file_of(R"({"w": )"), {"not valid JSON"}},
      {"trailing garbage", file_of(R"({} x)"), {"not valid JSON"}},
      {"NUL padding", file_of(std::string("{}") + std::string(6, '\0')), {"NUL byte at byte 2 of its 8"}},
      {"NUL then garbage", file_of(std::string("{}") + std::string(1, '\0') + "]]"), {"NUL byte"}},
      {"invalid UTF-8 in a name", file_of("{\"w\xff\":{}}"), {"not valid JSON"}},
      {"number overflow", file_of(R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,0]}})"),
       {"not valid JSON"}},
      {"JSON array", file_of("[1,2]"), {"not an object", "array"}},
      {"JSON array of objects", file_of(R"([{"a":1},{"a":2}])"), {"not an object", "array"}},
      {"duplicate key in an array's object", file_of(R"([{"a":1,"a":2}])"),
       {"key 'a' appears twice in an object of the header"}},
      {"duplicate metadata key", file_of(R"({"__metadata__":{"k":"1","k":"2"}})"),
       {"key 'k' appears twice in __metadata__"}},
      {"JSON string", file_of(R"("w")"), {"not an object", "string"}},
      {"entry not an object", one_tensor("3"), {"tensor 'w'", "not an object"}},
      {"dtype BOOL", one_tensor(R"({"dtype":"BOOL","shape":[16],"data_offsets":[0,16]})"),
       {"tensor 'w'", "dtype BOOL", "BF16, F16, F32, F64", "compared"}},
      {"dtype F8_E4M3", one_tensor(R"({"dtype":"F8_E4M3","shape":[16],"data_offsets":[0,16]})"),
       {"tensor 'w'", "dtype F8_E4M3"}},
      {"dtype I8", one_tensor(R"({"dtype":"I8","shape":[16],"data_offsets":[0,16]})"),
       {"tensor 'w'", "dtype I8"}},
      {"dtype lower case", one_tensor(R"({"dtype":"f32","shape":[4],"data_offsets":[0,16]})"),
       {"tensor 'w'", "dtype f32"}},
      {"dtype not a string", one_tensor(R"({"dtype":4,"shape":[4],"data_offsets":[0,16]})"),
       {"tensor 'w'", "dtype that is not a string"}},
      {"negative shape", one_tensor(R"({"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]})"),
       {"tensor 'w'", "shape entry -1 at index 0"}},
      {"fractional shape", one_tensor(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,16]})"),
       {"tensor 'w'", "shape entry 2.5"}},
      {"integral float shape", one_tensor(R"({"dtype":"F32","shape":[4.0],"data_offsets":[0,16]})"),
       {"tensor 'w'", "shape entry 4.0"}},
      {"string shape", one_tensor(R"({"dtype":"F32","shape":["4"],"data_offsets":[0,16]})"),
       {"tensor 'w'", "shape entry \"4\""}},
      {"shape not an array", one_tensor(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})"),
       {"tensor 'w'", "shape that is not an array"}},
      {"shape overflow",
       one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]})"),
       {"tensor 'w'", "does not fit in 64 bits"}},
      {"shape dim past int64",
       one_tensor(R"({"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]})"),
       {"tensor 'w'", "with a dim past 2^63"}},
      {"offsets past the buffer", one_tensor(R"({"dtype":"F32","shape":[100],"data_offsets":[0,400]})"),
       {"tensor 'w'", "[0, 400]", "past the buffer (16 bytes"}},
      {"offsets past 2^63",
       one_tensor(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]})"),
       {"tensor 'w'", "past the buffer"}},
      {"begin after end", one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
       {"tensor 'w'", "begin is after its end"}},
      {"negative offset", one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[-16,0]})"),
       {"tensor 'w'", "not two non-negative integers"}},
      {"three offsets", one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,8,16]})"),
       {"tensor 'w'", "not two non-negative integers"}},
      {"offsets not an array", one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":16})"),
       {"tensor 'w'", "not two non-negative integers"}},
      {"size mismatch", one_tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"),
       {"tensor 'w'", "3 elements of 4 bytes", "span 16 bytes"}},
      {"size not a multiple", one_tensor(R"({"dtype":"F64","shape":[1],"data_offsets":[0,12]})"),
       {"tensor 'w'", "span 12 bytes"}},
      {"scalar with no bytes", one_tensor(R"({"dtype":"F32","shape":[],"data_offsets":[0,0]})"),
       {"tensor 'w'", "1 elements", "span 0 bytes"}},
      {"overlap",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, 'x')),
       {"'a' (bytes [0, 8))", "'b' (bytes [4, 12))", "overlap"}},
      {"same bytes twice",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
               std::string(8, 'x')),
       {"'a'", "'b'", "overlap"}},
      {"extra key", one_tensor("{" + ok_f32 + R"(,"offset":0})"),
       {"tensor 'w'", "unexpected key 'offset'"}},
      {"missing key", one_tensor(R"({"dtype":"F32","shape":[4]})"),
       {"tensor 'w'", "no \"data_offsets\""}},
      {"duplicate tensor",
       file_of(R"({"w":{)" + ok_f32 + R"(},"w":{)" + ok_f32 + "}}", std::string(16, 'x')),
       {"tensor 'w'", "appears twice"}},
      {"duplicate key in an entry", one_tensor(R"({"dtype":"F32","dtype":"F64","shape":[4],"data_offsets":[0,16]})"),
       {"tensor 'w'", "key 'dtype' appears twice"}},
      {"metadata an array", file_of(R"({"__metadata__":["a"]})"), {"__metadata__", "an object of strings", "array"}},
      {"metadata a string", file_of(R"({"__metadata__":"pt"})"), {"__metadata__", "an object of strings"}},
      {"metadata value not a string", file_of(R"({"__metadata__":{"format":1}})"),
       {"__metadata__", "'format'", "must be a string"}},
      {"metadata twice", file_of(R"({"__metadata__":{},"__metadata__":{}})"), {"__metadata__", "appears twice"}},
      {"control bytes in a name", file_of("{\"w\\n\\u0001\":3}"), {"tensor 'w\\x0a\\x01'"}},
  };
}

TEST(SafetensorsRefusal, EachBadFileIsRefusedNamingFileAndTensor) {
  for (const auto& r : refusals()) {
    const std::string source = std::string("refusal/") + r.id + ".safetensors";
    std::string what;
    try {
      read_safetensors(source, r.bytes);
      ADD_FAILURE() << r.id << ": read without an error";
      continue;
    } catch (const DumpError& e) {
      what = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << r.id << ": not a DumpError: " << e.what();
      continue;
    }
    EXPECT_TRUE(contains(what, "'" + source + "'")) << r.id << ": " << what;
    EXPECT_FALSE(contains(what, "\n")) << r.id << ": " << what;
    for (const auto& part : r.parts)
      EXPECT_TRUE(contains(what, part)) << r.id << ": no \"" << part << "\" in: " << what;
  }
}

// The good twin of the one-tensor rows: the same file with a consistent entry reads, so the
// rows above fail for the reason they name.
TEST(SafetensorsRefusal, TheGoodTwinReads) {
  const auto got = read_safetensors(
      "twin.safetensors", one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "w");
  EXPECT_EQ(as_string(got[0].array.bytes), std::string(16, 'x'));
}

// An empty tensor whose other dims multiply past 2^64 is a valid empty tensor: its count is 0,
// not an overflow (it was refused as one).
TEST(SafetensorsRefusal, AnEmptyTensorWithHugeDimsReads) {
  const auto got = read_safetensors(
      "empty.safetensors",
      file_of(R"({"e":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].array.shape, (std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40, 0}));
  EXPECT_TRUE(got[0].array.bytes.empty());
}

}  // namespace
