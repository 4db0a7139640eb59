#include "harness/process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "dumps/temp_files.h"

namespace parity::harness {

namespace {

constexpr int kMaxChildren = 256;
std::atomic<pid_t> g_children[kMaxChildren];
volatile std::sig_atomic_t g_stop_signal = 0;  // what a StopFlag recorded
std::atomic<bool> g_flag_in_place{false};

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// waitpid without WNOHANG, through interruptions.
int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Async-signal-safe: kill, waitpid, nanosleep, unlink (in remove_temp_files), _exit.
void on_stop(int sig) {
  for (auto& c : g_children) {
    const pid_t pid = c.load();
    if (pid > 0) ::kill(pid, SIGTERM);
  }
  for (auto& c : g_children) {
    const pid_t pid = c.load();
    if (pid <= 0) continue;
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {  // 5 s for the child to clean up after itself
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      gone = r == pid || (r < 0 && errno == ECHILD);
      if (!gone) sleep_ms(10);
    }
    if (!gone) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  dumps::remove_temp_files();
  ::_exit(128 + sig);
}

void on_stop_flag(int sig) { g_stop_signal = sig; }

// In a child just forked: what `o` asks for. Returns false when the parent is gone already.
bool become_child(pid_t parent, const ChildOptions& o) {
  for (auto& c : g_children) c.store(0);  // the parent's children are not its own
  if (o.parent_death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, o.parent_death_signal);
    if (::getppid() != parent) return false;  // the parent died before prctl
  }
  if (o.default_stop_signals)
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_DFL);
  if (o.own_group) ::setpgid(0, 0);
  if (!o.log.empty()) {
    const int fd = ::open(o.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
  }
  return true;
}

pid_t fork_child(const ChildOptions& o, const std::string& what, bool& in_child) {
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("cannot start " + what + ": " + std::strerror(errno));
  in_child = pid == 0;
  if (in_child) {
    if (!become_child(parent, o)) ::_exit(1);
    return 0;
  }
  if (o.own_group) ::setpgid(pid, pid);  // both sides, so that a stop sent at once finds it
  return pid;
}

}  // namespace

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFEXITED(status)) return {Kind::Exited, WEXITSTATUS(status)};
  if (WIFSIGNALED(status)) return {Kind::Signalled, WTERMSIG(status)};
  return {};
}

int ExitStatus::shell_code() const {
  switch (kind) {
    case Kind::Exited: return value;
    case Kind::Signalled: return 128 + value;
    case Kind::Lost: break;
  }
  return 127;
}

std::string ExitStatus::describe() const {
  switch (kind) {
    case Kind::Exited: return "exit " + std::to_string(value);
    case Kind::Signalled: return "killed by signal " + std::to_string(value);
    case Kind::Lost: break;
  }
  return "could not be waited for";
}

pid_t start_child(const std::function<int()>& body, const ChildOptions& o, const std::string& what) {
  bool in_child = false;
  const pid_t pid = fork_child(o, what, in_child);
  if (!in_child) return pid;
  int code = 1;
  try {
    code = body();
  } catch (...) {
  }
  std::fflush(nullptr);
  ::_exit(code);
}

pid_t start_program(const std::vector<std::string>& args, const ChildOptions& o) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  bool in_child = false;
  const pid_t pid = fork_child(o, args.empty() ? "a program" : args[0], in_child);
  if (!in_child) return pid;
  if (argv[0]) ::execv(argv[0], argv.data());
  std::fprintf(stderr, "parity: cannot run %s\n", argv[0] ? argv[0] : "(nothing)");
  ::_exit(127);
}

std::optional<ExitStatus> poll_child(pid_t pid) {
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0) return std::nullopt;
  if (r < 0) return ExitStatus{};
  return ExitStatus::from_wait_status(status);
}

void signal_child(pid_t pid, int sig, bool group) {
  if (pid > 0) ::kill(group ? -pid : pid, sig);
}

ExitStatus stop_and_reap(pid_t pid, bool group, double grace_s) {
  signal_child(pid, SIGTERM, group);
  const long steps = static_cast<long>(grace_s * 100);
  for (long i = 0; i <= steps; ++i) {
    if (auto ended = poll_child(pid)) {
      if (group) signal_child(pid, SIGKILL, true);  // what is left of its group (a lingering worker)
      return *ended;
    }
    sleep_ms(10);
  }
  signal_child(pid, SIGKILL, group);
  return ExitStatus::from_wait_status(wait_for(pid));
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, s);  // one stop at a time
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
}

void watch_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t expected = 0;
    if (c.compare_exchange_strong(expected, pid)) return;
  }
}

void unwatch_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t expected = pid;
    if (c.compare_exchange_strong(expected, 0)) return;
  }
}

StopFlag::StopFlag() {
  if (g_flag_in_place.exchange(true)) throw std::logic_error("a StopFlag is in place already");
  g_stop_signal = 0;
  struct sigaction stop {};
  stop.sa_handler = on_stop_flag;
  sigemptyset(&stop.sa_mask);
  ::sigaction(SIGINT, &stop, &old_int_);
  ::sigaction(SIGTERM, &stop, &old_term_);
  ::sigaction(SIGHUP, &stop, &old_hup_);
  // Children are reaped by pid, which an inherited SIGCHLD = SIG_IGN would make impossible.
  struct sigaction chld {};
  chld.sa_handler = SIG_DFL;
  sigemptyset(&chld.sa_mask);
  ::sigaction(SIGCHLD, &chld, &old_chld_);
}

StopFlag::~StopFlag() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  g_flag_in_place = false;
}

int StopFlag::signal() const { return g_stop_signal; }
void StopFlag::clear() { g_stop_signal = 0; }

}  // namespace parity::harness
