#include "harness/launcher.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include <ATen/ATen.h>

#include "dumps/dump.h"
#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "spec/limits.h"
#include "harness/observers.h"
#include "harness/process.h"

namespace parity::harness {

namespace {

class NullObserver : public kernels::StepObserver {
 public:
  void on_step(const kernels::StepRecord&) override {}
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The variable as an integer from lo to hi; UsageError naming it otherwise.
int env_int(const char* name, int lo, int hi, const std::string& remedy) {
  const char* v = env(name);
  const std::string text = v ? v : "";
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  long long x = -1;
  if (digits && text.size() <= 9) x = std::stoll(text);
  if (x < lo || x > hi)
    throw UsageError(std::string("environment variable ") + name + "='" + text + "' is not an " +
                     "integer from " + std::to_string(lo) + " to " + std::to_string(hi) + "; " +
                     remedy);
  return static_cast<int>(x);
}

// A port the kernel says is free now (the rendezvous binds it a moment later).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free local port for the rendezvous");
  ::close(fd);
  return ntohs(a.sin_port);
}

// What the c10d and Gloo libraries write to stderr while this object lives goes to an
// unlinked temporary file instead (their retries and warnings are not the user's error); the
// text comes back from release().
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    std::string dir = std::filesystem::temp_directory_path().string();
    std::string name = dir + "/parity-rendezvous-XXXXXX";
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) return;  // no capture: the libraries' lines reach the terminal
    ::unlink(name.c_str());
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  ~StderrCapture() { release(); }
  int original_fd() const { return saved_ >= 0 ? saved_ : 2; }

  std::string release() {
    if (saved_ < 0) return "";
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
    std::string text;
    char buf[4096];
    ::lseek(fd_, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd_, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    ::close(fd_);
    return text;
  }

 private:
  int fd_ = -1, saved_ = -1;
};

// Ends the process with one line on `fd` and exit 2 unless disarmed within `seconds`: the
// libraries' own timeouts can add up to several times the one the user gave, and a peer that
// is not a TCPStore at all never times out.
class Watchdog {
 public:
  Watchdog(double seconds, int fd, std::string line)
      : thread_([this, seconds, fd, line = std::move(line)] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; }))
            return;
          const std::string text = "parity: " + line + "\n";
          if (::write(fd, text.data(), text.size()) < 0) {
          }
          dumps::remove_temp_files();
          ::_exit(2);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The rendezvous of one rank, within --timeout-s and in one line whatever the peer is.
std::unique_ptr<pipelined::Comm> rendezvous(const pipelined::CommOptions& co, bool verbose) {
  const std::string where = "rank " + std::to_string(co.rank) + ": the rendezvous at " +
                            co.master_addr + ":" + std::to_string(co.master_port);
  const std::string remedy = "start all " + std::to_string(co.world) + " ranks, with "
                             "MASTER_ADDR and MASTER_PORT naming where rank 0 runs";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", co.timeout_s);
  std::unique_ptr<pipelined::Comm> comm;
  std::string failure, log;
  {
    StderrCapture capture;
    Watchdog watchdog(co.timeout_s + 1.0, capture.original_fd(),
                      where + " did not complete within " + secs + " s; " + remedy);
    try {
      comm = pipelined::make_comm(co);
    } catch (const kernels::ConfigError&) {
      throw;  // this build's backends, a port in use: already one line with its remedy
    } catch (const std::exception& e) {
      failure = spec::first_line(e.what());
      // make_comm's own errors name the rank and the rendezvous already: keep their reason.
      const auto said = failure.find(" failed: ");
      if (failure.rfind("rank ", 0) == 0 && said != std::string::npos)
        failure = failure.substr(said + 9);
      while (!failure.empty() && failure.back() == '.') failure.pop_back();
    }
    log = capture.release();
  }
  if (verbose && !log.empty()) std::cerr << log << std::flush;
  if (!failure.empty())
    throw UsageError(where + " failed: " + failure + "; " + remedy +
                     (verbose ? "" : " (--verbose shows the libraries' log)"));
  return comm;
}

}  // namespace

bool rank_from_environment(const RunOptions& o) {
  return o.backend && (env("RANK") || env("WORLD_SIZE"));
}

pipelined::CommOptions comm_from_environment(const RunOptions& o) {
  const std::string remedy = "a launcher such as torchrun sets RANK, WORLD_SIZE, MASTER_ADDR "
                             "and MASTER_PORT; or use --nproc N";
  if (!env("RANK") || !env("WORLD_SIZE"))
    throw UsageError(std::string("--backend ") + spec::to_string(o.backend_or_default()) + " with " +
                     (env("RANK") ? "RANK but no WORLD_SIZE" : "WORLD_SIZE but no RANK") +
                     " in the environment; set both (" + remedy + ")");
  pipelined::CommOptions co;
  co.backend = spec::to_string(o.backend_or_default());
  co.world = env_int("WORLD_SIZE", 1, static_cast<int>(spec::kMaxRanks * spec::kMaxRanks), remedy);
  co.rank = env_int("RANK", 0, co.world - 1, "RANK counts from 0 to WORLD_SIZE - 1");
  co.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", 0, co.world - 1, remedy) : 0;
  co.master_addr = env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1";
  co.master_port = env("MASTER_PORT") ? env_int("MASTER_PORT", 1, 65535, "a TCP port is 1 to 65535")
                                      : 29500;
  co.timeout_s = o.timeout_s;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(co.master_addr.c_str(), nullptr, &hints, &found);
  if (rc != 0)
    throw UsageError("MASTER_ADDR '" + co.master_addr + "' does not resolve (" +
                     ::gai_strerror(rc) + "); give the host rank 0 runs on");
  ::freeaddrinfo(found);
  return co;
}

