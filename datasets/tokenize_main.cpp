// parity-tokenize: tokenizes a corpus into a cached token file and prints its path.
//
//   parity-tokenize [--data FILE.jsonl] [--cache DIR]
//
// The corpus is the Debian fortunes text unless --data names a JSONL file. The tokenizer
// (SentencePiece BPE, 2048 pieces) is trained at first use and cached, as is the token
// stream. Exit codes: 0 with the token file path on stdout; 2 on bad input, with one line
// on stderr. It is a separate program because SentencePiece cannot be loaded into a process
// that holds libtorch (see token_file.h).
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "datasets/corpus.h"
#include "datasets/tokenizer.h"

int main(int argc, char** argv) {
  using namespace parity::datasets;
  std::string data, cache;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--data" || a == "--cache") && i + 1 < argc) {
      (a == "--data" ? data : cache) = argv[++i];
    } else {
      std::cerr << "parity-tokenize: unknown argument '" << a
                << "'; usage: parity-tokenize [--data FILE.jsonl] [--cache DIR]\n";
      return 2;
    }
  }
  try {
    const auto docs = data.empty() ? load_fortunes() : load_jsonl(data);
    if (cache.empty()) cache = default_cache_dir();
    const auto tok = Tokenizer::train_or_load(docs, cache);
    encode_corpus(tok, docs, cache);
    std::cout << token_cache_path(tok, docs, cache) << "\n";
    return 0;
  } catch (const DataError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tokenizer failed: " << e.what() << "\n";
    return 1;
  }
}
