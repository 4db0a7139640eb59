// A sandbox for running the `parity` binary the way a careless or hostile user would, and for
// checking afterwards that it behaved: what it exited with, what it said on stderr, that no
// file it was given changed, that it left no file of its own, no temporary file and no live
// process behind.
//
// Each run gets a fresh directory (its working directory) holding hard links to a set of
// shared fixtures: a checkpoint, dumps of three runs, a mixed dump directory, a token file, a
// matrix file and a matrix run's results, made once per build by the parity binary itself and
// reused by every test process (a lock and a stamp of the binary keep them consistent). TMPDIR
// points into the run's directory too, so that anything parity leaves there is seen.
//
// A run's process is the leader of its own process group; after it exits the group must be
// empty (a worker left running would still be in it). A run past its time limit is killed
// with its group and reported.
#pragma once

#include <gtest/gtest.h>

#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dumps/h5.h"

namespace parity::testing {

namespace fs = std::filesystem;

// "a 'b c' ''" -> {"a", "b c", ""}: words split at spaces, single quotes group (and '' is an
// empty word, what an unset shell variable gives).
inline std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false, quoted = false;
  for (char c : s) {
    if (c == '\'') {
      quoted = !quoted;
      in_word = true;
    } else if (c == ' ' && !quoted) {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

inline std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + (a.empty() || a.find(' ') != std::string::npos ? "'" + a + "'" : a);
  return s;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunResult {
  int status = 0;        // as waitpid gives it
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
  bool exited() const { return !timed_out && WIFEXITED(status); }
  int code() const { return exited() ? WEXITSTATUS(status) : -1; }
  bool signalled() const { return !timed_out && WIFSIGNALED(status); }
  std::string how() const {
    if (timed_out) return "timed out after " + std::to_string(seconds) + " s";
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
};

// Every entry below a directory: its path relative to it, with inode, size and modification
// time, so that a file replaced, rewritten, added or removed shows as a difference.
using Snapshot = std::map<std::string, std::string>;

inline Snapshot snapshot(const fs::path& dir) {
  Snapshot s;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    s[fs::relative(it->path(), dir).string()] =
        std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
        std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  return s;
}

// What differs between two snapshots, one line per entry; "" when nothing.
inline std::string differences(const Snapshot& before, const Snapshot& after) {
  std::string d;
  for (const auto& [p, v] : after) {
    const auto it = before.find(p);
    if (it == before.end()) d += "  new: " + p + "\n";
    else if (it->second != v) d += "  changed: " + p + "\n";
  }
  for (const auto& [p, v] : before)
    if (!after.count(p)) d += "  removed: " + p + "\n";
  return d;
}

// Whether any process of the group is alive.
inline bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno == EPERM; }

// Runs argv[0] = PARITY_BIN with `args` in `cwd`, stdout and stderr into `capture_dir`. The
// child leads its own process group. `during`, if set, is called with the child's pid while it
// runs (to signal it); the run is killed (with its group) after `limit_s`. A nonzero
// `address_space` caps the child's virtual memory (RLIMIT_AS, in bytes): an allocation past
// it fails in the child instead of taking the machine's memory.
inline RunResult run_in(const fs::path& cwd, const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env,
                        const fs::path& capture_dir, double limit_s = 30,
                        const std::function<void(pid_t)>& during = {},
                        uint64_t address_space = 0) {
  const fs::path out = capture_dir / "stdout.txt", err = capture_dir / "stderr.txt";
  std::vector<std::string> argv_s = {PARITY_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    if (address_space) {
      const struct rlimit cap {address_space, address_space};
      if (::setrlimit(RLIMIT_AS, &cap) != 0) ::_exit(126);
    }
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::FILE* o = std::freopen(out.c_str(), "w", stdout);
    std::FILE* e = std::freopen(err.c_str(), "w", stderr);
    if (!o || !e) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  RunResult r;
  if (during) during(pid);
  for (;;) {
    const pid_t w = ::waitpid(pid, &r.status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid) break;
    if (r.seconds > limit_s) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &r.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A worker that outlives its launcher is still in the group: give it a moment, then it is
  // a finding (and is killed, so that it does not disturb the next test).
  for (int i = 0; i < 200 && group_alive(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (group_alive(pid)) {
    ::kill(-pid, SIGKILL);
    r.err += "\n<sandbox: a process of the run's group outlived it>";
    r.status = -1;
  }
  r.out += read_file(out);
  r.err = read_file(err) + r.err;
  return r;
}

// The fixtures every sandbox run sees, made once per build of the binary.
class Fixtures {
 public:
  // The directory holding them, made (under a lock) when missing or made by another binary.
  static const fs::path& dir() {
    static const fs::path d = make();
    return d;
  }

 private:
  // The binary that makes them and the test that defines them: either rebuilt, new fixtures.
  static std::string stamp() {
    std::string s;
    for (const char* f : {PARITY_BIN, "/proc/self/exe"}) {
      struct stat st {};
      ::stat(f, &st);
      s += std::to_string(st.st_size) + "-" + std::to_string(st.st_mtim.tv_sec) + "-";
    }
    return s;
  }

  static void must(const RunResult& r, const std::string& what) {
    if (!r.exited() || r.code() != 0)
      throw std::runtime_error("making fixture " + what + ": " + r.how() + "\n" + r.err);
  }

  static fs::path make() {
    // One root per test program: each rebuilds only its own set.
    std::error_code ec;
    const std::string self = fs::read_symlink("/proc/self/exe", ec).filename().string();
    const fs::path root = fs::path(PARITY_FIXTURE_DIR) / ("fixtures-" + self);
    fs::create_directories(root);
    const int lock = ::open((root / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    ::flock(lock, LOCK_EX);
    const fs::path set = root / ("set-" + stamp());
    if (!fs::exists(set / "ready")) {
      for (const auto& e : fs::directory_iterator(root))
        if (e.path().filename() != ".lock") fs::remove_all(e.path());
      fs::create_directories(set);
      build(set);
      std::ofstream(set / "ready") << "ok\n";
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return set;
  }

  // The checkpoint again, with one parameter element NaN (through the HDF5 layer, so that the
  // reader sees a well-formed file whose numbers are wrong).
  static void copy_with_a_nan(const fs::path& from, const fs::path& to) {
    const auto in = h5::File::open_read(from.string());
    auto out = h5::File::create(to.string());
    for (const char* a : {"schema", "flavor", "git_sha"})
      h5::set_attr(out, "/", a, h5::attr_string(in, "/", a));
    for (const char* a : {"schema_version", "seed", "param_count"})
      h5::set_attr(out, "/", a, h5::attr_int(in, "/", a));
    bool first = true;
    for (const auto& name : h5::list(in, "/params")) {
      auto arr = h5::read(in, "/params/" + name);
      if (first && arr.dtype == h5::DType::F32 && arr.numel() > 0) {
        const float nan = std::nanf("");
        std::memcpy(arr.bytes.data(), &nan, sizeof nan);
        first = false;
      }
      h5::write(out, "/params/" + name, arr.dtype, arr.shape, arr.bytes.data());
    }
    out.commit();
  }

  // A safetensors file of one fp32 tensor of n zeros, by the specification.
  static std::string safetensors_one(const std::string& name, int n) {
    std::string header = "{\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [" +
                         std::to_string(n) + "], \"data_offsets\": [0, " +
                         std::to_string(4 * n) + "]}}";
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + std::string(4 * static_cast<size_t>(n), '\0');
  }

  // A NumPy .npy (format 1.0) of 2- or 4-byte little-endian elements (descr '<u2' or '<f4').
  static std::string npy(const std::string& descr, const std::vector<double>& values) {
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                         std::to_string(values.size()) + ",), }";
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
    out += header;
    for (double v : values) {
      if (descr == "<u2") {
        const uint16_t u = static_cast<uint16_t>(v);
        out.append(reinterpret_cast<const char*>(&u), 2);
      } else {
        const float f = static_cast<float>(v);
        out.append(reinterpret_cast<const char*>(&f), 4);
      }
    }
    return out;
  }

  static void build(const fs::path& d) {
    const std::map<std::string, std::string> env = {{"PARITY_CACHE_DIR", PARITY_TEST_CACHE_DIR}};
    const fs::path cap = d / ".capture";
    fs::create_directories(cap);
    auto parity = [&](const std::string& args, const std::string& what) {
      must(run_in(d, words(args), env, cap, 300), what);
    };
    const std::string tiny = "--flavor tiny --steps 1 --seq-len 16 --microbatches 2 --quiet";
    parity("init --flavor tiny --seed 7 --out ckpt.h5", "ckpt.h5");
    copy_with_a_nan(d / "ckpt.h5", d / "nan.h5");
    parity("train " + tiny + " --init ckpt.h5 --dump A --ledger", "dump A");
    parity("train --trainer pipelined --pp 2 --vp 2 " + tiny + " --init ckpt.h5 --dump B --ledger",
           "dump B");
    parity("train --trainer pipelined --pp 2 --nproc 2 --backend gloo " + tiny +
               " --init ckpt.h5 --dump C",
           "dump C");
    // Two runs' files in one directory, and a 2-rank run's files under four names.
    fs::create_directories(d / "mixed");
    fs::create_hard_link(d / "A/rank0.h5", d / "mixed/rank0.h5");
    fs::create_hard_link(d / "C/rank1.h5", d / "mixed/rank1.h5");
    fs::create_directories(d / "D4");
    for (int r = 0; r < 4; ++r)
      fs::create_hard_link(d / ("C/rank" + std::to_string(r % 2) + ".h5"),
                           d / ("D4/rank" + std::to_string(r) + ".h5"));
    // The token file of the default corpus, as parity-tokenize writes it.
    const fs::path tool = fs::path(PARITY_BIN).parent_path() / "parity-tokenize";
    const std::string tok_out = (cap / "tok.txt").string();
    const std::string cmd = "env PARITY_CACHE_DIR=" + std::string(PARITY_TEST_CACHE_DIR) + " " +
                            tool.string() + " >" + tok_out + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("making fixture tokens.bin");
    std::string tok = read_file(tok_out);
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == '\r')) tok.pop_back();
    fs::copy_file(tok, d / "tokens.bin");
    std::ofstream(d / "garbage.bin") << "PRTYTOK1 this is not a token file at all\n";
    // Users' files, damaged or not what they claim (the readers of dumps/external.h).
    std::ofstream(d / "torn.pt", std::ios::binary) << std::string("PK\x03\x04torn zip", 12);
    std::ofstream(d / "torn.safetensors", std::ios::binary)
        << std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"w\": {\"dtype\"", 21);
    std::ofstream(d / "sd_bad.safetensors", std::ios::binary) << safetensors_one("foo", 2);
    std::ofstream(d / "ids_big.npy", std::ios::binary) << npy("<u2", {1, 2, 65000, 3});
    std::ofstream(d / "ids_f32.npy", std::ios::binary) << npy("<f4", {1, 2});
    // 34 ids (two rows of --seq-len 16) and positions for them: whole, one short, and one that
    // jumps from 3 to 5 inside the first row.
    std::vector<double> ids34(34), pos34(34);
    for (int i = 0; i < 34; ++i) {
      ids34[i] = 3 + i;
      pos34[i] = i % 17;
    }
    std::ofstream(d / "ids34.npy", std::ios::binary) << npy("<u2", ids34);
    std::ofstream(d / "pos34.npy", std::ios::binary) << npy("<u2", pos34);
    std::ofstream(d / "pos33.npy", std::ios::binary)
        << npy("<u2", std::vector<double>(pos34.begin(), pos34.end() - 1));
    auto jump = pos34;
    jump[4] = 5;
    std::ofstream(d / "pos_jump.npy", std::ios::binary) << npy("<u2", jump);
    std::ofstream(d / "odd.bin", std::ios::binary) << std::string("\x01\x00\x02", 3);
    std::ofstream(d / "map_bad.txt") << "a b c\n";
    // Training logs (`parity drift`), good and bad, and a plan of the quick matrix.
    std::ofstream(d / "ref.log") << "1 8.0 1.5\n2 7.0 1.2\n";
    std::ofstream(d / "mixed.log") << "1 8.0\n{\"step\": 2, \"loss\": 7.0}\n";
    std::ofstream(d / "twice.log") << "1 8.0\n1 8.5\n";
    parity("matrix plan quick --only pp2 --steps 1 --out plan_quick", "plan_quick");
    std::ofstream(d / "afile") << "hello\n";
    std::ofstream(d / "old.jsonl") << "old\n";
    std::ofstream(d / "old.json") << "old\n";
    std::ofstream(d / "bad.toml") << "name = \"bad\"\n[[cell]\nname = \"x\"\n";
    std::ofstream(d / "m.toml") << "name = \"m\"\n[defaults]\nflavor = \"tiny\"\nsteps = 1\n"
                                   "seq_len = 16\nmicrobatches = 2\n[[cell]]\nname = \"ref\"\n"
                                   "[[cell]]\nname = \"cached\"\nreference = \"ref\"\n"
                                   "trainer = \"pipelined\"\npp = 2\nvp = 2\ngate = \"order-only\"\n";
    std::ofstream(d / "flavor.toml") << "name = \"f\"\n[[cell]]\nname = \"ref\"\nflavor = "
                                        "\"nosuchflavor\"\n";
    std::ofstream(d / "ungated.toml") << "name = \"u\"\n[[cell]]\nname = \"ref\"\n";
    parity("matrix run m.toml --out R --jobs 2 --quiet", "matrix run R");
    fs::create_directories(d / "adir");
    fs::create_directories(d / "full");
    std::ofstream(d / "full/something.txt") << "not a matrix run\n";
    fs::remove_all(cap);
  }
};

// One run in a fresh directory of hard links to the fixtures. Checks what every run must
// respect whatever it was asked: no file it was given changed, nothing left in TMPDIR, no
// temporary file left anywhere, no process left in its group. `allow_new` lets files appear
// (a run that is expected to write its outputs).
class Sandbox {
 public:
  // `fixtures`: the directory whose entries the run sees (empty: the shared fixtures above).
  explicit Sandbox(const std::string& name, const fs::path& fixtures = {}) {
    // Beside the fixtures (hard links need one file system), named for the test and process.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string leaf = std::to_string(::getpid()) + "_" +
                       (info ? std::string(info->name()) : std::string("x")) + "_" + name;
    for (char& c : leaf)
      if (c == '/' || c == ' ') c = '_';
    root_ = fs::path(PARITY_FIXTURE_DIR) / "sandboxes" / leaf;
    fs::remove_all(root_);
    fs::create_directories(cwd());
    fs::create_directories(capture());
    fs::create_directories(tmp());
    const fs::path fx = fixtures.empty() ? Fixtures::dir() : fixtures;
    for (auto it = fs::recursive_directory_iterator(fx); it != fs::end(it); ++it) {
      const fs::path rel = fs::relative(it->path(), fx);
      if (rel == "ready") continue;
      if (it->is_directory()) fs::create_directories(cwd() / rel);
      else fs::create_hard_link(it->path(), cwd() / rel);
    }
    before_ = snapshot(cwd());
  }
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  fs::path cwd() const { return root_ / "work"; }
  fs::path tmp() const { return root_ / "tmp"; }
  fs::path capture() const { return root_ / "capture"; }

  RunResult run(const std::vector<std::string>& args,
                std::map<std::string, std::string> env = {}, double limit_s = 30,
                const std::function<void(pid_t)>& during = {}, uint64_t address_space = 0) {
    env.emplace("PARITY_CACHE_DIR", PARITY_TEST_CACHE_DIR);
    env["TMPDIR"] = tmp().string();
    return run_in(cwd(), args, env, capture(), limit_s, during, address_space);
  }

  // What the run changed in its directory ("" when nothing), and what it left in TMPDIR.
  std::string changes() const { return differences(before_, snapshot(cwd())); }
  std::string left_in_tmp() const {
    std::string s;
    for (const auto& e : fs::directory_iterator(tmp())) s += "  " + e.path().filename().string() + "\n";
    return s;
  }
  std::string temporaries_left() const {
    std::string s;
    for (const auto& [p, v] : snapshot(cwd()))
      if (fs::path(p).filename().string().find(".tmp.") != std::string::npos) s += "  " + p + "\n";
    return s;
  }

 private:
  fs::path root_;
  Snapshot before_;
};

}  // namespace parity::testing
