// How every parity process stops on SIGINT, SIGTERM or SIGHUP: it removes the temporary files
// it was writing (dumps/temp_files.h), tells the child processes it started (the --nproc
// workers) to stop, waits for them (SIGKILL after a grace period), and exits with 128 + the
// signal: 130, 143 or 129. Nothing is left half-written and nothing is left running.
//
// The matrix runner replaces these handlers while its cells run (it stops the cells and keeps
// results.json first) and puts them back afterwards.
#pragma once

#include <sys/types.h>

namespace parity::harness {

void install_stop_handlers();

// The children a stop must take down with this process. Async-signal-safe to read; add and
// remove from one thread.
void watch_child(pid_t pid);
void unwatch_child(pid_t pid);

// In a process just forked off a parity process: its parent's children are not its own, and
// it stops (SIGTERM) when its parent dies, so that a launcher killed by SIGKILL leaves no
// worker behind. Returns false when the parent is already gone (the child should exit).
bool adopt_as_child(pid_t parent);

// Sends SIGTERM to `pid`'s process group (or to the process when group is false), waits up to
// grace_s for it to exit, then SIGKILLs and reaps it. Returns its wait status.
int stop_and_reap(pid_t pid, bool group, double grace_s);

}  // namespace parity::harness
