// The dependency rules between folders hold by test (docs/design.md section 2): LAYERS at the root
// lists, per folder, what its files may include; every `#include "..."` of the project is
// read and checked against it.
//
// The checker is tested twice: on the project itself (no include crosses the table, every
// folder with code has a line, the table has no cycle), and on small trees written here, so
// that a forbidden include, a folder without a line and a cyclic table are each shown to fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

// folder -> what its files may include: folders, single headers, generated headers.
using Rules = std::map<std::string, std::set<std::string>>;

// Parses LAYERS text: '#' comments, blank lines, `folder: entry entry ...`. Throws
// std::runtime_error naming the line for a malformed or repeated line, and for an entry that is
// neither a folder of the table, a header of one, nor a bare generated header name.
Rules parse_rules(const std::string& text) {
  Rules rules;
  std::istringstream in(text);
  std::string line;
  std::vector<std::pair<int, std::string>> entries;  // (line number, entry) to check after
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto colon = line.find(':');
    std::istringstream head(line.substr(0, colon));
    std::string folder, extra;
    head >> folder;
    if (colon == std::string::npos || folder.empty() || (head >> extra))
      throw std::runtime_error("LAYERS:" + std::to_string(n) + ": expected 'folder: entries'");
    if (rules.count(folder))
      throw std::runtime_error("LAYERS:" + std::to_string(n) + ": folder '" + folder +
                               "' has a line already");
    auto& allowed = rules[folder];
    std::istringstream rest(line.substr(colon + 1));
    for (std::string e; rest >> e;) {
      allowed.insert(e);
      entries.push_back({n, e});
    }
  }
  for (const auto& [n, e] : entries) {
    const auto slash = e.find('/');
    const std::string folder = e.substr(0, slash);
    const bool generated = slash == std::string::npos && e.find('.') != std::string::npos;
    if (!generated && !rules.count(folder))
      throw std::runtime_error("LAYERS:" + std::to_string(n) + ": '" + e +
                               "' names no folder of the table");
  }
  return rules;
}

// The folders each folder depends on (an entry `f/x.h` counts as f); a cycle among them is
// returned as "a -> b -> a", none as "".
std::string find_cycle(const Rules& rules) {
  std::map<std::string, std::set<std::string>> deps;
  for (const auto& [folder, allowed] : rules)
    for (const auto& e : allowed) {
      const auto slash = e.find('/');
      if (slash == std::string::npos && !rules.count(e)) continue;  // a generated header
      const std::string to = e.substr(0, slash);
      if (to != folder) deps[folder].insert(to);
    }
  std::map<std::string, int> state;  // 0 unvisited, 1 on the path, 2 done
  std::vector<std::string> path;
  std::string cycle;
  std::function<bool(const std::string&)> visit = [&](const std::string& f) {
    state[f] = 1;
    path.push_back(f);
    for (const auto& to : deps[f]) {
      if (state[to] == 1) {
        auto at = std::find(path.begin(), path.end(), to);
        for (; at != path.end(); ++at) cycle += *at + " -> ";
        cycle += to;
        return true;
      }
      if (state[to] == 0 && visit(to)) return true;
    }
    path.pop_back();
    state[f] = 2;
    return false;
  };
  for (const auto& [folder, allowed] : rules)
    if (state[folder] == 0 && visit(folder)) return cycle;
  return "";
}

struct Include {
  std::string file;    // relative to the root, e.g. "pipelined/stage.cpp"
  int line = 0;
  std::string target;  // what is between the quotes
};

bool is_source(const fs::path& p) {
  const auto ext = p.extension().string();
  return ext == ".h" || ext == ".hpp" || ext == ".cpp" || ext == ".cc";
}

bool skipped_dir(const std::string& name) {
  return name.empty() || name[0] == '.' || name.rfind("build", 0) == 0 || name == "runs" ||
         name == "gpu-out";
}

// The top-level folders under root that hold C++ sources (anywhere below them), and every
// quoted include of those sources.
void scan(const fs::path& root, std::set<std::string>& folders, std::vector<Include>& includes) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const auto& top : fs::directory_iterator(root)) {
    if (!top.is_directory() || skipped_dir(top.path().filename().string())) continue;
    for (auto it = fs::recursive_directory_iterator(top.path()); it != fs::end(it); ++it) {
      if (it->is_directory() && skipped_dir(it->path().filename().string())) {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file() || !is_source(it->path())) continue;
      const std::string rel = fs::relative(it->path(), root).generic_string();
      folders.insert(rel.substr(0, rel.find('/')));
      std::ifstream in(it->path());
      std::string line;
      std::smatch m;
      for (int n = 1; std::getline(in, line); ++n)
        if (std::regex_search(line, m, kInclude)) includes.push_back({rel, n, m[1]});
    }
  }
}

std::string joined(const std::set<std::string>& s) {
  if (s.empty()) return "nothing of ours";
  std::string out;
  for (const auto& e : s) out += (out.empty() ? "" : ", ") + e;
  return out;
}

