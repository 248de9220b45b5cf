// A running dyni-test-stoppable (tests/programs/stoppable.cpp) with pipes on
// its stdin and stdout, and checks on held threads, for the ptrace tests.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "common/file_io.h"
#include "dynid/world_stop.h"

namespace dyni::test {

using namespace std::chrono_literals;

// dyni-test-stoppable with pipes on its stdin and stdout.
class StoppableTarget {
 public:
  explicit StoppableTarget(bool spawner) : StoppableTarget(spawner ? "spawner" : nullptr) {}
  // `mode`: dyni-test-stoppable's argument ("spawner", "seccomp"), or null.
  explicit StoppableTarget(const char* mode) : StoppableTarget(DYNI_TEST_STOPPABLE, mode) {}
  // Another program that talks by lines the same way.
  StoppableTarget(const char* program, const char* mode) {
    ::signal(SIGPIPE, SIG_IGN);  // a target that died must fail the test, not kill it
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      ::execl(program, program, mode, nullptr);
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~StoppableTarget() {
    if (to_ >= 0) ::close(to_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (from_ >= 0) ::close(from_);
  }
  pid_t pid() const { return pid_; }
  // Running, not a zombie: a target that found itself changed printed
  // "WRONG ..." and exited.
  bool running() const {
    int status = 0;
    return pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == 0;
  }

  // One line of output, or "" after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = 5s) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char c = 0;
      if (::read(from_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return "";
  }
  std::string ask(const std::string& word) {
    std::string line = word + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return read_line();
  }
  // Closes stdin; the target then exits by itself. Returns its exit status.
  int finish() {
    ::close(to_);
    to_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

// The state letter of /proc/PID/task/TID/stat ('t': stopped by a tracer).
inline char thread_state(pid_t pid, pid_t tid) {
  auto stat = read_file(fmt::format("/proc/{}/task/{}/stat", pid, tid));
  if (!stat) return '?';
  std::size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ? '?' : (*stat)[paren + 2];
}

inline int tracer_of(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid));
  std::size_t at = status ? status->find("TracerPid:") : std::string::npos;
  return at == std::string::npos ? -1 : std::atoi(status->c_str() + at + 10);
}

// Every thread /proc lists is held and stopped by a tracer.
inline void expect_all_stopped(const WorldStop& w) {
  for (pid_t tid : list_numeric_entries(fmt::format("/proc/{}/task", w.pid()))) {
    EXPECT_TRUE(w.threads().count(tid)) << "thread " << tid << " not held";
    EXPECT_EQ(thread_state(w.pid(), tid), 't') << "thread " << tid;
  }
}

// Tests that ptrace another process: they need root, and say so when skipped.
class PtraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "ptrace of other processes needs root";
  }
};

}  // namespace dyni::test
