// The repository explains itself: every reference a comment or a document makes points at
// something the repository holds. Three kinds of reference are checked in every text file of
// the project (sources, CMake files, scripts, matrices, Markdown):
//   - `docs/design.md section N` (or `sections N and M`, `section N.M`): the document must
//     have that numbered heading (`## N. ...`, `### N.M ...`);
//   - `[Note: name]`: a note must be defined once, by a heading `### [Note: name]` in a
//     document under docs/, or by a comment that starts with it (`// [Note: name] text...`);
//   - a file: a path that starts with one of the project's top-level folders (`kernels/x.h`),
//     or a document's name (`README.md`, upper case), must exist.
// In C++ files only comments are read (string literals are data, e.g. test fixtures). A path
// whose name is an upper-case placeholder (`tests/NAME.cpp`) names no file. Upstream
// provenance (`torchtitan/...`, `attn_gym/...`) starts with no folder of ours and is not a
// reference into the repository. The checker is tested on the project and on small trees
// written here, so that each kind of dead reference is shown to fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

bool is_text_file(const fs::path& rel) {
  static const std::set<std::string> kExt = {".h", ".cpp", ".md", ".txt", ".toml", ".py",
                                             ".cmake", ".json"};
  const std::string top = rel.begin()->string();
  if (kExt.count(rel.extension().string())) return true;
  return rel.extension().empty() && (top == "scripts" || top == ".ci" || rel == "LAYERS");
}

// The project's own text files, relative to root: build trees, run outputs and hidden
// folders (git) are not the project, and this file, which spells out the forms it looks for,
// is not read.
std::vector<fs::path> project_files(const fs::path& root) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path rel = fs::relative(it->path(), root);
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      const bool skip = (name.size() > 1 && name[0] == '.' && name != ".ci") ||
                        name.rfind("build", 0) == 0 || name == "runs" || name == "gpu-out";
      if (skip) it.disable_recursion_pending();
      continue;
    }
    if (rel == "tests/test_references.cpp") continue;
    if (it->is_regular_file() && is_text_file(rel)) out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Targets {
  std::set<std::string> sections;            // "5", "5.2"
  std::map<std::string, std::string> notes;  // "deposit order" -> where it is defined
};

// Numbered headings of docs/design.md and note headings of every docs/*.md.
Targets read_targets(const fs::path& root) {
  Targets t;
  const fs::path docs = root / "docs";
  if (!fs::is_directory(docs)) return t;
  for (const auto& e : fs::directory_iterator(docs)) {
    if (e.path().extension() != ".md") continue;
    std::istringstream in(parity::testing::read_text(e.path()));
    const bool design = e.path().filename() == "design.md";
    for (std::string line; std::getline(in, line);) {
      size_t hashes = 0;
      while (hashes < line.size() && line[hashes] == '#') ++hashes;
      if (hashes < 2 || hashes >= line.size() || line[hashes] != ' ') continue;
      const std::string title = line.substr(hashes + 1);
      if (title.rfind("[Note: ", 0) == 0 && title.find(']') != std::string::npos) {
        t.notes.emplace(title.substr(7, title.find(']') - 7), e.path().filename().string());
        continue;
      }
      if (!design) continue;
      size_t i = 0;
      while (i < title.size() && (std::isdigit(static_cast<unsigned char>(title[i])) ||
                                  title[i] == '.'))
        ++i;
      std::string number = title.substr(0, i);
      while (!number.empty() && number.back() == '.') number.pop_back();
      if (!number.empty()) t.sections.insert(number);
    }
  }
  return t;
}

bool path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '/';
}

// The section numbers after "docs/design.md section" / "sections": "5", "5 and 9", "5, 6".
std::vector<std::string> section_numbers(const std::string& line, size_t pos) {
  std::vector<std::string> out;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    size_t end = pos;
    while (end < line.size() && (std::isdigit(static_cast<unsigned char>(line[end])) ||
                                 line[end] == '.'))
      ++end;
    std::string n = line.substr(pos, end - pos);
    while (!n.empty() && n.back() == '.') n.pop_back();
    if (n.empty()) break;
    out.push_back(n);
    pos = end;
    if (line.compare(pos, 5, " and ") == 0) pos += 5;
    else if (line.compare(pos, 2, ", ") == 0) pos += 2;
    else break;
  }
  return out;
}