// One line per include the rules do not allow, and per folder with sources but no rule.
std::vector<std::string> violations(const Rules& rules, const std::set<std::string>& folders,
                                    const std::vector<Include>& includes) {
  std::vector<std::string> out;
  for (const auto& f : folders)
    if (!rules.count(f))
      out.push_back("folder '" + f + "' holds code but has no line in LAYERS; add one that "
                    "says what it may include");
  for (const auto& inc : includes) {
    const std::string from = inc.file.substr(0, inc.file.find('/'));
    const auto rule = rules.find(from);
    if (rule == rules.end()) continue;  // reported above
    const auto slash = inc.target.find('/');
    const std::string to = inc.target.substr(0, slash);
    const bool ok = to == from || rule->second.count(inc.target) ||
                    (slash != std::string::npos && rule->second.count(to));
    if (!ok)
      out.push_back(inc.file + ":" + std::to_string(inc.line) + " includes \"" + inc.target +
                    "\": " + from + " may include only " + joined(rule->second) + " (LAYERS)");
  }
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

// ---- the project itself ----

const fs::path kRoot = PARITY_SOURCE_DIR;

TEST(Layers, TheTableParsesAndHasNoCycle) {
  const auto rules = parse_rules(slurp(kRoot / "LAYERS"));
  EXPECT_EQ(find_cycle(rules), "");
  // The layering rules: the specification includes nothing of ours; the bottom folders only
  // the specification; neither trainer the other, and nothing below the harness the harness.
  EXPECT_TRUE(rules.at("spec").empty());
  for (const char* bottom : {"kernels", "datasets", "reports"})
    EXPECT_EQ(rules.at(bottom), std::set<std::string>{"spec"}) << bottom;
  EXPECT_FALSE(rules.at("reference").count("pipelined"));
  EXPECT_FALSE(rules.at("pipelined").count("reference"));
  for (const char* below : {"kernels", "datasets", "reference", "pipelined", "dumps", "compare",
                            "reports"})
    EXPECT_FALSE(rules.at(below).count("harness")) << below;
  // The matrix room sits above the harness: nothing below it drives a matrix.
  for (const char* below : {"kernels", "datasets", "reference", "pipelined", "dumps", "compare",
                            "reports", "harness"})
    EXPECT_FALSE(rules.at(below).count("matrix")) << below;
}

TEST(Layers, NoIncludeCrossesTheTable) {
  const auto rules = parse_rules(slurp(kRoot / "LAYERS"));
  std::set<std::string> folders;
  std::vector<Include> includes;
  scan(kRoot, folders, includes);
  // The scan saw the project: its folders and a plausible number of includes.
  for (const char* f : {"spec", "kernels", "pipelined", "compare", "dumps", "harness", "matrix",
                        "cli", "tests"})
    EXPECT_TRUE(folders.count(f)) << f;
  EXPECT_GT(includes.size(), 300u);
  const auto bad = violations(rules, folders, includes);
  EXPECT_TRUE(bad.empty()) << lines(bad);
}

// ---- the checker on trees written here ----

using LayersCheck = parity::testing::TempDirTest;

using parity::testing::write_text;

TEST_F(LayersCheck, AForbiddenIncludeIsCaughtWithFileLineAndRule) {
  const auto rules = parse_rules(
      "kernels:\npipelined: kernels\ncompare: kernels pipelined/routing.h\nharness: kernels "
      "pipelined compare\n");
  write_text(dir_ / "kernels" / "ops.h", "#pragma once\n");
  write_text(dir_ / "pipelined" / "routing.h", "#include \"kernels/ops.h\"\n");
  write_text(dir_ / "pipelined" / "stage.cpp",
        "// a comment\n#include <vector>\n#include \"pipelined/routing.h\"\n"
        "#include \"harness/closed_form.h\"\n");
  write_text(dir_ / "compare" / "localise.cpp",
        "#include \"pipelined/routing.h\"\n  #  include \"pipelined/trainer.h\"\n");
  write_text(dir_ / "harness" / "closed_form.h", "#include \"compare/localise.h\"\n");
  write_text(dir_ / "build" / "generated" / "x.cpp", "#include \"cli/anything.h\"\n");  // skipped
  std::set<std::string> folders;
  std::vector<Include> includes;
  scan(dir_, folders, includes);
  EXPECT_EQ(folders, (std::set<std::string>{"compare", "harness", "kernels", "pipelined"}));
  auto bad = violations(rules, folders, includes);
  std::sort(bad.begin(), bad.end());
  EXPECT_EQ(bad, (std::vector<std::string>{
                     "compare/localise.cpp:2 includes \"pipelined/trainer.h\": compare may "
                     "include only kernels, pipelined/routing.h (LAYERS)",
                     "pipelined/stage.cpp:4 includes \"harness/closed_form.h\": pipelined may "
                     "include only kernels (LAYERS)"}));
}

TEST_F(LayersCheck, AFolderWithCodeButNoLineIsCaught) {
  const auto rules = parse_rules("kernels:\n");
  write_text(dir_ / "kernels" / "ops.cpp", "#include \"kernels/ops.h\"\n");
  write_text(dir_ / "newroom" / "deep" / "thing.cpp", "#include \"kernels/ops.h\"\n");
  write_text(dir_ / "docs" / "notes.txt", "#include \"anything.h\"\n");  // not code
  std::set<std::string> folders;
  std::vector<Include> includes;
  scan(dir_, folders, includes);
  EXPECT_EQ(violations(rules, folders, includes),
            (std::vector<std::string>{"folder 'newroom' holds code but has no line in LAYERS; "
                                      "add one that says what it may include"}));
}

TEST(LayersTable, ACycleIsFoundAndNamed) {
  EXPECT_EQ(find_cycle(parse_rules("a: b\nb: c/x.h\nc: a\n")), "a -> b -> c -> a");
  EXPECT_EQ(find_cycle(parse_rules("a: b\nb:\nc: a b\n")), "");
}

TEST(LayersTable, MalformedLinesAreRefusedNamingTheLine) {
  auto error = [](const std::string& text) {
    try {
      parse_rules(text);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("a:\n\nb a\n"), "LAYERS:3: expected 'folder: entries'");
  EXPECT_EQ(error("a:\na: b\n"), "LAYERS:2: folder 'a' has a line already");
  EXPECT_EQ(error("a: nowhere\n"), "LAYERS:1: 'nowhere' names no folder of the table");
  EXPECT_EQ(error("# a comment\na: gen.h   # generated\n"), "");
}

}  // namespace
