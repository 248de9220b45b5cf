// Where the code cache goes (dynid/cache_placement.h): within reach of the
// module, in a free hole, out of brk's way, 2 MiB-aligned.
#include "dynid/cache_placement.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dyni {
namespace {

profiler::Mapping mapping(uint64_t start, uint64_t end, std::string path = "") {
  profiler::Mapping m;
  m.start = start, m.end = end, m.readable = true, m.path = std::move(path);
  if (!m.path.empty() && m.path[0] == '/') m.inode = 42;  // a file's
  return m;
}

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

void expect_reachable(const CachePlacement& p, uint64_t lo, uint64_t hi) {
  EXPECT_EQ(p.addr % kHugePage, 0u);
  EXPECT_EQ(p.length % kHugePage, 0u);
  // The farthest pair of bytes, one in the cache and one in the module.
  EXPECT_LT(std::max(hi, p.addr + p.length) - std::min(lo, p.addr), 2 * kGiB);
}

bool overlaps_any(const std::vector<profiler::Mapping>& maps, const CachePlacement& p) {
  for (const auto& m : maps)
    if (m.start < p.addr + p.length && p.addr < m.end) return true;
  return false;
}

// mariadbd as a PIE: executable, heap right after it, libraries and stack high.
TEST(CachePlacement, APieGetsTheHighestHoleBelowItsExecutable) {
  const uint64_t lo = 0x55d3a1234000, hi = lo + 27 * kMiB;
  std::vector<profiler::Mapping> maps = {mapping(lo, hi, "/usr/sbin/mariadbd"), mapping(hi + 8 * kMiB, hi + 300 * kMiB, "[heap]"),
                                         mapping(0x7f1200000000, 0x7f1200200000, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                                         mapping(0x7ffd00000000, 0x7ffd00021000, "[stack]")};
  auto p = place_cache(maps, {lo, hi, 600 * 1024, hi + 8 * kMiB});
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->length, 2 * kMiB);
  EXPECT_LE(p->addr + p->length, lo);
  EXPECT_GT(p->addr + p->length + kHugePage, lo);  // as near the code as alignment allows
  expect_reachable(*p, lo, hi);
  EXPECT_FALSE(overlaps_any(maps, *p));
}

// python3.11 is linked at 0x400000: 2 MiB fit below it at 0x200000.
TEST(CachePlacement, ANonPieExecutableAt4MiBTakesTheHoleBelowWhenItFits) {
  const uint64_t lo = 0x400000, hi = 0xa5e000, brk = 0x1a3c000;
  std::vector<profiler::Mapping> maps = {mapping(lo, hi, "/usr/bin/python3.11"), mapping(brk, brk + 2 * kMiB, "[heap]"),
                                         mapping(0x7f0000000000, 0x7f0000400000, "/usr/lib/x86_64-linux-gnu/libc.so.6")};
  auto p = place_cache(maps, {lo, hi, 1500 * 1024, brk});
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->addr, 0x200000u);
  // 3 MiB do not fit below: they go high in the window, 1 GiB past start_brk.
  auto big = place_cache(maps, {lo, hi, 3 * kMiB, brk});
  ASSERT_TRUE(big) << big.error().message();
  EXPECT_GE(big->addr, brk + kBrkHeadroom);
  expect_reachable(*big, lo, hi);
  EXPECT_FALSE(overlaps_any(maps, *big));
}

TEST(CachePlacement, SkipsOccupiedMemoryAndTheStacksGrowthGap) {
  const uint64_t lo = 0x7ffd40000000, hi = lo + 20 * kMiB;
  // Below the module: a mapping, then [stack] whose growth gap must stay free.
  std::vector<profiler::Mapping> maps = {mapping(lo, hi, "/srv/app"), mapping(lo - 6 * kMiB, lo, "[anon]"),
                                         mapping(lo - 40 * kMiB, lo - 6 * kMiB, "[stack]")};
  auto p = place_cache(maps, {lo, hi, 1 * kMiB, 0});
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_FALSE(overlaps_any(maps, *p));
  EXPECT_TRUE(p->addr + p->length <= lo - 40 * kMiB - kStackGap || p->addr >= hi) << std::hex << p->addr;
  expect_reachable(*p, lo, hi);
}