bool is_cpp(const fs::path& rel) { return rel.extension() == ".h" || rel.extension() == ".cpp"; }

// The comment of a C++ line: what follows the first `//` outside a string or character literal
// ("" when none). A block comment's lines are not read.
std::string comment_of(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '/' && line[i + 1] == '/') {
      return line.substr(i);
    }
  }
  return "";
}

// "// [Note: name] ..." at the start of a comment defines the note `name`.
std::string note_defined_by(const std::string& text) {
  const size_t p = text.find_first_not_of(" \t");
  if (p == std::string::npos || text.compare(p, 10, "// [Note: ") != 0) return "";
  const size_t close = text.find(']', p);
  return close == std::string::npos ? "" : text.substr(p + 10, close - p - 10);
}

bool placeholder(const std::string& path) {
  const std::string stem = fs::path(path).stem().string();
  return !stem.empty() && std::all_of(stem.begin(), stem.end(), [](char c) {
    return std::isupper(static_cast<unsigned char>(c)) || c == '_';
  });
}

// The text of a file that references are read from: whole lines, or a C++ file's comments.
std::vector<std::string> readable_lines(const fs::path& root, const fs::path& rel) {
  std::vector<std::string> out;
  std::istringstream in(parity::testing::read_text(root / rel));
  for (std::string line; std::getline(in, line);) out.push_back(is_cpp(rel) ? comment_of(line) : line);
  return out;
}

// Every dead reference, as "file:line: what". `tops` are the repository's top-level folders.
std::vector<std::string> dead_references(const fs::path& root) {
  Targets targets = read_targets(root);
  std::set<std::string> tops;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) tops.insert(e.path().filename().string());
  std::vector<std::string> bad;
  const auto files = project_files(root);
  // Notes defined in code comments join those the documents define; each is defined once.
  for (const auto& rel : files) {
    const auto lines = readable_lines(root, rel);
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string name = note_defined_by(lines[i]);
      if (name.empty()) continue;
      const std::string here = rel.string() + ":" + std::to_string(i + 1);
      if (!targets.notes.emplace(name, here).second)
        bad.push_back(here + ": [Note: " + name + "] is defined again (first in " +
                      targets.notes[name] + ")");
    }
  }
  for (const auto& rel : files) {
    const auto text = readable_lines(root, rel);
    int number = 0;
    for (const std::string& line : text) {
      ++number;
      const std::string where = rel.string() + ":" + std::to_string(number) + ": ";
      // Sections of the design document.
      for (const std::string key : {"docs/design.md section ", "docs/design.md sections "}) {
        for (size_t p = line.find(key); p != std::string::npos; p = line.find(key, p + 1)) {
          const auto numbers = section_numbers(line, p + key.size());
          if (numbers.empty()) bad.push_back(where + "'" + key + "' without a number");
          for (const auto& n : numbers)
            if (!targets.sections.count(n))
              bad.push_back(where + "docs/design.md has no section " + n);
        }
      }
      // Notes (a heading that defines one is not a reference).
      const bool defines = line.rfind("### [Note: ", 0) == 0 || !note_defined_by(line).empty();
      for (size_t p = line.find("[Note: "); !defines && p != std::string::npos;
           p = line.find("[Note: ", p + 1)) {
        const size_t close = line.find(']', p);
        if (close == std::string::npos) continue;
        const std::string name = line.substr(p + 7, close - p - 7);
        if (!targets.notes.count(name))
          bad.push_back(where + "nothing defines [Note: " + name + "]");
      }
      // Files: a path under a top-level folder of ours, or a bare Markdown name.
      for (size_t i = 0; i < line.size();) {
        if (!path_char(line[i]) || (i > 0 && path_char(line[i - 1]))) {
          ++i;
          continue;
        }
        size_t end = i;
        while (end < line.size() && path_char(line[end])) ++end;
        std::string word = line.substr(i, end - i);
        i = end;
        while (!word.empty() && (word.back() == '.' || word.back() == '/')) word.pop_back();
        const size_t slash = word.find('/');
        const bool markdown = word.size() > 3 && word.compare(word.size() - 3, 3, ".md") == 0 &&
                              placeholder(word);  // a document's name, in upper case
        const bool ours = slash != std::string::npos && tops.count(word.substr(0, slash)) &&
                          fs::path(word).has_extension() && !placeholder(word);
        if (ours || (markdown && slash == std::string::npos)) {
          const bool exists = ours ? fs::exists(root / word)
                                   : fs::exists(root / word) || fs::exists(root / "docs" / word);
          if (!exists) bad.push_back(where + "no file '" + word + "' in the repository");
        }
      }
    }
  }
  return bad;
}

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// ---- the project itself ----

