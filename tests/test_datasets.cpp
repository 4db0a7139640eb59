// Tests for parity_datasets: corpora, tokenizer (training, cache, determinism), the
// packed token stream cache, token rows and the micro-batch order.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/corpus.h"
#include "datasets/rows.h"
#include "datasets/token_file.h"
#include "datasets/tokenizer.h"

namespace fs = std::filesystem;
using namespace parity::datasets;

namespace {

// A fresh empty directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("parity_test_datasets_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `fn`, expects a DataError and returns its message.
template <class Fn>
std::string data_error_message(Fn&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DataError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected DataError, nothing was thrown";
  return {};
}

const std::vector<std::string>& all_fortunes() {
  static const std::vector<std::string> docs = load_fortunes();
  return docs;
}

std::vector<std::string> model_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".model") out.push_back(e.path().filename().string());
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- corpus

TEST(Fortunes, LoadsManyNonEmptyDocumentsWithoutSeparators) {
  const auto& docs = all_fortunes();
  EXPECT_GT(docs.size(), 10000u);
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string& d = docs[i];
    ASSERT_FALSE(d.empty()) << "document " << i;
    ASSERT_NE(d.find_first_not_of(" \t\r\n"), std::string::npos) << "blank document " << i;
    std::istringstream lines(d);
    std::string line;
    while (std::getline(lines, line)) ASSERT_NE(line, "%") << "document " << i << ": " << d;
  }
}

TEST(Fortunes, SplitsFilesInSortedOrderAndSkipsIndexFilesAndLinks) {
  TempDir dir;
  write_text(dir.path() / "b", "second file\n%\n");
  write_text(dir.path() / "a", "one\nline two\n%\n%\n  \n%\nthree\n% not a separator\n%\nfour");
  write_text(dir.path() / "a.dat", "binary index");
  fs::create_symlink("a", dir.path() / "a.u8");
  fs::create_symlink("b", dir.path() / "b_link");  // duplicates b
  fs::create_directories(dir.path() / "off");
  write_text(dir.path() / "off" / "x", "offensive\n%\n");
  const auto docs = load_fortunes(dir.str());
  const std::vector<std::string> expected = {"one\nline two", "three\n% not a separator", "four",
                                             "second file"};
  EXPECT_EQ(docs, expected);
}

TEST(Fortunes, MissingDirectoryIsDataErrorWithRemedy) {
  const std::string msg = data_error_message([] { load_fortunes("/nonexistent/fortunes_dir"); });
  EXPECT_NE(msg.find("/nonexistent/fortunes_dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fortunes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data"), std::string::npos) << msg;
}

TEST(Jsonl, LoadsTextsInOrderAndIgnoresOtherFields) {
  TempDir dir;
  const fs::path file = dir.path() / "good.jsonl";
  write_text(file,
             "{\"text\": \"first doc\\nwith newline\", \"url\": \"http://x\", \"n\": 3}\n"
             "\n"
             "   \n"
             "{\"timestamp\": \"2019\", \"text\": \"second \\u00e9\"}\r\n"
             "{\"text\": \"\"}\n"
             "{\"text\": \"third\"}");
  const auto docs = load_jsonl(file.string());
  const std::vector<std::string> expected = {"first doc\nwith newline", "second \xC3\xA9", "third"};
  EXPECT_EQ(docs, expected);
}

