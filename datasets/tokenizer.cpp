#include "datasets/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "datasets/corpus.h"
#include "datasets/token_file.h"

namespace parity::datasets {

namespace fs = std::filesystem;

namespace {

// Bump when the trainer settings below change, so old cached models are not reused.
constexpr const char* kTrainerSettingsTag = "parity-spm-bpe-v1";
constexpr unsigned int kTrainerSeed = 20240601;

// Creates `dir` (and parents) or throws DataError naming it.
void ensure_dir(const std::string& dir, const std::string& remedy) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::error_code ec2;
  if (ec || !fs::is_directory(dir, ec2)) {
    throw DataError("cannot create cache directory '" + dir + "'" +
                    (ec ? " (" + ec.message() + ")" : std::string()) + "; " + remedy);
  }
}

constexpr const char* kCacheRemedy =
    "set PARITY_CACHE_DIR to a writable directory";

// A temporary name next to `path`, unique per process and call.
std::string temp_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

struct Chunk {
  const void* data;
  size_t size;
};

// Writes the chunks, concatenated, to `path` via a temporary file and an atomic rename.
void write_atomically(const std::string& path, std::initializer_list<Chunk> chunks) {
  const std::string tmp = temp_name(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    for (const Chunk& c : chunks) {
      if (out) out.write(static_cast<const char*>(c.data), static_cast<std::streamsize>(c.size));
    }
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw DataError("cannot write cache file '" + tmp + "'; " + kCacheRemedy +
                      " with free space");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw DataError("cannot rename '" + tmp + "' to '" + path + "' (" + ec.message() +
                    "); " + kCacheRemedy);
  }
}

bool read_whole_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Feeds the documents to the SentencePiece trainer in order, one sentence each.
class DocIterator : public sentencepiece::SentenceIterator {
 public:
  explicit DocIterator(const std::vector<std::string>& docs) : docs_(docs) {}
  bool done() const override { return i_ >= docs_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return docs_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& docs_;
  size_t i_ = 0;
};

}  // namespace

std::string Tokenizer::model_file_name(const std::vector<std::string>& docs, int vocab_size) {
  uint64_t h = fnv1a64(kTrainerSettingsTag, std::strlen(kTrainerSettingsTag));
  const int64_t v = vocab_size;
  h = fnv1a64(&v, sizeof(v), h);
  const uint64_t dh = hash_documents(docs);
  h = fnv1a64(&dh, sizeof(dh), h);
  return "tokenizer-bpe" + std::to_string(vocab_size) + "-" + hex64(h) + ".model";
}

namespace {

std::string train_model(const std::vector<std::string>& docs, int vocab_size) {
  size_t longest = 0;
  for (const std::string& d : docs) longest = std::max(longest, d.size());
  // SentencePiece skips sentences longer than max_sentence_length (default 4192 bytes);
  // raise it so every document takes part (the trainer caps it at 1 GiB).
  const size_t max_len = std::min<size_t>(std::max<size_t>(longest + 16, 4192), 1u << 30);

  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "0.9995"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"split_digits", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(max_len)},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(kTrainerSeed);
  DocIterator it(docs);
  std::string serialized;
  const sentencepiece::util::Status st =
      sentencepiece::SentencePieceTrainer::Train(args, &it, &serialized);
  if (!st.ok() || serialized.empty()) {
    std::string why = st.ok() ? "no model was produced" : st.ToString();
    std::replace(why.begin(), why.end(), '\n', ' ');
    throw DataError("tokenizer training (BPE, " + std::to_string(vocab_size) + " pieces) on " +
                    std::to_string(docs.size()) + " documents failed: " + why +
                    "; pass a larger --data file or use a smaller vocabulary");
  }
  return serialized;
}

}  // namespace

std::string default_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  std::string dir = env("PARITY_CACHE_DIR");
  if (dir.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    const std::string home = env("HOME");
    if (!xdg.empty()) {
      dir = (fs::path(xdg) / "parity").string();
    } else if (!home.empty()) {
      dir = (fs::path(home) / ".cache" / "parity").string();
    } else {
      dir = ".parity-cache";
    }
  }
  ensure_dir(dir, kCacheRemedy);
  return dir;
}

Tokenizer Tokenizer::from_serialized(const std::string& bytes, const std::string& path) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status st = sp->LoadFromSerializedProto(bytes);
  if (!st.ok()) {
    throw DataError("tokenizer model '" + path + "' is not a valid SentencePiece model (" +
                    st.ToString() + "); delete it so it is retrained");
  }
  if (sp->eos_id() < 0 || sp->eos_id() >= sp->GetPieceSize()) {
    throw DataError("tokenizer model '" + path +
                    "' has no EOS piece; delete it so it is retrained");
  }
  Tokenizer t;
  t.sp_ = std::move(sp);
  t.model_path_ = path;
  t.model_hash_ = fnv1a64(bytes.data(), bytes.size());
  return t;
}

