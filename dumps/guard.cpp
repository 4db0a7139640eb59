#include "dumps/guard.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

#include "dumps/dump.h"

namespace parity::dumps {

// HDF5 1.10 can crash on a damaged file rather than report an error, so every file is first
// parsed in a child process: if the child dies, the file is refused; if it finishes (or
// throws a clean error), the same parse is safe here.
void parse_guarded(const std::string& path, const std::function<void()>& parse,
                   const std::string& remedy) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return;  // cannot fork: read directly
  if (pid == 0) {
    alarm(120);  // a parse that hangs on damaged bytes is killed like one that crashes
    try {
      parse();
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw DumpError("'" + path + "' is damaged (reading it " +
                    (WTERMSIG(status) == SIGALRM ? std::string("did not finish in 120 s")
                                                 : "crashed the HDF5 library with signal " +
                                                       std::to_string(WTERMSIG(status))) +
                    "); " + remedy);
}

}  // namespace parity::dumps
