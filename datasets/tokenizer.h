// SentencePiece BPE tokenizer trained on the corpus itself, with an on-disk cache for
// both the model and the encoded token stream.
//
// Everything here uses plain std types; no torch. Errors caused by the user's data or
// environment are DataError (see datasets/corpus.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace parity::datasets {

inline constexpr int kDefaultVocabSize = 2048;

// The cache directory for tokenizer models and token streams:
//   $PARITY_CACHE_DIR if set and non-empty, else $XDG_CACHE_HOME/parity, else
//   $HOME/.cache/parity (else ./.parity-cache when even HOME is unset).
// The directory is created if missing; throws DataError naming it if that fails
// (remedy: set PARITY_CACHE_DIR to a writable directory).
std::string default_cache_dir();

class Tokenizer {
 public:
  // Returns the BPE tokenizer for `docs`, training it only if the cache lacks it.
  //  - The model lives at <cache_dir>/tokenizer-bpe<vocab>-<hash>.model where <hash> is
  //    FNV-1a 64 (hex) over the documents, the vocabulary size and the trainer settings,
  //    so a different corpus or size gets a different model. cache_dir is created if
  //    missing.
  //  - If that file exists it is loaded, otherwise the model is trained and written to a
  //    temporary name in cache_dir, then renamed, so a crash never leaves half a model.
  //  - Training is deterministic (same docs -> byte-identical model file): one thread, all
  //    sentences in order (no sampling, no shuffle), fixed seed. Settings: BPE,
  //    character_coverage 0.9995, byte_fallback (any UTF-8 text encodes, rare characters
  //    as bytes), identity normalization with whitespace kept and no dummy prefix (so
  //    decode(encode(s)) == s for valid UTF-8 s), ids unk 0, bos 1, eos 2, no pad.
  //    Each document is one training sentence (max_sentence_length is raised to fit).
  //  - Training prints one line to stderr ("training tokenizer (BPE, 2048 pieces) on N
  //    documents, cached at PATH"); SentencePiece's own logging is silenced.
  // Throws DataError if docs is empty, if training fails on this data (e.g. too little
  // text for the vocabulary size) or if the cache cannot be written or read.
  static Tokenizer train_or_load(const std::vector<std::string>& docs,
                                 const std::string& cache_dir,
                                 int vocab_size = kDefaultVocabSize);

  // The cache file name train_or_load uses for these docs and vocabulary size,
  // "tokenizer-bpe<vocab>-<16 hex digits>.model".
  static std::string model_file_name(const std::vector<std::string>& docs, int vocab_size);

  // Loads an existing model file. Throws DataError naming the file if it is missing or
  // not a SentencePiece model.
  static Tokenizer load(const std::string& model_path);

  // Token ids of `text` (no EOS appended); all ids are in [0, vocab_size()).
  std::vector<int32_t> encode(const std::string& text) const;
  // Inverse of encode. Throws std::invalid_argument on an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  int eos_id() const;
  int vocab_size() const;  // number of pieces, including control and byte pieces
  std::string model_path() const { return model_path_; }
  // FNV-1a 64 of the model file's bytes; keys the token-stream cache.
  uint64_t model_hash() const { return model_hash_; }
  // True if this object's train_or_load call trained the model, false if it was loaded.
  bool trained() const { return trained_; }

 private:
  Tokenizer() = default;
  static Tokenizer from_serialized(const std::string& bytes, const std::string& path);

  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  std::string model_path_;
  uint64_t model_hash_ = 0;
  bool trained_ = false;
};

// The packed token stream of the corpus: each document's tokens followed by EOS, in
// document order. Cached in cache_dir as tokens-<model hash>-<corpus hash>.bin (a 32-byte
// header with a checksum, then native-endian int32 ids; written to a temporary name, then
// renamed), so a second run with the same tokenizer and docs only reads the file. A cache
// file that fails its checks is ignored and rewritten. Every id is verified to be in
// [0, vocab_size). Encoding a cache miss prints one line to stderr and uses all cores.
// Throws DataError if the stream cannot be cached (unwritable cache_dir).
std::vector<int32_t> encode_corpus(const Tokenizer& tokenizer,
                                   const std::vector<std::string>& docs,
                                   const std::string& cache_dir);

// Where encode_corpus caches the stream (a token file, see token_file.h).
std::string token_cache_path(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                             const std::string& cache_dir);

}  // namespace parity::datasets
