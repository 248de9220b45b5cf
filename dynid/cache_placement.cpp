// Where a module's code cache goes in the target's address space.
#include "dynid/cache_placement.h"

#include <algorithm>

#include <fmt/format.h>

namespace dyni {
namespace {

constexpr uint64_t kReach = uint64_t{1} << 31;
constexpr uint64_t kUserTop = 0x7ffffffff000ULL;  // end of user space (4-level paging)

uint64_t align_down(uint64_t x, uint64_t a) { return x & ~(a - 1); }
uint64_t align_up(uint64_t x, uint64_t a) { return align_down(x + a - 1, a); }

struct Range {
  uint64_t lo = 0, hi = 0;  // [lo, hi)
};

// A free page kept between the cache and an anonymous neighbour: the kernel
// merges adjacent anonymous mappings with the same permissions (an earlier
// cache, a JIT's code) into one, and the cache would no longer be a mapping
// of its own. A file's mapping never merges with it.
constexpr uint64_t kGuard = 4096;

// Addresses no mapping covers, less a guard page next to anonymous mappings
// (and, below [stack], not its growth gap).
std::vector<Range> holes(const std::vector<profiler::Mapping>& maps, uint64_t min_addr) {
  std::vector<profiler::Mapping> sorted = maps;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  std::vector<Range> out;
  uint64_t from = min_addr;
  for (const auto& m : sorted) {
    if (m.start >= kUserTop) break;  // [vsyscall] and the like: not user space
    uint64_t start = m.path == "[stack]" && m.start > kStackGap ? m.start - kStackGap : m.start;
    if (!m.file_backed() && start >= kGuard) start -= kGuard;
    if (start > from) out.push_back({from, start});
    from = std::max(from, m.file_backed() ? m.end : m.end + kGuard);
  }
  if (kUserTop > from) out.push_back({from, kUserTop});
  return out;
}

// The highest `granule`-aligned start in [lo, hi) for `length` bytes inside
// some hole, or 0.
uint64_t highest_fit(const std::vector<Range>& free, uint64_t lo, uint64_t hi, uint64_t length, uint64_t granule) {
  uint64_t best = 0;
  for (const Range& h : free) {
    uint64_t top = std::min(h.hi, hi), bottom = align_up(std::max(h.lo, lo), granule);
    if (top < length || top - length < bottom) continue;
    best = std::max(best, align_down(top - length, granule));
  }
  return best;
}

}  // namespace

Result<CachePlacement> place_cache(const std::vector<profiler::Mapping>& maps, const CachePlacementRequest& request) {
  if (request.bytes == 0 || request.module_hi <= request.module_lo) return fail("cache placement: empty request");
  const uint64_t granule = request.small ? kSmallCacheGranule : kHugePage;
  CachePlacement place{0, align_up(request.bytes, granule), !request.small};
  // Reach: the cache [c, c + length) within kReach - margin of the whole module.
  uint64_t span = request.module_hi - request.module_lo;
  if (span + place.length + 2 * kReachMargin >= kReach)
    return fail(fmt::format("cache placement: module of {} MiB leaves no room within ±2 GB", span >> 20));
  uint64_t reach_lo = request.module_hi > kReach - kReachMargin ? request.module_hi - (kReach - kReachMargin) : 0;
  uint64_t reach_hi = request.module_lo + (kReach - kReachMargin);
  auto free = holes(maps, std::max(request.mmap_min_addr, kHugePage));
  // Below the module: out of brk's way.
  place.addr = highest_fit(free, reach_lo, request.module_lo, place.length, granule);
  if (place.addr) return place;
  // Above it, past the heap's headroom.
  uint64_t above = std::max(request.module_hi, request.start_brk ? request.start_brk + kBrkHeadroom : 0);
  place.addr = highest_fit(free, above, reach_hi, place.length, granule);
  if (place.addr) return place;
  return fail(fmt::format("cache placement: no free {} KiB within ±2 GB of {:#x}-{:#x} out of the heap's way",
                          place.length >> 10, request.module_lo, request.module_hi));
}

}  // namespace dyni
