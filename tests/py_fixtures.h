// Fixture files written by a Python script under PARITY_PYTHON (tests/py/*_fixtures.py) with
// the real writers, shared by the readers' suites. Test-only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace parity::testing {

namespace fs = std::filesystem;

inline bool contains_text(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline std::string slurp_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// FNV-1a, 64 bits: the key of one version of the fixture script.
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The fixture files. The script costs seconds (importing torch), and ctest runs each test in a
// process of its own, so its output is kept next to the test binary under the hash of the
// script and the interpreter: written once into a fresh temporary directory, then renamed into
// place (a process that loses the race drops its copy), and read by every later process until
// the script or a module it imports changes (the copies of earlier versions are then removed).
// Delete build/bin/<name> to write them again. The includer defines PARITY_PYTHON.
struct PyFixtures {
  fs::path dir;
  std::string skip;   // why the suite skips (a module missing under PARITY_PYTHON)
  std::string error;  // why the script failed
  nlohmann::json manifest;

  // `script_name` under tests/py, which imports the modules `imports` of tests/py; the copies
  // live next to the test binary under `name`.
  PyFixtures(const std::string& script_name, const std::string& name,
             std::initializer_list<const char*> imports = {}) {
    const fs::path py = fs::path(__FILE__).parent_path() / "py";
    const fs::path script = py / script_name;
    std::string text = slurp_file(script);
    if (text.empty()) {
      error = "cannot read " + script.string();
      return;
    }
    for (const char* m : imports) text += slurp_file(py / m);
    std::error_code ec;
    fs::path root = fs::read_symlink("/proc/self/exe", ec).parent_path() / name;
    if (ec) root = fs::temp_directory_path() / ("parity_" + name);
    char key[32];
    std::snprintf(key, sizeof key, "%016llx",
                  static_cast<unsigned long long>(fnv1a(text + PARITY_PYTHON)));
    dir = root / key;
    if (!fs::exists(dir / "manifest.json")) write(script);
    if (!skip.empty() || !error.empty()) return;
    try {
      manifest = nlohmann::json::parse(slurp_file(dir / "manifest.json"));
    } catch (const std::exception& e) {
      error = "cannot read " + (dir / "manifest.json").string() + ": " + e.what();
    }
  }

  void write(const fs::path& script) {
    const fs::path fresh =
        dir.string() + ".tmp." + std::to_string(static_cast<long long>(::getpid()));
    fs::remove_all(fresh);
    fs::create_directories(fresh);
    const std::string cmd = std::string(PARITY_PYTHON) + " '" + script.string() + "' '" +
                            fresh.string() + "' 2>&1";
    std::string output;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) {
      error = "cannot run " + cmd;
      return;
    }
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, got);
    const int status = ::pclose(pipe);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::error_code ec;
    if (code == 3 && contains_text(output, "missing module")) {
      skip = output.substr(output.find("missing module")) + " under " PARITY_PYTHON
             " (scripts/setup installs python3-torch and python3-numpy)";
    } else if (code != 0) {
      error = cmd + " exited " + std::to_string(code) + ":\n" + output;
    } else {
      fs::rename(fresh, dir, ec);  // fails when another process put its copy there first
      // Fixtures of earlier versions of the script (named by their 16-digit keys) go.
      for (const auto& e : fs::directory_iterator(dir.parent_path(), ec))
        if (e.path() != dir && e.path().filename().string().size() == 16)
          fs::remove_all(e.path(), ec);
    }
    fs::remove_all(fresh, ec);
  }

  std::string path(const std::string& file) const { return (dir / file).string(); }
};


}  // namespace parity::testing
