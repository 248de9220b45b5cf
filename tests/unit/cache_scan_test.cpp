// live_patches: which of a cache's patches hold their bytes in a live
// process, read in batches, past unreadable ones.
#include "dynid/cache_scan.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace dyni {
namespace {

// 1,500 patches on two readable pages around an unmapped one, some holding
// their jump: those on the hole, or across its edge, never count.
TEST(LivePatches, CountsThePatchesThatHoldTheirBytesPastUnreadableOnes) {
  const long page = sysconf(_SC_PAGESIZE);
  auto* base = static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  std::memset(base, 0x90, 3 * page);
  ASSERT_EQ(munmap(base + page, page), 0);
  std::vector<PatchRecord> patches;
  for (int k = 0; k < 1500; ++k) {
    const int where = k % 5;  // 0-2: the first page, 3: the hole, 4: the last page
    uint8_t* at = where == 3 ? base + page + 8 * (k % 100) : base + (where == 4 ? 2 * page : 0) + 5 * (k % 300);
    PatchRecord p;
    p.addr = reinterpret_cast<uint64_t>(at);
    p.replacement = {0xe9, static_cast<uint8_t>(k), static_cast<uint8_t>(k >> 8), 0, 0};
    if (where != 3 && k % 3 == 0) std::memcpy(at, p.replacement.data(), 5);  // later ones may write over it
    patches.push_back(p);
  }
  // What the process holds, read here directly: the child is a copy.
  std::size_t expected = 0;
  for (const PatchRecord& p : patches) {
    const bool on_hole = p.addr >= reinterpret_cast<uint64_t>(base + page) && p.addr < reinterpret_cast<uint64_t>(base + 2 * page);
    expected += !on_hole && std::memcmp(reinterpret_cast<const void*>(p.addr), p.replacement.data(), 5) == 0;
  }
  PatchRecord across;  // 3 bytes on the first page, 2 on the hole
  across.addr = reinterpret_cast<uint64_t>(base + page - 3);
  across.replacement = {0x90, 0x90, 0x90, 0x90, 0x90};
  patches.insert(patches.begin() + 700, across);
  ASSERT_GT(expected, 50u);

  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_EQ(live_patches(child, patches), expected);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(live_patches(child, patches), 0u) << "a process that is gone holds nothing";
  munmap(base, 3 * page);
}

}  // namespace
}  // namespace dyni
