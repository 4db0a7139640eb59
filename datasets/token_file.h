// The packed token stream on disk, readable without the tokenizer library.
//
// Format: a 32-byte header {magic "PRTYTOK1", uint64 num_tokens, int32 vocab_size,
// int32 eos_id, uint64 FNV-1a 64 checksum of the id bytes}, then num_tokens native-endian
// int32 ids. Written to a temporary name and renamed.
//
// Why a file: SentencePiece (with its embedded protobuf) and libtorch cannot share one
// process on Debian (their protobuf symbols collide at load time), so the `parity` binary
// runs the `parity-tokenize` tool and reads what it wrote.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parity::datasets {

struct TokenFile {
  std::vector<int32_t> ids;
  int32_t vocab_size = 0;
  int32_t eos_id = 0;
};

// Returns false if the file is missing or fails any check (magic, size, checksum, id range).
bool try_read_token_file(const std::string& path, TokenFile& out);

// Throws DataError naming the file if it cannot be read or is damaged.
TokenFile read_token_file(const std::string& path);

// Token ids written by other tools, for `--tokens`:
//   a NumPy .npy file (recognised by its magic "\x93NUMPY", versions 1-3): one dimension (or
//     several of which only one is not 1), C order, little-endian uint16, int32 or int64 ('<u2',
//     '<i4', '<i8'; '|u1' too);
//   a raw array with no header (nanoGPT's and Megatron's .bin), read only when raw_dtype names
//     its element type: "uint16", "int32" or "int64", little-endian.
// Every id must lie in [0, vocab): the first one outside is refused with its position. Throws
// DataError naming the file, the fault and the remedy.
std::vector<int32_t> read_npy_tokens(const std::string& path, int64_t vocab);
std::vector<int32_t> read_raw_tokens(const std::string& path, const std::string& raw_dtype,
                                     int64_t vocab);
bool is_npy_file(const std::string& path);

// Per-token positions for `--positions`, a .npy array as above (torchtitan's dataloader's
// positions, saved with numpy.save): every value in [0, 2^31). Throws DataError as above.
std::vector<int32_t> read_npy_positions(const std::string& path);

// Atomic write (temporary name + rename); throws DataError naming the file on failure.
void write_token_file(const std::string& path, const std::vector<int32_t>& ids,
                      int32_t vocab_size, int32_t eos_id);

}  // namespace parity::datasets
