#include "datasets/corpus.h"
#include "spec/limits.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#ifdef PARITY_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

namespace parity::datasets {

namespace fs = std::filesystem;

namespace {

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

// Reads a whole file; throws DataError naming the file and the remedy on failure.
std::string read_file(const fs::path& path, const std::string& remedy) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError("cannot open '" + path.string() + "' for reading; " + remedy);
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw DataError("error while reading '" + path.string() + "'; " + remedy);
  }
  return text;
}

// Splits one fortune file into documents at lines that are exactly "%".
void split_fortunes(const std::string& text, std::vector<std::string>& out) {
  std::string doc;
  bool doc_has_line = false;
  auto flush = [&]() {
    if (!is_blank(doc)) out.push_back(doc);
    doc.clear();
    doc_has_line = false;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const size_t len = end - pos;
    if (len == 1 && text[pos] == '%') {
      flush();
    } else {
      if (doc_has_line) doc.push_back('\n');
      doc.append(text, pos, len);
      doc_has_line = true;
    }
    pos = end + 1;
  }
  flush();
}

}  // namespace

std::vector<std::string> load_fortunes(const std::string& dir) {
  const std::string remedy_missing =
      "install the Debian package `fortunes` (apt-get install fortunes) or pass a JSONL "
      "file to --data";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError("fortunes directory '" + dir + "' does not exist (or is not a directory); " +
                    remedy_missing);
  }

  // Regular files first, then symlinks whose target is not one of them.
  std::vector<fs::path> regular;
  std::vector<fs::path> links;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    throw DataError("cannot list fortunes directory '" + dir + "': " + ec.message() +
                    "; check its permissions or pass a JSONL file to --data");
  }
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find('.') != std::string::npos) continue;  // .dat, .u8, dotfiles
    const fs::file_status st = entry.symlink_status(ec);
    if (ec) continue;
    if (fs::is_regular_file(st)) {
      regular.push_back(entry.path());
    } else if (fs::is_symlink(st) && fs::is_regular_file(entry.status(ec)) && !ec) {
      links.push_back(entry.path());
    }
  }
  std::set<fs::path> seen;
  for (const fs::path& p : regular) seen.insert(fs::weakly_canonical(p, ec));
  std::vector<fs::path> files = regular;
  for (const fs::path& p : links) {
    const fs::path target = fs::weakly_canonical(p, ec);
    if (ec || seen.count(target)) continue;
    seen.insert(target);
    files.push_back(p);
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });

  std::vector<std::string> docs;
  for (const fs::path& p : files) {
    split_fortunes(read_file(p, "check its permissions or pass a JSONL file to --data"), docs);
  }
  if (docs.empty()) {
    throw DataError("fortunes directory '" + dir + "' holds no fortunes; " + remedy_missing);
  }
  return docs;
}

std::vector<std::string> load_jsonl(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    throw DataError("data file '" + path +
                    "' does not exist; pass an existing JSONL file to --data");
  }
  if (!fs::is_regular_file(st)) {
    throw DataError("data file '" + path +
                    "' is not a regular file; pass a JSONL file (one JSON object per line) "
                    "to --data");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError("data file '" + path +
                    "' cannot be opened for reading; check its permissions or pass another "
                    "file to --data");
  }

#ifndef PARITY_HAVE_JSON
  throw DataError("this build of parity has no JSON support (nlohmann-json was not found); "
                  "rebuild with nlohmann-json3-dev installed to read '" + path + "'");
#else
  std::vector<std::string> docs;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (is_blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const std::string expected =
        "malformed JSONL line (expected an object with a string field \"text\")";
    if (spec::json_depth(line) > spec::kMaxJsonDepth)
      throw DataError(where + expected + ": the line nests more than " +
                      std::to_string(spec::kMaxJsonDepth) + " deep");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(where + expected + ": " + e.what());
    }
    if (!j.is_object()) {
      throw DataError(where + expected + ": the line is a JSON " + j.type_name() +
                      ", not an object");
    }
    const auto field = j.find("text");
    if (field == j.end()) {
      throw DataError(where + expected + ": the object has no field \"text\"");
    }
    if (!field->is_string()) {
      throw DataError(where + expected + ": field \"text\" is a " + field->type_name() +
                      ", not a string");
    }
    std::string text = field->get<std::string>();
    if (!text.empty()) docs.push_back(std::move(text));
  }
  if (in.bad()) {
    throw DataError("error while reading data file '" + path + "' after line " +
                    std::to_string(line_no) + "; check the file or pass another to --data");
  }
  if (docs.empty()) {
    throw DataError("data file '" + path +
                    "' holds no documents (no line with a non-empty \"text\"); pass a "
                    "non-empty JSONL file to --data");
  }
  return docs;
#endif
}

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t hash_documents(const std::vector<std::string>& docs) {
  uint64_t h = kFnvOffsetBasis;
  const uint64_t count = docs.size();
  h = fnv1a64(&count, sizeof(count), h);
  for (const std::string& d : docs) {
    const uint64_t len = d.size();
    h = fnv1a64(&len, sizeof(len), h);
    h = fnv1a64(d.data(), d.size(), h);
  }
  return h;
}

std::string hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return std::string(buf, 16);
}

}  // namespace parity::datasets
