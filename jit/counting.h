// Counting copies (DESIGN.md §3, step 5): where a function's counting copy
// counts, the counter code it runs there, and the block and edge counts that
// the counters give back. Pure, like the rest of jit/.
//
// Each site increments one 8-byte counter ("slot") in a read-write area
// beside the cache (never in the cache: the code stays read-only):
//   - one per block, counting how often the block is entered;
//   - one per conditional branch whose fall-through alone does not tell its
//     edges (the block it falls into has other ways in, or lies outside the
//     function), counting how often it falls through; it is taken the rest.
// Direct call sites run as often as their block. Every in-function edge
// follows from these (edges_from_counts).
//
// The counter code is invisible to the function:
//   plain        inc qword ptr [rip + slot]         where the flags inc writes
//                                                   (OF SF ZF AF PF) are dead
//   saves flags  lea rsp, [rsp - 128]                past the red zone, which
//                pushfq                              a leaf may be using
//                inc qword ptr [rip + slot]
//                popfq
//                lea rsp, [rsp + 128]                (lea leaves the flags alone)
// It touches no register, and memory only at the slot and, saving flags,
// the 8 bytes at [rsp - 136]: below the red zone, where a signal frame would
// go too. A block's counter goes at the first point of the block, before
// its first call, where the plain form may run; else at its start, saving
// flags. Counts are not atomic (no lock prefix): threads on different CPUs
// that increment one counter at the same instant lose increments (at worst
// about one CPU's worth: CountingCopy.ThreadsRacingOnOneCounterLoseABoundedShare);
// a count is never above the true count, and single-threaded it is exact.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "jit/cfg.h"
#include "jit/edge_profile.h"

namespace dyni::jit {

enum class CounterKind : uint8_t {
  Block,        // entries into the block starting at `at`
  FallThrough,  // times the conditional branch at `at` falls through
};

struct CounterSite {
  CounterKind kind = CounterKind::Block;
  uint64_t at = 0;          // the block's start, or the conditional branch
  uint64_t before = 0;      // Block: the instruction of the block the code runs before
  bool saves_flags = false; // the flags inc writes are live there
  uint32_t slot = 0;        // its counter: slots_base + 8 * slot
};

// The flags the plain counter code writes.
constexpr uint16_t kCounterClobbers =
    ZYDIS_CPUFLAG_PF | ZYDIS_CPUFLAG_AF | ZYDIS_CPUFLAG_ZF | ZYDIS_CPUFLAG_SF | ZYDIS_CPUFLAG_OF;
constexpr uint64_t kCounterSlotSize = 8;
constexpr unsigned kRedZone = 128;

// The sites of `cfg`'s counting copy, in address order (a FallThrough site
// after the Block site of its block), slots numbered from `first_slot`.
std::vector<CounterSite> plan_counters(const FunctionCfg& cfg, uint32_t first_slot);

// One instruction of counter code: where it starts in the sequence, and how
// far below the original rsp the stack pointer is when it starts.
struct CounterStep {
  uint8_t offset = 0;
  uint8_t stack_shift = 0;
};

struct CounterCode {
  std::vector<uint8_t> bytes;
  std::vector<CounterStep> steps;
};

// The bytes of a site's code at `at`, incrementing the counter at `slot_addr`.
Result<CounterCode> counter_code(uint64_t at, uint64_t slot_addr, bool saves_flags);
std::size_t counter_length(bool saves_flags);
// Its instructions' places (the same for every address).
std::vector<CounterStep> counter_steps(bool saves_flags);

// Counter code is turned off in place by writing these 2 bytes over its
// first instruction: a jmp rel8 past the whole site. A thread stopped on the
// first instruction jumps; one stopped on a later one (saving flags, past
// the first lea) runs the rest unchanged, the original bytes still there.
// No thread can stop between the 2 bytes: they lie inside one instruction.
std::array<uint8_t, 2> counter_off_bytes(bool saves_flags);
// The first bytes of live counter code of either form (for checking that a
// site still holds it before turning it off).
bool is_counter_start(std::span<const uint8_t> bytes, bool saves_flags);

// What a function's counters read, by offset from its start: the form
// counts are kept and saved in (module_counts.h), independent of slots.
struct SiteCounts {
  std::map<uint64_t, uint64_t> blocks;  // block start → entries
  std::map<uint64_t, uint64_t> falls;   // conditional branch → fall-throughs
  bool operator==(const SiteCounts&) const = default;
};

// The counts of a function starting at `start` from its sites' counters (`counters[slot]`).
SiteCounts site_counts(uint64_t start, const std::vector<CounterSite>& sites, std::span<const uint64_t> counters);

// Exact block and edge counts of `cfg`. A jump table's block is split over
// its targets in proportion to their own counts (which is exact when each
// has no other way in). Counts lost to races can make a fall-through exceed
// its block: a taken edge is then 0, never negative. Offsets that are no
// block of `cfg` (counts of another build) are ignored.
struct FunctionCounts {
  std::vector<uint64_t> blocks;  // per block of cfg
  std::vector<EdgeCount> edges;  // every in-function edge with a count
};
FunctionCounts counts_from(const FunctionCfg& cfg, const SiteCounts& counts);

}  // namespace dyni::jit
