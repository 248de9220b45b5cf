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
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/file_io.h"
#include "tests/integration/stoppable_target.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using test::expect_all_stopped;
using test::tracer_of;

using namespace std::chrono_literals;

using WorldStopTest = test::PtraceTest;

TEST_F(WorldStopTest, StopsEveryThreadAndTheTargetRunsOnUnchanged) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);  // past the write of "ready", into read(0)
  std::chrono::microseconds worst{0};
  std::size_t threads = 0;
  for (int i = 0; i < 20; ++i) {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_GE(w->threads().size(), 6u);  // main, three workers, the sleeper, the masked thread
    threads = w->threads().size();
    expect_all_stopped(*w);
    // main is blocked in read(0): its registers show the interrupted call.
    EXPECT_EQ(w->threads().at(target.pid()).regs.orig_rax, static_cast<unsigned long long>(SYS_read));
    worst = std::max(worst, w->stop_time());
    w->resume();
    EXPECT_EQ(tracer_of(target.pid()), 0);
    std::this_thread::sleep_for(10ms);
  }
  std::printf("longest stop of %zu threads: %lld us\n", threads, static_cast<long long>(worst.count()));
  // The read blocked across 20 stops still works; no worker saw a wrong result.
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// Thread states ('R', 'S', 't', ...) by tid.
std::map<pid_t, char> thread_states(pid_t pid) {
  std::map<pid_t, char> out;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size()) out[std::stoi(e.path().filename())] = text[paren + 2];
  }
  return out;
}

// A thread that cannot stop (a vfork parent) fails the window, and the
// threads that did stop run again at once: they do not wait for it.
TEST_F(WorldStopTest, AThreadThatCannotStopDoesNotKeepTheOthersStopped) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  ASSERT_EQ(target.ask("vfork"), "got vfork usr1=0 rt=0");
  auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    auto w = WorldStop::stop(target.pid(), 100ms);
    EXPECT_FALSE(w) << "a vfork parent cannot stop";
    if (!w) {
      EXPECT_NE(w.error().message().find("did not stop in time"), std::string::npos) << w.error().message();
    }
  });
  // While the stopper still waits for the vfork parent (up to 1.5 s), every
  // other thread runs: none is left in a tracing stop.
  std::this_thread::sleep_for(400ms);
  std::map<pid_t, char> states = thread_states(target.pid());
  int traced = 0;
  for (const auto& [tid, state] : states) traced += state == 't';
  EXPECT_LE(traced, 1) << "threads stopped: " << traced << " of " << states.size();
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(tracer_of(target.pid()), 0);
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

TEST_F(WorldStopTest, ThreadsBornDuringTheWindowAreHeldToo) {
  StoppableTarget target(true);
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
  StoppableTarget target(true);
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
  StoppableTarget target(true);
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
