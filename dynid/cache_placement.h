// Where a module's code cache goes in the target's address space (DESIGN.md
// §3 step 7, §7 "Cache placement"). Pure: it reads a maps listing.
//
// Constraints, in order:
//  1. Reach: every byte of the cache within ±2 GB (less a margin) of every
//     byte of the module's mappings, so rel32 branches and RIP-relative data
//     references between cache and module encode.
//  2. A free hole: no mapping overlaps it (the remote mmap uses
//     MAP_FIXED_NOREPLACE anyway and fails rather than clobber, on a race).
//  3. Out of brk's way: the heap grows up from start_brk, right after a
//     module's .bss. The cache goes *below* the module where the window has
//     room, as high as possible (nearest the code). An executable linked at
//     0x400000 (Debian's python3.11) leaves under 4 MiB below it: the cache
//     goes there when it fits (2 MiB at 0x200000), else as high in the
//     window above the module as it can, at least kBrkHeadroom past
//     start_brk: brk would have to grow that far to meet it, and if it did,
//     brk fails and glibc's malloc falls back to mmap (no crash).
//  4. Away from the main stack's guard gap (the kernel keeps 1 MiB below
//     [stack] free for its growth): never within kStackGap of it.
//  5. 2 MiB-aligned start and a 2 MiB-multiple length, so that a transparent
//     huge page can back it (MADV_HUGEPAGE); or, for a cache of under
//     kSmallCacheBytes (libc's hot code is a few pages, liblzma's two),
//     64 KiB-aligned and sized on small pages, so that ten hot libraries do
//     not cost ten 2 MiB pages. Such a hot set fits the first-level iTLB
//     anyway (on mariadbd, whose hot set is larger, the huge page gave
//     nothing measurable: docs/levers.md).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "profiler/process_maps.h"

namespace dyni {

constexpr uint64_t kHugePage = uint64_t{2} << 20;
constexpr uint64_t kSmallCacheGranule = uint64_t{64} << 10;
constexpr uint64_t kSmallCacheBytes = uint64_t{256} << 10;  // [options] small_cache_kib's default
constexpr uint64_t kReachMargin = uint64_t{16} << 20;   // slack inside ±2 GB
constexpr uint64_t kBrkHeadroom = uint64_t{1} << 30;    // 1 GiB of heap growth kept free
constexpr uint64_t kStackGap = uint64_t{64} << 20;

struct CachePlacementRequest {
  uint64_t module_lo = 0, module_hi = 0;  // the module's mappings, .bss included
  uint64_t bytes = 0;                     // code to hold
  uint64_t start_brk = 0;                 // /proc/PID/stat field 47 (0: unknown)
  uint64_t mmap_min_addr = 0x10000;       // /proc/sys/vm/mmap_min_addr
  bool small = false;                     // kSmallCacheGranule steps, small pages
};

struct CachePlacement {
  uint64_t addr = 0;
  uint64_t length = 0;  // bytes rounded up to 2 MiB (a small cache's: to 64 KiB)
  // On huge pages (MADV_HUGEPAGE, faulted in huge): not a small cache's.
  bool huge = true;
};

Result<CachePlacement> place_cache(const std::vector<profiler::Mapping>& maps, const CachePlacementRequest& request);

}  // namespace dyni