void run_rank(const RunOptions& o, const pipelined::CommOptions& co, const PreparedRun& run,
              kernels::StepObserver& obs, const RunReport& report) {
  auto cfg = run.cfg;
  if (cfg.device == "cuda") cfg.device = "cuda:" + std::to_string(co.local_rank);  // a GPU each
  auto pc = run.pc;
  auto comm = rendezvous(co, o.verbose);
  pc.comm = comm.get();
  // Every rank's dump file names rank 0's run (each process alone would make its own id).
  std::string run_id;
  if (o.rank_observer) {
    auto bytes = at::zeros({128}, at::TensorOptions().dtype(at::kByte).device(cfg.device));
    if (co.rank == 0) {
      const std::string id = dumps::new_run_id().substr(0, 127);
      auto cpu = at::zeros({128}, at::kByte);
      std::memcpy(cpu.data_ptr(), id.data(), id.size());
      bytes.copy_(cpu);
    }
    comm->broadcast(bytes, 0);
    const auto cpu = bytes.to(at::kCPU).contiguous();
    run_id = reinterpret_cast<const char*>(cpu.data_ptr<uint8_t>());
  }
  pipelined::PipelinedTrainer t(cfg, pc, run.init, *run.rows);
  // The ranks of dp replica 0 each keep their own parameters' file (after a step every rank
  // holds the same summed gradients, so one replica's ranks cover every FQN once).
  std::unique_ptr<kernels::StepObserver> own;
  if (o.rank_observer && co.rank < o.pp) {
    std::set<std::string> fqns;
    const auto ranks = t.param_ranks();
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == co.rank) fqns.insert(t.master().names()[i]);
    own = o.rank_observer(co.rank, std::move(fqns), run_id);
  }
  NullObserver quiet;
  ObserverList all;
  all.add(co.rank == 0 ? &obs : &quiet);
  if (own) all.add(own.get());
  t.run(all);
  comm->barrier();
  warn_unfired_faults(pc.faults, t.fault_hits());
  if (co.rank == 0 && report) report(t.last_stats());
}

void launch_local(const RunOptions& o, const PreparedRun& run, kernels::StepObserver& obs,
                  const RunReport& report) {
  pipelined::CommOptions co;
  co.backend = spec::to_string(o.backend_or_default());
  co.world = o.nproc;
  co.master_port = free_port();
  co.timeout_s = o.timeout_s;
  pipelined::make_comm_check(co.backend);
  std::vector<pid_t> kids;
  for (int r = 0; r < o.nproc; ++r) {
    auto worker = [&, r]() {
      try {
        co.rank = r;
        co.local_rank = r;
        run_rank(o, co, run, obs, report);
        return 0;
      } catch (const std::exception& e) {
        if (r == 0) obs.on_abort();  // the dump keeps the steps it has, marked incomplete
        const std::string what = spec::first_line(e.what());  // CommErrors already name the rank
        // One write(2): the ranks share the launcher's stderr, and a line written in pieces
        // interleaves with another rank's ("parity: parity: rank 3: ...rank 1: ...").
        const std::string text = "parity: " +
                                 (what.rfind("rank ", 0) == 0 ? "" : "rank " + std::to_string(r) + ": ") +
                                 what + "\n";
        if (::write(2, text.data(), text.size()) < 0) {
        }
        return dynamic_cast<const spec::BadInput*>(&e) ? spec::kBadInputExit : 1;
      }
    };
    pid_t pid = -1;
    try {
      pid = start_child(worker, ChildOptions{}, "worker " + std::to_string(r));
    } catch (const std::exception&) {
      for (pid_t k : kids) stop_and_reap(k, /*group=*/false, 5.0);
      throw;
    }
    kids.push_back(pid);
    watch_child(pid);  // a stop of the launcher stops it too (harness/process.h)
  }
  // Wait for every worker. After the first failure the others have the timeout to notice
  // (each exits with its own one-line error) and a grace period more; then they are told to
  // stop, and killed 5 s later.
  int failed_rank = -1;
  ExitStatus failed;
  std::vector<bool> done(kids.size(), false);
  size_t left = kids.size();
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::time_point::max();
  bool terminated = false;
  while (left > 0) {
    // Everything that has ended since the last look; of several failures, a worker that was
    // killed from outside says more than the ranks that lost their peer because of it.
    bool any = false;
    for (size_t r = 0; r < kids.size(); ++r) {
      if (done[r]) continue;
      const auto ended = poll_child(kids[r]);
      if (!ended) continue;
      any = true;
      done[r] = true;
      --left;
      unwatch_child(kids[r]);
      const bool better = failed_rank < 0 || (ended->signalled() && !failed.signalled());
      if (!ended->ok() && better && !terminated) {
        if (failed_rank < 0)
          deadline = Clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000) + 10000);
        failed_rank = static_cast<int>(r);
        failed = *ended;
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (size_t r = 0; r < kids.size(); ++r)
        if (!done[r]) signal_child(kids[r], terminated ? SIGKILL : SIGTERM, /*group=*/false);
      deadline = terminated ? Clock::time_point::max() : Clock::now() + std::chrono::seconds(5);
      terminated = true;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failed_rank >= 0) {
    const std::string why =
        "worker rank " + std::to_string(failed_rank) +
        (failed.signalled() ? " was killed by signal " + std::to_string(failed.value)
         : failed.kind == ExitStatus::Kind::Exited ? " failed with exit code " + std::to_string(failed.value)
                                                   : " could not be waited for") +
        "; the run stopped on every rank";
    // a worker refused its input or its rendezvous
    if (failed.kind == ExitStatus::Kind::Exited && failed.value == spec::kBadInputExit)
      throw UsageError(why);
    throw std::runtime_error(why);
  }
}

}  // namespace parity::harness
