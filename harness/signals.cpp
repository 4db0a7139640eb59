#include "harness/signals.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>

#include "dumps/temp_files.h"

namespace parity::harness {

namespace {

constexpr int kMaxChildren = 256;
std::atomic<pid_t> g_children[kMaxChildren];

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
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

}  // namespace

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

bool adopt_as_child(pid_t parent) {
  for (auto& c : g_children) c.store(0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  return ::getppid() == parent;  // the parent may have died before prctl
}

int stop_and_reap(pid_t pid, bool group, double grace_s) {
  int status = 0;
  ::kill(group ? -pid : pid, SIGTERM);
  const long steps = static_cast<long>(grace_s * 100);
  for (long i = 0; i <= steps; ++i) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (group) ::kill(-pid, SIGKILL);  // what is left of its group (a worker that lingers)
      return status;
    }
    if (r < 0 && errno != EINTR) return status;
    sleep_ms(10);
  }
  ::kill(group ? -pid : pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace parity::harness
