#include "datasets/token_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/corpus.h"

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

}  // namespace parity::datasets
