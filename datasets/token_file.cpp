#include "datasets/token_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "datasets/corpus.h"
#include "spec/limits.h"
#include "spec/options.h"
#include "spec/printable.h"
#include "spec/whole_file.h"

namespace parity::datasets {

namespace fs = std::filesystem;

namespace {

constexpr char kTokenMagic[8] = {'P', 'R', 'T', 'Y', 'T', 'O', 'K', '1'};

struct TokenHeader {
  char magic[8];
  uint64_t num_tokens;
  int32_t vocab_size;
  int32_t eos_id;
  uint64_t checksum;  // FNV-1a 64 of the token bytes
};
static_assert(sizeof(TokenHeader) == 32, "token file header must be 32 bytes");

}  // namespace

bool try_read_token_file(const std::string& path, TokenFile& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  TokenHeader h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof(h))) return false;
  if (std::memcmp(h.magic, kTokenMagic, sizeof(kTokenMagic)) != 0) return false;
  std::error_code ec;
  const uintmax_t file_size = fs::file_size(path, ec);
  // The count first, so that a damaged header cannot ask for more than the file holds.
  if (ec || file_size < sizeof(h) || h.num_tokens > (file_size - sizeof(h)) / sizeof(int32_t) ||
      file_size != sizeof(h) + h.num_tokens * sizeof(int32_t) || h.vocab_size <= 0)
    return false;
  std::vector<int32_t> ids(h.num_tokens);
  if (!in.read(reinterpret_cast<char*>(ids.data()),
               static_cast<std::streamsize>(ids.size() * sizeof(int32_t))))
    return false;
  if (fnv1a64(ids.data(), ids.size() * sizeof(int32_t)) != h.checksum) return false;
  const int32_t vocab = h.vocab_size;
  if (!std::all_of(ids.begin(), ids.end(), [vocab](int32_t id) { return id >= 0 && id < vocab; }))
    return false;
  out.ids = std::move(ids);
  out.vocab_size = h.vocab_size;
  out.eos_id = h.eos_id;
  return true;
}

