// Stop-the-world on real processes (dynid/world_stop.h): every thread stops,
// threads born during the window are held too, signals sent during windows all
// arrive, blocking calls restart, and a tracer that dies mid-window leaves the
// target running.
#include "dynid/world_stop.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/file_io.h"

namespace dyni {
namespace {

using namespace std::chrono_literals;

// dyni-test-stoppable with pipes on its stdin and stdout.
class Target {
 public:
  explicit Target(bool spawner) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      ::execl(DYNI_TEST_STOPPABLE, DYNI_TEST_STOPPABLE, spawner ? "spawner" : nullptr, nullptr);
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Target() {
    if (to_ >= 0) ::close(to_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (from_ >= 0) ::close(from_);
  }
  pid_t pid() const { return pid_; }

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
char thread_state(pid_t pid, pid_t tid) {
  auto stat = read_file(fmt::format("/proc/{}/task/{}/stat", pid, tid));
  if (!stat) return '?';
  std::size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ? '?' : (*stat)[paren + 2];
}

int tracer_of(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid));
  std::size_t at = status ? status->find("TracerPid:") : std::string::npos;
  return at == std::string::npos ? -1 : std::atoi(status->c_str() + at + 10);
}

// Every thread /proc lists is held and stopped by a tracer.
void expect_all_stopped(const WorldStop& w) {
  for (pid_t tid : list_numeric_entries(fmt::format("/proc/{}/task", w.pid()))) {
    EXPECT_TRUE(w.threads().count(tid)) << "thread " << tid << " not held";
    EXPECT_EQ(thread_state(w.pid(), tid), 't') << "thread " << tid;
  }
}

class WorldStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "ptrace of other processes needs root";
  }
};

TEST_F(WorldStopTest, StopsEveryThreadAndTheTargetRunsOnUnchanged) {
  Target target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);  // past the write of "ready", into read(0)
  std::chrono::microseconds worst{0};
  for (int i = 0; i < 20; ++i) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_GE(w->threads().size(), 5u);  // main, three workers, the sleeper
    expect_all_stopped(*w);
    // main is blocked in read(0): its registers show the interrupted call.
    EXPECT_EQ(w->threads().at(target.pid()).regs.orig_rax, static_cast<unsigned long long>(SYS_read));
    worst = std::max(worst, w->stop_time());
    w->resume();
    EXPECT_EQ(tracer_of(target.pid()), 0);
    std::this_thread::sleep_for(10ms);
  }
  std::printf("longest stop of 5 threads: %lld us\n", static_cast<long long>(worst.count()));
  // The read blocked across 20 stops still works; no worker saw a wrong result.
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

TEST_F(WorldStopTest, ThreadsBornDuringTheWindowAreHeldToo) {
  Target target(true);
  ASSERT_EQ(target.read_line(), "ready");
  for (int i = 0; i < 30; ++i) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    expect_all_stopped(*w);
    w->resume();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// SIGRTMIN queues, so each one sent must arrive exactly once, whether it came
// before, during or after a window.
TEST_F(WorldStopTest, SignalsSentAcrossWindowsAllArrive) {
  Target target(true);
  ASSERT_EQ(target.read_line(), "ready");
  constexpr int kSignals = 300;
  std::atomic<bool> sending{true};
  std::thread sender([&] {
    for (int i = 0; i < kSignals; ++i) {
      sigval v{};
      ::sigqueue(target.pid(), SIGRTMIN, v);
      std::this_thread::sleep_for(200us);
    }
    sending = false;
  });
  int windows = 0;
  std::string error;
  while (sending) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    if (!w) error = w.error().message();
    windows += w.has_value();
    std::this_thread::sleep_for(1ms);
  }
  sender.join();
  EXPECT_EQ(error, "");
  ::kill(target.pid(), SIGUSR1);
  std::this_thread::sleep_for(100ms);
  EXPECT_GT(windows, 10);
  EXPECT_EQ(target.ask("ping"), fmt::format("got ping usr1=1 rt={}", kSignals));
  EXPECT_EQ(target.finish(), 0);
}

// dynid SIGKILLed with the world stopped: the kernel detaches, the target runs on.
TEST_F(WorldStopTest, ATracerKilledMidWindowLeavesTheTargetRunning) {
  Target target(true);
  ASSERT_EQ(target.read_line(), "ready");
  for (int i = 0; i < 5; ++i) {
    pid_t tracer = ::fork();
    if (tracer == 0) {
      auto w = WorldStop::stop(target.pid(), 1000ms);
      ::raise(SIGKILL);  // with every thread held
      _exit(w ? 0 : 1);
    }
    int status = 0;
    ::waitpid(tracer, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the tracer did not reach its stop";
    EXPECT_EQ(target.ask(fmt::format("after{}", i)), fmt::format("got after{} usr1=0 rt=0", i));
    EXPECT_EQ(tracer_of(target.pid()), 0);
  }
  EXPECT_EQ(target.finish(), 0);
}

}  // namespace
}  // namespace dyni