const fs::path kRoot = PARITY_SOURCE_DIR;

TEST(References, EveryReferenceInTheProjectResolves) {
  // The scan saw the project: its design document, its notes and its files.
  const Targets t = read_targets(kRoot);
  EXPECT_GE(t.sections.size(), 10u);
  EXPECT_FALSE(t.notes.empty());
  EXPECT_GT(project_files(kRoot).size(), 200u);
  const auto bad = dead_references(kRoot);
  EXPECT_TRUE(bad.empty()) << lines(bad);
}

// ---- the checker on trees written here ----

using ReferenceCheck = parity::testing::TempDirTest;

class ReferenceTree : public ReferenceCheck {
 protected:
  void SetUp() override {
    ReferenceCheck::SetUp();
    parity::testing::write_text(dir_ / "docs/design.md",
          "# design\n## 1. One\n### 1.2 Detail\n## 2. Two\n### [Note: deposit order]\ntext\n");
    parity::testing::write_text(dir_ / "kernels/a.h", "// fine: docs/design.md sections 1 and 2, section 1.2\n"
                                "// cites [Note: deposit order]; kernels/a.h; torchtitan/models/x.py\n");
  }
};

TEST_F(ReferenceTree, AGoodTreeHasNoDeadReference) {
  EXPECT_EQ(lines(dead_references(dir_)), "");
}

TEST_F(ReferenceTree, AMissingSectionIsNamedWithFileAndLine) {
  parity::testing::write_text(dir_ / "kernels/b.cpp", "int x;\n// see docs/design.md sections 2 and 3\n");
  EXPECT_EQ(lines(dead_references(dir_)), "kernels/b.cpp:2: docs/design.md has no section 3\n");
}

TEST_F(ReferenceTree, AMissingNoteIsNamed) {
  parity::testing::write_text(dir_ / "kernels/b.cpp", "int x;  // see [Note: stale block]\n");
  EXPECT_EQ(lines(dead_references(dir_)),
            "kernels/b.cpp:1: nothing defines [Note: stale block]\n");
}

TEST_F(ReferenceTree, ANoteDefinedInACommentResolvesOnceAndTwiceIsRefused) {
  parity::testing::write_text(dir_ / "kernels/b.cpp", "// [Note: 1F1B order] the text of the note\nint x;  // see [Note: 1F1B order]\n");
  EXPECT_EQ(lines(dead_references(dir_)), "");
  parity::testing::write_text(dir_ / "kernels/c.cpp", "// [Note: 1F1B order] again\n");
  EXPECT_EQ(lines(dead_references(dir_)),
            "kernels/c.cpp:1: [Note: 1F1B order] is defined again (first in kernels/b.cpp:1)\n");
}

TEST_F(ReferenceTree, StringLiteralsAndPlaceholdersAreNotReferences) {
  parity::testing::write_text(dir_ / "tests/t.cpp", "auto s = \"see DESIGN.md and kernels/gone.h // x\";\n"
                              "// one binary per unit: tests/NAME.cpp\n");
  EXPECT_EQ(lines(dead_references(dir_)), "");
}

TEST_F(ReferenceTree, AMissingFileAndAnOutsideDocumentAreNamed) {
  parity::testing::write_text(dir_ / "LAYERS", "# the rules (DESIGN.md section 2); kernels/gone.h\n");
  parity::testing::write_text(dir_ / "kernels/c.h", "int y;  // kernels/gone.h too\n");
  EXPECT_EQ(lines(dead_references(dir_)),
            "LAYERS:1: no file 'DESIGN.md' in the repository\n"
            "LAYERS:1: no file 'kernels/gone.h' in the repository\n"
            "kernels/c.h:1: no file 'kernels/gone.h' in the repository\n");
}

TEST_F(ReferenceTree, BuildTreesAndHiddenFoldersAreNotTheProject) {
  parity::testing::write_text(dir_ / "build/x.h", "// DESIGN.md\n");
  parity::testing::write_text(dir_ / ".git/y.md", "see DESIGN.md\n");
  EXPECT_EQ(lines(dead_references(dir_)), "");
}

}  // namespace
