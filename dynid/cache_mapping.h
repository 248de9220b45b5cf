// The code cache's memory in a target: mapped by a remote mmap inside a
// stop window, written while the target runs (no code reaches it until an
// entry is patched: invariant I2), unmapped only on proof that nothing runs
// or returns into it (I8; the caller's duty).
//
// The mapping is private, anonymous and r-x from the start; dynid writes it
// through /proc/PID/mem, which ignores the missing write permission. It is
// never writable and executable at once. A 2 MiB-aligned, 2 MiB-multiple
// range (CachePlacement::huge) gets MADV_HUGEPAGE so that one transparent
// huge page can back each 2 MiB (THP "madvise" mode); whether one does is
// read back from smaps. A small cache (64 KiB steps) stays on small pages.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/cache_placement.h"
#include "dynid/remote_syscall.h"
#include "dynid/world_stop.h"

namespace dyni {

struct MappedCache {
  uint64_t addr = 0, length = 0;
  pid_t thread = 0;       // the thread that ran the calls
  bool huge_advised = false;
  std::string huge_note;  // why its pages are what they are (cache_huge_pages.h), "" when plain
};

// Maps `place` in the held target: mmap(MAP_FIXED_NOREPLACE, r-x) then
// madvise(MADV_HUGEPAGE), run in the first held thread that can take a
// remote call. Fails, mapping nothing, when no thread can or the range is
// no longer free.
Result<MappedCache> map_cache(WorldStop& world, const SyscallSites& sites, const CachePlacement& place);

// Maps a counting cache's counters in the held target: mmap(MAP_FIXED_NOREPLACE,
// rw-), anonymous (zero), private or `shared` (a fork then shares it,
// cache_mapping.cpp), beside the cache, run in the first held thread that
// can take a remote call. The counters are data: never executable, as the
// code is never writable.
Result<MappedCache> map_counters(WorldStop& world, const SyscallSites& sites, uint64_t addr, uint64_t length,
                                 bool shared);

// Writes `bytes` at the start of the counters' mapping (the stripe table,
// before any counter code can run), once it is checked to be the one dyni made.
Status write_counters(pid_t pid, const MappedCache& counters, std::span<const uint8_t> bytes);

// The counters as they are now (the target may run: each 8-byte counter is
// read whole, as the CPU wrote it).
Result<std::vector<uint64_t>> read_counters(pid_t pid, const MappedCache& counters);

// Writes `bytes` at `offset` in the cache after checking, from a fresh
// /proc/PID/maps, that the range is still exactly the anonymous r-x mapping
// map_cache made. The target may run meanwhile.
Status write_cache(pid_t pid, const MappedCache& cache, std::span<const uint8_t> bytes, uint64_t offset = 0);

// A zero byte written at every `stride` bytes of a fresh cache (nothing in
// it yet), which faults each stride in, after one check as write_cache's.
Status touch_cache(pid_t pid, const MappedCache& cache, uint64_t stride);

// Bytes of the cache on huge pages: transparent (AnonHugePages in
// /proc/PID/smaps for its mapping) or hugetlb (Private_Hugetlb).
Result<uint64_t> huge_page_bytes(pid_t pid, const MappedCache& cache);

// munmap in the held target. Only for a cache that no thread can be running
// in or return into (I8): never yet entered, or proven unused.
Status unmap_cache(WorldStop& world, const SyscallSites& sites, const MappedCache& cache);

// Every system call map_cache, map_counters (when `counters_length`) and
// unmap_cache make for `place`, with their arguments, for the seccomp check
// before the first of them (seccomp_allows_all). Kept next to the calls.
std::vector<SeccompCall> cache_mapping_calls(const CachePlacement& place, uint64_t counters_addr,
                                             uint64_t counters_length, bool shared_counters = false);

}  // namespace dyni
