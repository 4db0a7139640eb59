// The process interface (harness/process.h): children start with what they are asked for,
// end with the code their body returns, are seen running until they end, and are stopped and
// reaped, their process group with them. No test sleeps to wait for a state: a child that must
// be running blocks on a pipe the test holds, and the test waits for the events it names.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/process.h"

namespace {

using parity::harness::ChildOptions;
using parity::harness::ExitStatus;
namespace h = parity::harness;

// Waits for `pid` to end (the child's own events end it; no deadline is needed).
ExitStatus wait_end(pid_t pid) {
  for (;;) {
    if (auto e = h::poll_child(pid)) return *e;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// A pipe whose read end a child blocks on until the test writes or closes.
struct Gate {
  int fd[2] = {-1, -1};
  Gate() {
    if (::pipe(fd) != 0) throw std::runtime_error("pipe");
  }
  ~Gate() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void wait_in_child() const {
    char c;
    ::close(fd[1]);
    while (::read(fd[0], &c, 1) < 0) {
    }
  }
  void open_gate() {
    ::close(fd[1]);
    fd[1] = -1;
  }
};

// A child that exits 0 once `gate` opens.
pid_t blocked_child(const Gate& gate) {
  return h::start_child(
      [&gate] {
        gate.wait_in_child();
        return 0;
      },
      ChildOptions{}, "blocked child");
}

TEST(ExitStatus, DescribesAndCodesEachEnding) {
  const ExitStatus ok{ExitStatus::Kind::Exited, 0}, three{ExitStatus::Kind::Exited, 3},
      term{ExitStatus::Kind::Signalled, SIGTERM}, lost{};
  EXPECT_TRUE(ok.ok());
  EXPECT_FALSE(three.ok());
  EXPECT_FALSE(term.ok());
  EXPECT_FALSE(lost.ok());
  EXPECT_EQ(three.describe(), "exit 3");
  EXPECT_EQ(term.describe(), "killed by signal 15");
  EXPECT_EQ(lost.describe(), "could not be waited for");
  EXPECT_EQ(three.shell_code(), 3);
  EXPECT_EQ(term.shell_code(), 143);
  EXPECT_EQ(lost.shell_code(), 127);
}

TEST(Process, AChildEndsWithWhatItsBodyReturnsAndOneWhenItThrows) {
  const pid_t a = h::start_child([] { return 7; }, ChildOptions{}, "a");
  const ExitStatus ea = wait_end(a);
  EXPECT_EQ(ea.kind, ExitStatus::Kind::Exited);
  EXPECT_EQ(ea.value, 7);
  const pid_t b = h::start_child([]() -> int { throw std::runtime_error("no"); }, ChildOptions{}, "b");
  EXPECT_EQ(wait_end(b).value, 1);
}

TEST(Process, AChildIsSeenRunningUntilItEnds) {
  Gate gate;
  const pid_t pid = blocked_child(gate);
  EXPECT_FALSE(h::poll_child(pid).has_value());  // it cannot end before the gate opens
  gate.open_gate();
  EXPECT_TRUE(wait_end(pid).ok());
  EXPECT_EQ(h::poll_child(pid)->kind, ExitStatus::Kind::Lost);  // reaped once only
}

TEST(Process, StopAndReapEndsAChildWithSigtermAndOneThatIgnoresItWithSigkill) {
  Gate gate;
  const pid_t polite = blocked_child(gate);
  const ExitStatus p = h::stop_and_reap(polite, /*group=*/false, 30.0);
  EXPECT_TRUE(p.signalled());
  EXPECT_EQ(p.value, SIGTERM);

  Gate ready;
  const pid_t stubborn = h::start_child(
      [&]() -> int {
        std::signal(SIGTERM, SIG_IGN);
        ::close(ready.fd[0]);
        ::close(ready.fd[1]);  // tells the test that SIGTERM is ignored now
        for (;;) ::pause();
      },
      ChildOptions{}, "stubborn");
  ::close(ready.fd[1]);
  ready.fd[1] = -1;
  char c;
  EXPECT_EQ(::read(ready.fd[0], &c, 1), 0);  // end of file: the child has ignored SIGTERM
  const ExitStatus s = h::stop_and_reap(stubborn, /*group=*/false, 0.2);
  EXPECT_TRUE(s.signalled());
  EXPECT_EQ(s.value, SIGKILL);
}

TEST(Process, AProgramWritesItsOutputToItsLogAndOneThatCannotRunExits127) {
  const std::string log = ::testing::TempDir() + "parity_process_log.txt";
  ChildOptions o;
  o.log = log;
  o.own_group = true;
  const pid_t pid = h::start_program({"/bin/sh", "-c", "echo out; echo err >&2; exit 4"}, o);
  EXPECT_EQ(wait_end(pid).value, 4);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "out\nerr\n");

  const pid_t missing = h::start_program({"/nonexistent/parity-no-such-program"}, o);
  EXPECT_EQ(wait_end(missing).value, 127);
}

TEST(Process, AGroupStopTakesTheGrandchildrenToo) {
  // The child starts a grandchild in its group that would outlive it, and says its pid.
  Gate said;
  ChildOptions o;
  o.own_group = true;
  const pid_t pid = h::start_child(
      [&] {
        ::close(said.fd[0]);
        const pid_t g = ::fork();
        if (g == 0) {
          for (;;) ::pause();
        }
        const ssize_t n = ::write(said.fd[1], &g, sizeof g);
        ::close(said.fd[1]);
        for (;;) ::pause();
        return static_cast<int>(n);
      },
      o, "group leader");
  ::close(said.fd[1]);
  said.fd[1] = -1;
  pid_t grandchild = 0;
  ASSERT_EQ(::read(said.fd[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  ASSERT_GT(grandchild, 0);
  const ExitStatus e = h::stop_and_reap(pid, /*group=*/true, 30.0);
  EXPECT_TRUE(e.signalled());
  // The grandchild was re-parented when the leader died; it is gone once the kernel has
  // delivered the group's signal, which kill(0) shows as ESRCH (or a zombie of init's).
  bool gone = false;
  for (int i = 0; i < 6000 && !gone; ++i) {  // up to 60 s: delivery is not instant under load
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string line;
    gone = !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " outlived its group's stop";
}

TEST(Process, AStopFlagRecordsTheSignalAndPutsTheOldHandlerBack) {
  static volatile std::sig_atomic_t old_seen = 0;
  struct sigaction mine {};
  mine.sa_handler = [](int) { old_seen = 1; };
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  ::sigaction(SIGHUP, &mine, &before);
  {
    h::StopFlag flag;
    EXPECT_EQ(flag.signal(), 0);
    EXPECT_THROW(h::StopFlag second, std::logic_error);  // one at a time
    ::raise(SIGHUP);
    EXPECT_EQ(flag.signal(), SIGHUP);
    EXPECT_EQ(old_seen, 0);
  }
  ::raise(SIGHUP);
  EXPECT_EQ(old_seen, 1);  // the handler before the flag is back
  ::sigaction(SIGHUP, &before, nullptr);
}

}  // namespace
