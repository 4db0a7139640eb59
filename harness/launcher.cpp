#include "harness/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <thread>

#include "harness/errors.h"
#include "harness/observers.h"

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

int env_int(const char* name) {
  const char* v = env(name);
  try {
    size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used != std::strlen(v)) throw std::invalid_argument("trailing text");
    return x;
  } catch (const std::exception&) {
    throw UsageError(std::string("environment variable ") + name + "='" + v +
                     "' is not an integer");
  }
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

}  // namespace

bool rank_from_environment(const RunOptions& o) {
  return env("RANK") && env("WORLD_SIZE") && !o.backend.empty();
}

pipelined::CommOptions comm_from_environment(const RunOptions& o) {
  pipelined::CommOptions co;
  co.backend = o.backend;
  co.rank = env_int("RANK");
  co.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK") : 0;
  co.world = env_int("WORLD_SIZE");
  co.master_addr = env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1";
  co.master_port = env("MASTER_PORT") ? env_int("MASTER_PORT") : 29500;
  co.timeout_s = o.timeout_s;
  return co;
}

void run_rank(const RunOptions& o, const pipelined::CommOptions& co, kernels::StepObserver& obs,
              const RunReport& report) {
  if (co.world != o.dp * o.pp)
    throw UsageError("WORLD_SIZE " + std::to_string(co.world) + " is not dp x pp = " +
                     std::to_string(o.dp) + " x " + std::to_string(o.pp) + "; start " +
                     std::to_string(o.dp * o.pp) + " processes (or --nproc " +
                     std::to_string(o.dp * o.pp) + ")");
  auto cfg = train_config(o);
  if (cfg.device == "cuda") cfg.device = "cuda:" + std::to_string(co.local_rank);  // a GPU each
  auto pc = pipeline_config(o);
  auto rows = load_rows(o);
  auto init = initial_params(o, cfg.model);
  auto comm = pipelined::make_comm(co);
  pc.comm = comm.get();
  pipelined::PipelinedTrainer t(cfg, pc, init, *rows);
  // The ranks of dp replica 0 each keep their own parameters' file (after a step every rank
  // holds the same summed gradients, so one replica's ranks cover every FQN once).
  std::unique_ptr<kernels::StepObserver> own;
  if (o.rank_observer && co.rank < o.pp) {
    std::set<std::string> fqns;
    const auto ranks = t.param_ranks();
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == co.rank) fqns.insert(t.master().names()[i]);
    own = o.rank_observer(co.rank, std::move(fqns));
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

void launch_local(const RunOptions& o, kernels::StepObserver& obs, const RunReport& report) {
  if (o.nproc != o.dp * o.pp)
    throw UsageError("--nproc " + std::to_string(o.nproc) + " is not dp x pp = " +
                     std::to_string(o.dp) + " x " + std::to_string(o.pp));
  pipelined::CommOptions co;
  co.backend = o.backend.empty() ? "gloo" : o.backend;
  co.world = o.nproc;
  co.master_port = free_port();
  co.timeout_s = o.timeout_s;
  pipelined::make_comm_check(co.backend);
  std::fflush(nullptr);
  std::vector<pid_t> kids;
  for (int r = 0; r < o.nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("cannot start worker " + std::to_string(r));
    if (pid == 0) {
      int code = 0;
      try {
        co.rank = r;
        co.local_rank = r;
        run_rank(o, co, obs, report);
      } catch (const std::exception& e) {
        if (r == 0) obs.on_abort();  // the dump keeps the steps it has, marked incomplete
        const std::string what = e.what();  // CommErrors already name the rank
        std::cerr << "parity: " << (what.rfind("rank ", 0) == 0 ? "" : "rank " + std::to_string(r) + ": ")
                  << what << "\n";
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  // Wait for every worker. After the first failure the others have the timeout to notice
  // (each exits with its own one-line error) and a grace period more; then they are stopped.
  int failed_rank = -1, failed_status = 0;
  std::vector<bool> done(kids.size(), false);
  size_t left = kids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0) break;
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (size_t r = 0; r < kids.size(); ++r)
          if (!done[r]) ::kill(kids[r], SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t r = 0; r < kids.size(); ++r)
      if (kids[r] == pid && !done[r]) {
        done[r] = true;
        --left;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = static_cast<int>(r);
          failed_status = status;
          deadline = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000) + 10000);
        }
      }
  }
  if (failed_rank >= 0)
    throw std::runtime_error(
        "worker rank " + std::to_string(failed_rank) +
        (WIFSIGNALED(failed_status) ? " was killed by signal " + std::to_string(WTERMSIG(failed_status))
                                    : " failed with exit code " +
                                          std::to_string(WEXITSTATUS(failed_status))) +
        "; the run stopped on every rank");
}

}  // namespace parity::harness
