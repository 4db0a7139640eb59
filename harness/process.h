// Child processes: the one place parity starts, watches, stops and reaps them. The launcher's
// --nproc workers, the matrix runner's cells, seed checkpoints and judgements, and the stop
// handlers all go through it.
//
// How every parity process stops on SIGINT, SIGTERM or SIGHUP: it removes the temporary files
// it was writing (dumps/temp_files.h), tells the child processes it watches (the --nproc
// workers) to stop, waits for them (SIGKILL after a grace period), and exits with 128 + the
// signal: 130, 143 or 129. Nothing is left half-written and nothing is left running. The
// matrix runner puts a StopFlag in place of these handlers while its cells run (it stops the
// cells and keeps results.json first).
#pragma once

#include <sys/types.h>

#include <csignal>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parity::harness {

// How a child process ended.
struct ExitStatus {
  enum class Kind { Exited, Signalled, Lost };  // Lost: it could not be waited for
  Kind kind = Kind::Lost;
  int value = 0;  // the exit code, or the signal

  static ExitStatus from_wait_status(int status);
  bool ok() const { return kind == Kind::Exited && value == 0; }
  bool signalled() const { return kind == Kind::Signalled; }
  // What a shell would report: the exit code, 128 + the signal, 127 when lost.
  int shell_code() const;
  // "exit 3", "killed by signal 9" or "could not be waited for".
  std::string describe() const;
};

struct ChildOptions {
  bool own_group = false;     // a process group of its own, so that a stop reaches its children
  int parent_death_signal = SIGTERM;  // sent to it when its parent dies (0: none)
  bool default_stop_signals = false;  // SIGINT, SIGTERM and SIGHUP back to their defaults
  std::string log;            // non-empty: stdout and stderr go to this file (truncated)
};

// Forks a child that runs `body` and exits with what it returns (1 if it throws). In the
// child, the parent's watched children are forgotten, and a parent already gone makes it exit
// 1 at once. Throws std::runtime_error naming `what` when it cannot fork.
pid_t start_child(const std::function<int()>& body, const ChildOptions& o, const std::string& what);

// Starts the program argv[0] with its arguments; it exits 127 when it cannot be run.
pid_t start_program(const std::vector<std::string>& argv, const ChildOptions& o);

// How `pid` ended, reaping it; nullopt while it runs.
std::optional<ExitStatus> poll_child(pid_t pid);

// Sends `sig` to `pid`, or to its process group when group is true.
void signal_child(pid_t pid, int sig, bool group);

// Sends SIGTERM to `pid`'s process group (or to the process when group is false), waits up to
// grace_s for it to exit, then SIGKILLs and reaps it. A group is SIGKILLed once its leader has
// gone, so that no worker lingers.
ExitStatus stop_and_reap(pid_t pid, bool group, double grace_s);

// Installs the stop handlers described at the top.
void install_stop_handlers();

// The children a stop must take down with this process. Async-signal-safe to read; add and
// remove from one thread.
void watch_child(pid_t pid);
void unwatch_child(pid_t pid);

// While it lives, SIGINT, SIGTERM and SIGHUP only record the signal (signal()), and SIGCHLD
// has its default action, so that children can be reaped by pid. The handlers before it come
// back when it goes. One at a time.
class StopFlag {
 public:
  StopFlag();
  ~StopFlag();
  StopFlag(const StopFlag&) = delete;
  StopFlag& operator=(const StopFlag&) = delete;

  int signal() const;  // the signal that came, or 0
  void clear();

 private:
  struct sigaction old_int_ {}, old_term_ {}, old_hup_ {}, old_chld_ {};
};

}  // namespace parity::harness
