// Where remote_syscall may write its frame (dynid/thread_stack.h): inside the
// thread's own stack mapping, above its guard page, never elsewhere.
#include "dynid/thread_stack.h"

#include <gtest/gtest.h>

namespace dyni {
namespace {

profiler::Mapping mapping(uint64_t start, uint64_t end, const char* perms, std::string path = "") {
  profiler::Mapping m;
  m.start = start, m.end = end;
  m.readable = perms[0] == 'r', m.writable = perms[1] == 'w', m.executable = perms[2] == 'x';
  m.shared = perms[3] == 's';
  m.path = std::move(path);
  if (!m.path.empty() && m.path[0] == '/') m.inode = 42;
  return m;
}

// A glibc thread: guard page, then the stack with the descriptor at its top;
// the main thread's [stack]; the heap; an 8 KiB alternate signal stack.
const std::vector<profiler::Mapping> kMaps = {
    mapping(0x555500000000, 0x555500100000, "rw-p", "[heap]"),
    mapping(0x7f0000000000, 0x7f0000001000, "---p"),
    mapping(0x7f0000001000, 0x7f0000801000, "rw-p"),
    mapping(0x7f1000000000, 0x7f1000002000, "rw-p"),
    mapping(0x7f2000000000, 0x7f2000010000, "rw-s"),
    mapping(0x7ffc00000000, 0x7ffc00021000, "rw-p", "[stack]"),
};
constexpr pid_t kPid = 100, kWorker = 101;
constexpr uint64_t kWorkerTls = 0x7f0000800700;
const std::vector<uint64_t> kThreads = {0x7f3000000000, kWorkerTls};  // main's TLS, the worker's

TEST(PlaceFrame, BelowTheRedZoneOfAThreadsOwnStack) {
  auto at = place_frame_below(kMaps, kPid, kWorker, 0x7f0000700008, kWorkerTls, 3000, kThreads);
  ASSERT_TRUE(at) << at.error().message();
  EXPECT_EQ(at->addr % 64, 0u);
  EXPECT_LE(at->addr + 3000, 0x7f0000700008u - kRedZone);
  EXPECT_GT(at->addr + 3000 + 64, 0x7f0000700008u - kRedZone);
  EXPECT_EQ(at->stack.start, 0x7f0000001000u);  // the bounds of the write
  auto main = place_frame_below(kMaps, kPid, kPid, 0x7ffc00020000, 0x7f3000000000, 3000, kThreads);
  EXPECT_TRUE(main) << main.error().message();
}

TEST(PlaceFrame, NeverIntoTheGuardPageOrPastTheStack) {
  // 2 KiB above the guard page: a 3000-byte frame would reach into it.
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000001800, kWorkerTls, 3000, kThreads));
  EXPECT_TRUE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000001800 + 3000 + 256, kWorkerTls, 3000, kThreads));
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kPid, 0x7ffc00000400, 0, 3000, kThreads));  // bottom of [stack]
}

TEST(PlaceFrame, NeverOnAStackThatIsNotTheThreadsOwn) {
  // On an 8 KiB alternate signal stack (its own mapping): refused even with room.
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f1000001f00, kWorkerTls, 3000, kThreads));
  // A coroutine stack in the heap; a shared mapping; unmapped memory.
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x555500080000, kWorkerTls, 3000, kThreads));
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f2000008000, 0x7f2000008000, 3000, kThreads));
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x600000000000, kWorkerTls, 3000, kThreads));
  // Another thread's stack, and [stack] for a thread that is not the main one.
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000700008, 0x7f1000000100, 3000, kThreads));
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7ffc00020000, kWorkerTls, 3000, kThreads));
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x100, kWorkerTls, 3000, kThreads));  // would wrap
  // An alternate stack merged into the top of the thread's stack mapping:
  // above the descriptor, so not where the thread's stack grows.
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000800f00, kWorkerTls, 1000, kThreads));
}

// Threads made with guard size 0 can share one mapping: a frame near the
// bottom of one thread's stack would reach the next thread's descriptor.
TEST(PlaceFrame, NeverInAMappingThatHoldsAnotherThreadsDescriptor) {
  std::vector<uint64_t> two = {kWorkerTls, 0x7f0000400700};  // a second thread in the same mapping
  EXPECT_FALSE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000700008, kWorkerTls, 3000, two));
  EXPECT_TRUE(place_frame_below(kMaps, kPid, kWorker, 0x7f0000700008, kWorkerTls, 3000, {kWorkerTls}));
}

}  // namespace
}  // namespace dyni
