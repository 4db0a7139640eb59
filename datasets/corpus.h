// Text corpora for the reference trainer: the Debian fortunes files (the default,
// small and always available offline) and JSONL shards in the C4 format.
//
// Everything here uses plain std types; no torch.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/bad_input.h"

namespace parity::datasets {

// Bad user input: a missing or unreadable file, a malformed line, too little data for
// the requested shape, an unusable cache directory. The CLI maps this error to exit
// code 2 and prints what() as one line on stderr, so every message is a single
// self-explanatory line that names the thing, the place and the remedy, e.g.
//   data.jsonl:17: malformed JSONL line (expected an object with a string field "text"): ...
// Programming errors (bad indices, violated preconditions) are std::invalid_argument or
// std::logic_error instead.
class DataError : public spec::BadInput {
 public:
  explicit DataError(const std::string& message) : spec::BadInput(message) {}
};

// Directory of the Debian package `fortunes` (apt-get install fortunes).
inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";

// Loads every fortune from the fortune text files in `dir`.
//  - Files: the regular files whose name has no extension (no '.'), in sorted filename
//    order. The *.dat index files, the *.u8 symlinks, directories (e.g. `off/`) and
//    symlinks that point at a file already loaded are skipped.
//  - Documents: each file is split at lines that are exactly "%"; the lines between two
//    separators, joined with '\n' (no trailing newline), form one document. Documents
//    that are empty or only whitespace are dropped. Text is kept in file order and is
//    not otherwise altered.
// Throws DataError if the directory does not exist (remedy: install the Debian package
// `fortunes` or pass --data), if a file cannot be read, or if no document was found.
std::vector<std::string> load_fortunes(const std::string& dir = kDefaultFortunesDir);

// Loads a JSONL file: one JSON object per line with a string field "text" (the C4 shard
// format; other fields are ignored). Blank lines are skipped, a trailing '\r' (CRLF
// files) and a leading UTF-8 byte order mark are tolerated, and documents whose text is
// empty are dropped. The texts are returned in file order.
// Throws DataError naming `path` if the file does not exist or cannot be read, naming
// `path:line` if a line is not valid JSON or not an object with a string "text", and if
// the file yields no document at all.
std::vector<std::string> load_jsonl(const std::string& path);

// FNV-1a 64-bit hash helpers, used to key cache files (tokenizer model, token stream).
// fnv1a64 continues from `seed` (the FNV offset basis by default).
inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = kFnvOffsetBasis);
// Hash of an ordered list of documents; each document's length is mixed in before its
// bytes, so {"ab","c"} and {"a","bc"} differ.
uint64_t hash_documents(const std::vector<std::string>& docs);
// 16 lower-case hex digits.
std::string hex64(uint64_t value);

}  // namespace parity::datasets