Tokenizer Tokenizer::load(const std::string& model_path) {
  std::string bytes;
  if (!read_whole_file(model_path, bytes)) {
    throw DataError("tokenizer model '" + model_path +
                    "' cannot be read; check the path or delete it so it is retrained");
  }
  return from_serialized(bytes, model_path);
}

Tokenizer Tokenizer::train_or_load(const std::vector<std::string>& docs,
                                   const std::string& cache_dir, int vocab_size) {
  if (docs.empty()) {
    throw DataError("cannot train a tokenizer on an empty corpus; pass a non-empty --data file");
  }
  if (vocab_size < 300) {
    throw DataError("tokenizer vocabulary size " + std::to_string(vocab_size) +
                    " is too small (byte fallback alone needs 259 pieces); use at least 300");
  }
  ensure_dir(cache_dir, kCacheRemedy);
  const std::string path = (fs::path(cache_dir) / model_file_name(docs, vocab_size)).string();

  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return load(path);

  std::cerr << "training tokenizer (BPE, " << vocab_size << " pieces) on " << docs.size()
            << " documents, cached at " << path << std::endl;
  const std::string serialized = train_model(docs, vocab_size);
  write_atomically(path, {{serialized.data(), serialized.size()}});
  Tokenizer t = from_serialized(serialized, path);
  t.trained_ = true;
  return t;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status st = sp_->Encode(text, &ids);
  if (!st.ok()) {
    throw std::runtime_error("SentencePiece failed to encode a text of " +
                             std::to_string(text.size()) + " bytes: " + st.ToString());
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const int n = sp_->GetPieceSize();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      throw std::invalid_argument("token id " + std::to_string(id) +
                                  " is outside the tokenizer vocabulary [0, " +
                                  std::to_string(n) + ")");
    }
  }
  std::string text;
  const sentencepiece::util::Status st =
      sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!st.ok()) {
    throw std::invalid_argument("SentencePiece failed to decode " + std::to_string(ids.size()) +
                                " ids: " + st.ToString());
  }
  return text;
}

int Tokenizer::eos_id() const { return sp_->eos_id(); }

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

// ---- packed token stream cache ----

namespace {

bool ids_in_range(const std::vector<int32_t>& ids, int vocab_size) {
  return std::all_of(ids.begin(), ids.end(),
                     [vocab_size](int32_t id) { return id >= 0 && id < vocab_size; });
}

// Returns true and fills `out` if `path` is a valid cache for this tokenizer.
bool read_token_cache(const std::string& path, const Tokenizer& tok, std::vector<int32_t>& out) {
  TokenFile f;
  if (!try_read_token_file(path, f)) return false;
  if (f.vocab_size != tok.vocab_size() || f.eos_id != tok.eos_id()) return false;
  out = std::move(f.ids);
  return true;
}

std::vector<int32_t> encode_all(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<std::vector<int32_t>> per_doc(docs.size());
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min<size_t>(hw, std::max<size_t>(1, docs.size() / 64));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&]() {
    try {
      for (;;) {
        const size_t begin = next.fetch_add(256);
        if (begin >= docs.size() || failed) break;
        const size_t end = std::min(docs.size(), begin + 256);
        for (size_t i = begin; i < end; ++i) per_doc[i] = tok.encode(docs[i]);
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);

  size_t total = 0;
  for (const auto& d : per_doc) total += d.size() + 1;
  std::vector<int32_t> stream;
  stream.reserve(total);
  const int32_t eos = tok.eos_id();
  for (auto& d : per_doc) {
    stream.insert(stream.end(), d.begin(), d.end());
    stream.push_back(eos);
    std::vector<int32_t>().swap(d);
  }
  return stream;
}

}  // namespace

std::string token_cache_path(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                             const std::string& cache_dir) {
  return (fs::path(cache_dir) / ("tokens-" + hex64(tokenizer.model_hash()) + "-" +
                                 hex64(hash_documents(docs)) + ".bin"))
      .string();
}

std::vector<int32_t> encode_corpus(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                                   const std::string& cache_dir) {
  ensure_dir(cache_dir, kCacheRemedy);
  const std::string path = token_cache_path(tokenizer, docs, cache_dir);
  std::vector<int32_t> stream;
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (exists && read_token_cache(path, tokenizer, stream)) return stream;

  std::cerr << (exists ? "token cache is invalid, re-encoding " : "encoding ") << docs.size()
            << " documents with " << tokenizer.model_path() << ", cached at " << path
            << std::endl;
  stream = encode_all(tokenizer, docs);
  if (!ids_in_range(stream, tokenizer.vocab_size())) {
    throw std::logic_error("SentencePiece produced a token id outside [0, " +
                           std::to_string(tokenizer.vocab_size()) + ") for model " +
                           tokenizer.model_path());
  }
  write_token_file(path, stream, tokenizer.vocab_size(), tokenizer.eos_id());
  return stream;
}

}  // namespace parity::datasets