// An anonymous neighbour (an earlier cache, a JIT's code) keeps a free page
// between itself and the cache: the kernel would merge two adjacent
// anonymous r-x mappings into one. A file's mapping may touch it.
TEST(CachePlacement, KeepsAPageFromAnonymousNeighbours) {
  const uint64_t lo = 0x55d3a1200000, hi = lo + 27 * kMiB;
  profiler::Mapping earlier = mapping(lo - 2 * kMiB, lo);  // a cache right below the module
  std::vector<profiler::Mapping> maps = {mapping(lo, hi, "/usr/sbin/mariadbd"), earlier};
  auto p = place_cache(maps, {lo, hi, 600 * 1024, 0});
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_LT(p->addr + p->length, earlier.start);  // not adjacent
  EXPECT_FALSE(overlaps_any(maps, *p));
  std::vector<profiler::Mapping> file_only = {maps[0]};
  auto q = place_cache(file_only, {lo, hi, 600 * 1024, 0});
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(q->addr + q->length, lo);  // next to the file's mapping
}

// A small cache (a further module's, all_hot_modules) takes 64 KiB steps:
// libc's few hot pages cost 64 KiB below libc, not a 2 MiB page; it still
// keeps a page from an anonymous neighbour, and is never huge-page sized.
TEST(CachePlacement, ASmallCacheTakes64KiBStepsNextToItsModule) {
  const uint64_t lo = 0x7f1200200000, hi = lo + 2 * kMiB;
  std::vector<profiler::Mapping> maps = {mapping(lo, hi, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                                         mapping(lo - 8 * kMiB, lo - 5 * kMiB, "")};
  auto p = place_cache(maps, {lo, hi, 12 * 1024, 0, 0x10000, true});
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->length, kSmallCacheGranule);
  EXPECT_EQ(p->addr, lo - kSmallCacheGranule) << std::hex << p->addr;
  EXPECT_FALSE(p->huge);
  EXPECT_FALSE(overlaps_any(maps, *p));
  // 70 KiB take two steps; below an anonymous mapping, a page apart.
  std::vector<profiler::Mapping> tight = {maps[0], mapping(lo - kMiB, lo, "")};
  auto q = place_cache(tight, {lo, hi, 70 * 1024, 0, 0x10000, true});
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(q->length, 2 * kSmallCacheGranule);
  EXPECT_EQ(q->addr % kSmallCacheGranule, 0u);
  EXPECT_LT(q->addr + q->length, lo - kMiB);
  EXPECT_FALSE(overlaps_any(tight, *q));
  // Without `small`, the same request takes a whole huge page.
  auto huge = place_cache(maps, {lo, hi, 12 * 1024, 0});
  ASSERT_TRUE(huge) << huge.error().message();
  EXPECT_TRUE(huge->huge);
  EXPECT_EQ(huge->length, kHugePage);
}

// The gap below [vsyscall] is not user space (47-bit addresses end at
// 0x7ffffffff000): never a place for the cache.
TEST(CachePlacement, NeverAboveUserSpace) {
  const uint64_t lo = 0x7fff00000000, hi = lo + 10 * kMiB;
  std::vector<profiler::Mapping> maps = {mapping(0x10000, lo, "/filler"), mapping(lo, hi, "/srv/app"),
                                         mapping(hi, 0x7ffffffde000, "/filler2"),
                                         mapping(0x7ffffffde000, 0x7ffffffff000, "[stack]"),
                                         mapping(0xffffffffff600000, 0xffffffffff601000, "[vsyscall]")};
  EXPECT_FALSE(place_cache(maps, {lo, hi, 1 * kMiB, 0}));
}

TEST(CachePlacement, FailsWithTheReasonWhenNothingIsInReach) {
  const uint64_t lo = 0x100000000, hi = lo + 10 * kMiB;
  // Everything within ±2 GB taken.
  std::vector<profiler::Mapping> maps = {mapping(0x10000, 0x200000000, "/big")};
  auto p = place_cache(maps, {lo, hi, 1 * kMiB, 0});
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("no free 2048 KiB"), std::string::npos) << p.error().message();
  EXPECT_FALSE(place_cache(maps, {lo, lo, 1 * kMiB, 0}));  // empty module
}

}  // namespace
}  // namespace dyni
