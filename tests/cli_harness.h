// What the end-to-end tests of the `parity` binary share: running it with its output
// captured, reading files, and the check that bad input is one line and exit 2.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace parity::testing {

struct CliResult {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// Runs PARITY_BIN with `args`, stdout and stderr captured through files in `dir`.
// env: "NAME=value ..." set for this run only.
inline CliResult run_parity(const std::filesystem::path& dir, const std::string& args,
                            const std::string& env = "") {
  const auto out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(PARITY_BIN) +
                          " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// A socket bound to a free loopback port (listening when `listen`); the caller closes it (a
// closed one leaves the port free for a moment: what a test hands a rendezvous).
inline int loopback_socket(int& port, bool listen) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (listen) ::listen(fd, 16);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// Bad input: one line naming the problem, exit 2, no exception dump or backtrace.
inline void expect_one_line_error(const CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Exception raised from"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

}  // namespace parity::testing