TokenFile read_token_file(const std::string& path) {
  TokenFile f;
  if (!try_read_token_file(path, f))
    throw DataError("token file '" + path + "' is missing or damaged; delete it and rerun to "
                    "re-encode the corpus");
  return f;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& ids,
                      int32_t vocab_size, int32_t eos_id) {
  TokenHeader h{};
  std::memcpy(h.magic, kTokenMagic, sizeof(kTokenMagic));
  h.num_tokens = ids.size();
  h.vocab_size = vocab_size;
  h.eos_id = eos_id;
  h.checksum = fnv1a64(ids.data(), ids.size() * sizeof(int32_t));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.write(reinterpret_cast<const char*>(ids.data()),
              static_cast<std::streamsize>(ids.size() * sizeof(int32_t)));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      throw DataError("cannot write token file '" + path + "'; set PARITY_CACHE_DIR to a "
                      "writable directory");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw DataError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

namespace {

// What an integer array holds, for its checks and messages: token ids below the vocabulary,
// or positions below 2^31.
struct IntArray {
  const char* flag;  // "--tokens", "--positions"
  const char* what;  // "token id", "position"
  int64_t limit;     // every value lies in [0, limit)
  std::string range_remedy;
};

IntArray token_ids(int64_t vocab) {
  return {"--tokens", "token id", vocab,
          "is outside the model's vocabulary [0, " + std::to_string(vocab) +
              "); give ids of this flavor's tokenizer"};
}

// The whole file, sized first and refused past spec::max_file_bytes() (the ids it holds take
// at most twice its size in memory).
std::string slurp_file(const std::string& path, const char* flag) {
  return spec::read_whole_file(
      path, static_cast<uint64_t>(spec::max_file_bytes()),
      "raise PARITY_MAX_FILE_BYTES for a trusted file, or give a shorter stream",
      [&](const std::string& why) {
        throw DataError(std::string(flag) + " '" + path + "' " + why);
      });
}

// Little-endian integers of `width` bytes (2 unsigned, 4 or 8 signed) from `p`, checked against
// the array's range one by one.
std::vector<int32_t> ids_from(const std::string& path, const unsigned char* p, size_t count,
                              int width, bool is_unsigned, const IntArray& a) {
  std::vector<int32_t> ids(count);
  for (size_t i = 0; i < count; ++i) {
    int64_t v = 0;
    uint64_t u = 0;
    for (int b = width - 1; b >= 0; --b) u = (u << 8) | p[i * width + b];
    if (is_unsigned || width == 8)
      v = static_cast<int64_t>(u);
    else if (width == 4)
      v = static_cast<int32_t>(static_cast<uint32_t>(u));
    else
      v = static_cast<int16_t>(static_cast<uint16_t>(u));
    if (v < 0 || v >= a.limit)
      throw DataError(std::string(a.flag) + " '" + path + "': " + a.what + " " +
                      std::to_string(v) + " at index " + std::to_string(i) + " " + a.range_remedy);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

}  // namespace

bool is_npy_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[6] = {};
  return in.read(magic, 6) && std::memcmp(magic, "\x93NUMPY", 6) == 0;
}

namespace {

constexpr size_t kMaxNpyHeader = 65536;

std::vector<int32_t> read_npy_ints(const std::string& path, const IntArray& a) {
  const std::string bytes = slurp_file(path, a.flag);
  const std::string where = std::string(a.flag) + " '" + path + "' (.npy): ";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw DataError(where + "no NumPy header; write it with numpy.save");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw DataError(where + "the header is cut short");
    header_len = 0;
    for (int b = 3; b >= 0; --b) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + b]);
    start = 12;
  } else {
    throw DataError(where + "format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (header_len > bytes.size() - start) throw DataError(where + "the header runs past the end");
  // A dict of three short keys: NumPy itself refuses headers past 10,000 bytes by default.
  if (header_len > kMaxNpyHeader)
    throw DataError(where + "the header is " + std::to_string(header_len) + " bytes, more than the " +
                    std::to_string(kMaxNpyHeader) + " an array of ids needs; save it with numpy.save");
  const std::string header = bytes.substr(start, header_len);
  auto value_of = [&](const std::string& key) {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) throw DataError(where + "the header lacks '" + key + "'");
    const auto colon = header.find(':', k);
    if (colon == std::string::npos) throw DataError(where + "the header's '" + key + "' has no value");
    size_t v = colon + 1;
    while (v < header.size() && header[v] == ' ') ++v;
    return header.substr(v);
  };
  const std::string descr = value_of("descr");
  int width = 0;
  bool is_unsigned = false;
  if (descr.rfind("'<u2'", 0) == 0) {
    width = 2;
    is_unsigned = true;
  } else if (descr.rfind("'<i4'", 0) == 0) {
    width = 4;
  } else if (descr.rfind("'<i8'", 0) == 0) {
    width = 8;
  } else if (descr.rfind("'|u1'", 0) == 0) {
    width = 1;
    is_unsigned = true;
  } else {
    throw DataError(where + "element type " + spec::printable(descr.substr(0, descr.find(',')), 40) +
                    " is not uint16, int32 or int64 (little-endian); save the array as one of them");
  }
  if (value_of("fortran_order").rfind("False", 0) != 0)
    throw DataError(where + "the array is in Fortran order; save a C-order array");
  const std::string shape = value_of("shape");
  if (shape.empty() || shape[0] != '(') throw DataError(where + "the header's shape is unreadable");
  std::vector<uint64_t> dims;
  size_t i = 1;
  while (i < shape.size() && shape[i] != ')') {
    if (shape[i] == ' ' || shape[i] == ',') {
      ++i;
      continue;
    }
    if (shape[i] < '0' || shape[i] > '9') throw DataError(where + "the header's shape is unreadable");
    uint64_t d = 0;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
      if (d > (uint64_t{1} << 40)) throw DataError(where + "a dimension is too large");
      d = 10 * d + static_cast<uint64_t>(shape[i] - '0');
      ++i;
    }
    dims.push_back(d);
  }
  uint64_t count = 1;
  int non_unit = 0;
  for (auto d : dims) {
    count *= d;
    non_unit += d != 1;
    if (count > (uint64_t{1} << 40)) throw DataError(where + "the array is too large");
  }
  if (dims.empty() || non_unit > 1)
    throw DataError(where + "the array must be one-dimensional (its shape has " +
                    std::to_string(dims.size()) + " dimensions); save a flat array");
  const size_t data = start + header_len;
  if (count * static_cast<uint64_t>(width) != bytes.size() - data)
    throw DataError(where + "the header promises " + std::to_string(count) + " values of " +
                    std::to_string(width) + " bytes but the file holds " +
                    std::to_string(bytes.size() - data) + " data bytes; write it again");
  return ids_from(path, reinterpret_cast<const unsigned char*>(bytes.data() + data),
                  static_cast<size_t>(count), width, is_unsigned, a);
}

}  // namespace

std::vector<int32_t> read_npy_tokens(const std::string& path, int64_t vocab) {
  return read_npy_ints(path, token_ids(vocab));
}

std::vector<int32_t> read_npy_positions(const std::string& path) {
  return read_npy_ints(path, {"--positions", "position", int64_t{1} << 31,
                              "is negative or past 2^31; give the positions the dataloader "
                              "emitted (0 at each document's first token)"});
}

std::vector<int32_t> read_raw_tokens(const std::string& path, const std::string& raw_dtype,
                                     int64_t vocab) {
  const spec::TokenDtype dtype = spec::token_dtypes().parse(raw_dtype);
  const int width = dtype == spec::TokenDtype::U16 ? 2 : dtype == spec::TokenDtype::I32 ? 4 : 8;
  const bool is_unsigned = dtype == spec::TokenDtype::U16;
  const std::string bytes = slurp_file(path, "--tokens");
  if (bytes.size() % static_cast<size_t>(width) != 0)
    throw DataError("--tokens '" + path + "': " + std::to_string(bytes.size()) +
                    " bytes is not a whole number of " + raw_dtype + " ids; check --tokens-dtype");
  return ids_from(path, reinterpret_cast<const unsigned char*>(bytes.data()),
                  bytes.size() / static_cast<size_t>(width), width, is_unsigned, token_ids(vocab));
}

}  // namespace parity::datasets