TEST(Jsonl, MalformedLineNamesFileAndLine) {
  TempDir dir;
  const fs::path file = dir.path() / "bad.jsonl";
  write_text(file, "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n{\"text\": \"fine\"}\n");
  const std::string msg = data_error_message([&] { load_jsonl(file.string()); });
  EXPECT_NE(msg.find(file.string() + ":3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSONL line"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;

  const fs::path no_text = dir.path() / "no_text.jsonl";
  write_text(no_text, "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  const std::string msg2 = data_error_message([&] { load_jsonl(no_text.string()); });
  EXPECT_NE(msg2.find(no_text.string() + ":2:"), std::string::npos) << msg2;

  const fs::path not_string = dir.path() / "not_string.jsonl";
  write_text(not_string, "[1, 2]\n");
  const std::string msg3 = data_error_message([&] { load_jsonl(not_string.string()); });
  EXPECT_NE(msg3.find(not_string.string() + ":1:"), std::string::npos) << msg3;
}

TEST(Jsonl, MissingOrEmptyFileIsDataError) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.jsonl").string();
  const std::string msg = data_error_message([&] { load_jsonl(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data"), std::string::npos) << msg;

  const fs::path empty = dir.path() / "empty.jsonl";
  write_text(empty, "\n\n");
  EXPECT_THROW(load_jsonl(empty.string()), DataError);
}

TEST(Hash, DocumentBoundariesMatter) {
  EXPECT_NE(hash_documents({"ab", "c"}), hash_documents({"a", "bc"}));
  EXPECT_EQ(hash_documents({"ab", "c"}), hash_documents({"ab", "c"}));
  EXPECT_EQ(hex64(0xabcULL), "0000000000000abc");
}

TEST(CacheDir, HonoursParityCacheDirAndCreatesIt) {
  TempDir dir;
  const std::string want = (dir.path() / "nested" / "cache").string();
  const char* old = std::getenv("PARITY_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("PARITY_CACHE_DIR", want.c_str(), 1);
  const std::string got = default_cache_dir();
  if (old) ::setenv("PARITY_CACHE_DIR", saved.c_str(), 1); else ::unsetenv("PARITY_CACHE_DIR");
  EXPECT_EQ(got, want);
  EXPECT_TRUE(fs::is_directory(want));
}

// ---------------------------------------------------------------- tokenizer

// One training on the full fortunes corpus (about 3 s) shared by the tokenizer tests;
// the determinism test trains a second time.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    docs_ = new std::vector<std::string>(all_fortunes());
    cache_ = new TempDir();
    tok_ = new Tokenizer(Tokenizer::train_or_load(*docs_, cache_->str()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete cache_;
    delete docs_;
  }

  static std::vector<std::string>* docs_;
  static TempDir* cache_;
  static Tokenizer* tok_;
};
std::vector<std::string>* TokenizerTest::docs_ = nullptr;
TempDir* TokenizerTest::cache_ = nullptr;
Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, TrainedModelHasExpectedShape) {
  const Tokenizer& tok = *tok_;
  EXPECT_TRUE(tok.trained());
  EXPECT_EQ(tok.vocab_size(), 2048);
  // SentencePiece's default ids (unk 0, bos 1, eos 2): --documents on delimits documents by
  // them (harness/run_options.cpp).
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(fs::is_regular_file(tok.model_path()));
  EXPECT_EQ(fs::path(tok.model_path()).parent_path(), cache_->path());
  EXPECT_NE(tok.model_path().find("2048"), std::string::npos) << tok.model_path();
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(cache_->path())) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST_F(TokenizerTest, RoundTripsTextExactly) {
  const Tokenizer& tok = *tok_;
  const auto& docs = *docs_;
  std::vector<std::string> samples = {docs[0], docs[1], docs[docs.size() / 2], docs.back()};
  // Text the tokenizer never saw: odd whitespace, non-ASCII and rare characters.
  samples.push_back("  leading spaces,\ttabs,\n\n  blank lines   and trailing spaces  ");
  samples.push_back("unicode: \xE2\x88\x80x \xE2\x88\x88 \xE2\x84\x9D, \xE6\x97\xA5\xE6\x9C\xAC "
                    "\xF0\x9F\x98\x80 caf\xC3\xA9");
  samples.push_back("control \x01\x7f bytes, </s> <unk> <s> look like control pieces");
  for (const std::string& s : samples) {
    const auto ids = tok.encode(s);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 2048);
      ASSERT_NE(id, tok.eos_id());
    }
    EXPECT_EQ(tok.decode(ids), s);
  }
  // Every fortune round-trips.
  size_t failures = 0;
  for (const std::string& d : docs) failures += tok.decode(tok.encode(d)) != d;
  EXPECT_EQ(failures, 0u);
  // BPE actually compresses English text.
  const std::string& d = (*docs_)[3];
  EXPECT_LT(tok.encode(d).size(), d.size() / 2 + 4) << d;
  EXPECT_THROW(tok.decode({5000}), std::invalid_argument);
}

TEST_F(TokenizerTest, SecondCallLoadsTheCachedModel) {
  const auto mtime = fs::last_write_time(tok_->model_path());
  const Tokenizer again = Tokenizer::train_or_load(*docs_, cache_->str());
  EXPECT_FALSE(again.trained());
  EXPECT_EQ(again.model_path(), tok_->model_path());
  EXPECT_EQ(again.model_hash(), tok_->model_hash());
  EXPECT_EQ(fs::last_write_time(again.model_path()), mtime);
  EXPECT_EQ(model_files(cache_->path()).size(), 1u);
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(again.encode((*docs_)[i]), tok_->encode((*docs_)[i]));
}

TEST_F(TokenizerTest, ModelNameIsKeyedByCorpusAndVocabulary) {
  const std::string name = Tokenizer::model_file_name(*docs_, 2048);
  EXPECT_EQ(fs::path(tok_->model_path()).filename().string(), name);
  std::vector<std::string> other(*docs_);
  other.back() += " changed";
  EXPECT_NE(Tokenizer::model_file_name(other, 2048), name);
  EXPECT_NE(Tokenizer::model_file_name(*docs_, 1024), name);
  // Whatever file sits under that name in a cache directory is loaded, not retrained.
  TempDir dir;
  fs::copy_file(tok_->model_path(), dir.path() / name);
  const Tokenizer copy = Tokenizer::train_or_load(*docs_, dir.str());
  EXPECT_FALSE(copy.trained());
  EXPECT_EQ(copy.model_hash(), tok_->model_hash());
  EXPECT_THROW(Tokenizer::train_or_load({}, dir.str()), DataError);
}

TEST(Tokenizer, TooLittleTextForTheVocabularyIsDataError) {
  TempDir dir;
  const std::string msg = data_error_message(
      [&] { Tokenizer::train_or_load({"hello world", "foo bar baz"}, dir.str(), 2048); });
  EXPECT_NE(msg.find("2048"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_TRUE(model_files(dir.path()).empty()) << "a failed training must not leave a model";
  EXPECT_THROW(Tokenizer::train_or_load({"hello"}, dir.str(), 100), DataError);
  EXPECT_THROW(Tokenizer::load((dir.path() / "none.model").string()), DataError);
}

TEST_F(TokenizerTest, TrainingIsDeterministic) {
  TempDir other;
  const Tokenizer second = Tokenizer::train_or_load(*docs_, other.str());
  EXPECT_TRUE(second.trained());
  EXPECT_EQ(fs::path(second.model_path()).filename(), fs::path(tok_->model_path()).filename());
  const std::string a = read_bytes(tok_->model_path());
  const std::string b = read_bytes(second.model_path());
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "model files differ: " << a.size() << " vs " << b.size() << " bytes";
  EXPECT_EQ(second.model_hash(), tok_->model_hash());
}

TEST_F(TokenizerTest, EncodeCorpusPacksDocumentsWithEosAndCaches) {
  const std::vector<std::string> docs(docs_->begin(), docs_->begin() + 300);
  const std::vector<int32_t> stream = encode_corpus(*tok_, docs, cache_->str());

  std::vector<int32_t> expected;
  for (const auto& d : docs) {
    const auto ids = tok_->encode(d);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(tok_->eos_id());
  }
  EXPECT_EQ(stream, expected);
  EXPECT_EQ(std::count(stream.begin(), stream.end(), tok_->eos_id()),
            static_cast<std::ptrdiff_t>(docs.size()));

  fs::path cache_file;
  for (const auto& e : fs::directory_iterator(cache_->path())) {
    if (e.path().extension() == ".bin") cache_file = e.path();
  }
  ASSERT_FALSE(cache_file.empty()) << "no token cache file written";
  const auto mtime = fs::last_write_time(cache_file);
  EXPECT_EQ(encode_corpus(*tok_, docs, cache_->str()), stream);
  EXPECT_EQ(fs::last_write_time(cache_file), mtime) << "cache hit must not rewrite the file";

  // A damaged cache file is detected and rewritten.
  {
    std::fstream f(cache_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    const int32_t junk = 999999;
    f.write(reinterpret_cast<const char*>(&junk), sizeof(junk));
  }
  EXPECT_EQ(encode_corpus(*tok_, docs, cache_->str()), stream);
  EXPECT_EQ(encode_corpus(*tok_, docs, cache_->str()), stream);

  // A different corpus gets a different cache file.
  const std::vector<std::string> fewer(docs.begin(), docs.begin() + 10);
  const auto small = encode_corpus(*tok_, fewer, cache_->str());
  EXPECT_EQ(small, std::vector<int32_t>(expected.begin(), expected.begin() + small.size()));
  size_t bins = 0;
  for (const auto& e : fs::directory_iterator(cache_->path())) bins += e.path().extension() == ".bin";
  EXPECT_EQ(bins, 2u);
}

// ---------------------------------------------------------------- rows

std::vector<int32_t> iota_stream(int32_t n) {
  std::vector<int32_t> s(n);
  for (int32_t i = 0; i < n; ++i) s[i] = i;
  return s;
}

TEST(TokenRows, WindowsAreContiguousAndLabelsShiftByOne) {
  const int64_t T = 7;
  const TokenRows rows(iota_stream(100), T, 4);  // 100 / 8 = 12 rows, 4 tokens dropped
  EXPECT_EQ(rows.seq_len(), T);
  EXPECT_EQ(rows.num_rows(), 12);
  for (int64_t i = 0; i < rows.num_rows(); ++i) {
    const int32_t* r = rows.row(i);
    for (int64_t t = 0; t <= T; ++t) ASSERT_EQ(r[t], i * (T + 1) + t);
  }
  EXPECT_THROW(rows.row(12), std::out_of_range);
  EXPECT_THROW(rows.row(-1), std::out_of_range);

  std::vector<int64_t> inputs, labels;
  fill_microbatch(rows, {3, 0, 11}, inputs, labels);
  ASSERT_EQ(inputs.size(), 3u * T);
  ASSERT_EQ(labels.size(), 3u * T);
  const int64_t which[3] = {3, 0, 11};
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(inputs[b * T + t], which[b] * (T + 1) + t);
      EXPECT_EQ(labels[b * T + t], inputs[b * T + t] + 1);
    }
  }
}

// The message names what one step needs, what the corpus makes, and every factor that can be
// lowered; it blames no single option (a large --batch is as likely as a long --seq-len).
TEST(TokenRows, TooLittleDataIsDataErrorNamingTheBatchAndTheCorpus) {
  BatchShape shape;  // dp 1 x 4 micro-batches x 1 rows
  const std::string msg =
      data_error_message([&] { TokenRows rows(iota_stream(1000), 300, shape); });
  // 1000 tokens in rows of 301 make 3 rows; the step needs 1 x 4 x 1 = 4.
  EXPECT_NE(msg.find("needs 4 rows (dp 1 x 4 micro-batches x 1 rows) of 301 tokens"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("--seq-len 300"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1000 tokens make only 3"), std::string::npos) << msg;
  for (const char* factor : {"--batch", "--microbatches", "--dp", "--seq-len", "--data"})
    EXPECT_NE(msg.find(factor), std::string::npos) << factor << ": " << msg;

  EXPECT_NO_THROW(TokenRows(iota_stream(1204), 300, shape));
  const std::string msg2 = data_error_message([] { TokenRows rows(iota_stream(5), 10, 1); });
  EXPECT_NE(msg2.find("--seq-len 10"), std::string::npos) << msg2;
  EXPECT_THROW(TokenRows(iota_stream(10), 0, 1), DataError);
}

// ---------------------------------------------------------------- micro-batch order

TEST(MicrobatchRows, FollowsTheGlobalRowCounter) {
  const BatchShape shape{2, 3, 2};  // dp 2, M 3, B 2: 12 rows per step
  const int64_t num_rows = 1000;
  // step 1, rank 0: rows 0..5; rank 1: rows 6..11; step 2 rank 0 starts at 12.
  EXPECT_EQ(microbatch_rows(shape, num_rows, 1, 0, 0, false), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(microbatch_rows(shape, num_rows, 1, 0, 2, false), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(microbatch_rows(shape, num_rows, 1, 1, 0, false), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(microbatch_rows(shape, num_rows, 2, 0, 1, false), (std::vector<int64_t>{14, 15}));
  EXPECT_EQ(microbatch_rows(shape, num_rows, 3, 1, 2, false), (std::vector<int64_t>{34, 35}));

  // Every row is used exactly once per epoch when the epoch is a whole number of steps.
  std::set<int64_t> seen;
  for (int64_t step = 1; step <= 5; ++step) {
    for (int r = 0; r < 2; ++r) {
      for (int m = 0; m < 3; ++m) {
        for (int64_t row : microbatch_rows(shape, 60, step, r, m, false)) {
          EXPECT_TRUE(seen.insert(row).second) << "row " << row << " used twice";
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), 60u);
}

TEST(MicrobatchRows, WrapsAroundIntoTheNextEpochInTheSameOrder) {
  const BatchShape shape{1, 4, 3};  // 12 rows per step
  const int64_t num_rows = 10;
  // Step 1 covers counters 0..11: micro-batch 3 holds 9, 10, 11 -> 9, 0, 1.
  EXPECT_EQ(microbatch_rows(shape, num_rows, 1, 0, 3, false), (std::vector<int64_t>{9, 0, 1}));
  // Step 2 starts at counter 12 -> row 2.
  EXPECT_EQ(microbatch_rows(shape, num_rows, 2, 0, 0, false), (std::vector<int64_t>{2, 3, 4}));
  // Step 6 covers counters 60..71, i.e. the same rows as step 1 (epoch of 60 counters).
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(microbatch_rows(shape, num_rows, 6, 0, m, false),
              microbatch_rows(shape, num_rows, 1, 0, m, false));
  }
  // Very long runs do not overflow.
  const auto far = microbatch_rows(shape, num_rows, int64_t{1} << 40, 0, 1, false);
  const __int128 counter = (static_cast<__int128>(int64_t{1} << 40) - 1) * 12 + 1 * 3 + 0;
  EXPECT_EQ(far[0], static_cast<int64_t>(counter % num_rows));
  const BatchShape wide{8, 16, 4};
  const int64_t big_rows = 999983;
  const int64_t step = (int64_t{1} << 42) + 7;
  const __int128 c2 = ((static_cast<__int128>(step) - 1) * 8 + 5) * 16 * 4 + 9 * 4 + 2;
  EXPECT_EQ(microbatch_rows(wide, big_rows, step, 5, 9, false)[2],
            static_cast<int64_t>(c2 % big_rows));
}

TEST(MicrobatchRows, ReverseFeedsTheSameRowsInReversedMicrobatchOrder) {
  const BatchShape shape{2, 4, 2};
  const int64_t num_rows = 37;
  for (int64_t step = 1; step <= 3; ++step) {
    for (int r = 0; r < shape.dp; ++r) {
      std::multiset<int64_t> fwd_set, rev_set;
      for (int m = 0; m < shape.microbatches; ++m) {
        const auto fwd = microbatch_rows(shape, num_rows, step, r, m, false);
        const auto rev = microbatch_rows(shape, num_rows, step, r, m, true);
        EXPECT_EQ(rev, microbatch_rows(shape, num_rows, step, r, shape.microbatches - 1 - m, false));
        fwd_set.insert(fwd.begin(), fwd.end());
        rev_set.insert(rev.begin(), rev.end());
      }
      EXPECT_EQ(fwd_set, rev_set);
    }
  }
  EXPECT_NE(microbatch_rows(shape, num_rows, 1, 0, 0, true),
            microbatch_rows(shape, num_rows, 1, 0, 0, false));
}

TEST(MicrobatchRows, RejectsOutOfRangeArguments) {
  const BatchShape shape{2, 4, 1};
  EXPECT_THROW(microbatch_rows(shape, 10, 0, 0, 0, false), std::invalid_argument);
  EXPECT_THROW(microbatch_rows(shape, 10, 1, 2, 0, false), std::invalid_argument);
  EXPECT_THROW(microbatch_rows(shape, 10, 1, 0, 4, false), std::invalid_argument);
  EXPECT_THROW(microbatch_rows(shape, 0, 1, 0, 0, false), std::invalid_argument);
}

// A NumPy token file is sized before it is read and refused past PARITY_MAX_FILE_BYTES (it was
// read through a doubling stream buffer, whatever its size); a named pipe is refused, not
// waited on.
TEST(NpyTokens, AFilePastTheFileLimitOrNotAFileIsRefusedBeforeReading) {
  TempDir dir;
  const auto path = (dir.path() / "ids.npy").string();
  // Version 1.0: magic, version, a 2-byte header length, the header padded to 64 bytes, then
  // four little-endian uint16 ids.
  std::string header = "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size());
  bytes += '\0';
  bytes += header;
  for (char id : {1, 2, 3, 4}) bytes += std::string{id, '\0'};
  std::ofstream(path, std::ios::binary) << bytes;
  ASSERT_EQ(read_npy_tokens(path, 16), (std::vector<int32_t>{1, 2, 3, 4}));
  ::setenv("PARITY_MAX_FILE_BYTES", std::to_string(bytes.size() - 1).c_str(), 1);
  std::string what;
  try {
    read_npy_tokens(path, 16);
  } catch (const DataError& e) {
    what = e.what();
  }
  ::unsetenv("PARITY_MAX_FILE_BYTES");
  EXPECT_NE(what.find("--tokens '" + path + "' is " + std::to_string(bytes.size()) +
                      " bytes, more than the " + std::to_string(bytes.size() - 1)),
            std::string::npos)
      << what;
  const auto fifo = (dir.path() / "pipe.npy").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  what.clear();
  try {
    read_npy_tokens(fifo, 16);
  } catch (const DataError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("is not a regular file"), std::string::npos) << what;
}
