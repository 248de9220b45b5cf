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
//
// Shared slots make every CPU that runs a hot block write one cache line:
// on mariadbd with 2 CPUs that cost more than half the QPS while counting
// (x0.42; x0.74 with the server pinned to one CPU). Where the CPU has rdpid,
// a cache's counters are striped instead (CounterLayout): one copy of every
// slot per stripe, and each site increments the stripe of the CPU it runs on:
//   striped      lea rsp, [rsp - 128]
//                (pushfq, when the flags inc writes are live)
//                push rax; push rcx
//                rdpid rax                        the CPU number, as Linux
//                movzx eax, al                    sets TSC_AUX; its low byte
//                lea rcx, [rip + table]
//                mov rax, [rcx + rax * 8]         that CPU's stripe
//                inc qword ptr [rcx + rax + slot - table]
//                pop rcx; pop rax
//                (popfq)
//                lea rsp, [rsp + 128]
// rax and rcx are restored, and the stack below the red zone is used as
// above. Any value of al picks a valid stripe, so a TSC_AUX that is not the
// CPU number only makes threads share one. The increment is still a single
// instruction (a preempted thread never writes back an old value), so a
// count is lost only when two threads increment one stripe's slot at the
// same instant: one that moved to another CPU between its rdpid and its inc,
// against the thread now running where it was. Striped counts are exact for
// one thread too.
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
  Value,        // the targets of the indirect call or jump at `at` (value code, below)
};

// The shape of a site's code, which gives its length and its steps.
struct CounterForm {
  bool saves_flags = false;  // pushfq/popfq around the inc
  bool striped = false;      // the CPU's stripe (CounterLayout), through rax and rcx
  bool value = false;        // value code (never striped)
  uint8_t bits() const { return static_cast<uint8_t>(saves_flags | (striped << 1) | (value << 2)); }
  static CounterForm from_bits(uint8_t b) { return {(b & 1) != 0, (b & 2) != 0, (b & 4) != 0}; }
  bool operator==(const CounterForm&) const = default;
};

struct CounterSite {
  CounterKind kind = CounterKind::Block;
  uint64_t at = 0;          // the block's start, the conditional branch, or the indirect call/jmp
  uint64_t before = 0;      // Block: the instruction of the block the code runs before; Value: `at`
  bool saves_flags = false; // the flags inc writes are live there
  uint32_t slot = 0;        // its counter: slots_base + 8 * slot (Value: the first of kValueSlots)
  bool striped = false;     // increments its CPU's stripe of the slot
  CounterForm form() const { return {saves_flags, striped, kind == CounterKind::Value}; }
  uint32_t slots() const;   // how many slots it takes
};

// Value sites (issue 19: the targets of indirect calls, which promotion
// needs). Before an indirect call or jmp that is no jump table's, value code
// loads the target the instruction is about to use and counts it in a
// table of kValueTargets {target, count} pairs and an "other" count:
//   value        lea rsp, [rsp - 128]             past the red zone
//                push rcx; push rax
//                (pushfq, when the flags it writes are live)
//                mov rax, <the call's operand>    rsp-based: its displacement
//                (nop, to 8 bytes)                 plus the shift; rip-based:
//                lea rcx, [rip + table]            re-aimed at the same address
//                for each pair i:
//                  cmp rax, [rcx + 16i]; je hit_i           its target: count it
//                  cmp qword ptr [rcx + 16i], 0; je claim_i  a free pair: take it
//                inc qword ptr [rcx + 64]; jmp done          none: "other"
//   claim_i:     mov [rcx + 16i], rax
//   hit_i:       inc qword ptr [rcx + 16i + 8]; jmp done
//   done:        (popfq); pop rax; pop rcx
//                lea rsp, [rsp + 128]
// It touches no register and writes memory only at its table and at
// [rsp - 152, rsp - 128), below the red zone. The load reads what the call
// will read, the same address with the same size, so it faults only where
// the call would. The 8-byte load and nop make every site of a form equally
// long (turning it off is then one jmp rel8 over it, as for the others).
// Claims are not atomic. A thread that finds a pair free and is preempted
// before it claims it can later overwrite a pair another thread claimed
// meanwhile: the calls counted there are then credited to its target, and
// a target may take a second pair (site_counts merges them). Counts are
// never above the true count of calls; which target some calls are
// credited to may be wrong, which only makes a promotion less often right:
// its guard compares with the loaded pointer, so any choice is correct.
// The tables are never striped: in a striped cache they lie in stripe 0
// (dynid counts with shared slots, docs/counting.md).
constexpr unsigned kValueTargets = 4;
constexpr uint32_t kValueSlots = 2 * kValueTargets + 1;
constexpr std::size_t kValueLoadBytes = 8;  // the load and its padding

// Whether value code can load the target of indirect call or jmp `in`: a
// 64-bit register other than rsp, or a 64-bit memory operand whose load
// re-encodes in at most kValueLoadBytes; no prefix but REX (a segment or
// address-size override would change what the load reads).
bool value_countable(const Instruction& in);

// The flags the plain counter code writes.
constexpr uint16_t kCounterClobbers =
    ZYDIS_CPUFLAG_PF | ZYDIS_CPUFLAG_AF | ZYDIS_CPUFLAG_ZF | ZYDIS_CPUFLAG_SF | ZYDIS_CPUFLAG_OF;
constexpr uint64_t kCounterSlotSize = 8;
constexpr unsigned kRedZone = 128;

// Every: a site per block and per fall-through not told by its block.
// Fewest: of those, only the ones whose counts do not follow from the
// others by flow conservation (count_flow.h), dropped greedily, those on
// loops first: in a loop whose body branches, about one increment per
// iteration is left of three or four. The search is near-linear (a union-
// find over the flow equations, counting.cpp: kept_by_forest); where it
// cannot decide (cycles of jump-table edges), it propagates once per site
// tried, and then functions of more than kMaxBlocksToReduce blocks, or with
// a block of more than kMaxEdgesOfABlock edges, keep every site.
// FewestByPropagation: the same search by the propagation it stands for,
// once per site tried (quadratic; what Fewest is checked against).
enum class CounterSet { Every, Fewest, FewestByPropagation };
constexpr std::size_t kMaxBlocksToReduce = 4000;
constexpr std::size_t kMaxEdgesOfABlock = 512;

// The sites of `cfg`'s counting copy, in address order (a FallThrough site
// after the Block site of its block), slots numbered from `first_slot`;
// every one `striped` or none. With `values`, a Value site before every
// indirect call and pointer tail call that value_countable (never striped);
// the slots of the sites come one after another.
std::vector<CounterSite> plan_counters(const FunctionCfg& cfg, uint32_t first_slot, bool striped = false,
                                       CounterSet set = CounterSet::Fewest, bool values = true);
// The slots `sites` take together.
uint32_t slots_of(const std::vector<CounterSite>& sites);

// Where a cache's slots lie in its counters' mapping, from its start.
// Shared (stripes 0): slot i at 8 * i. Striped (stripes >= 1): a table of
// 256 offsets first, then `stripes` stripes of every slot, each on lines of
// its own (kStripeAlign); the table sends CPU c (the low byte of rdpid) to
// stripe c % stripes, and a slot's count is its sum over the stripes.
constexpr uint64_t kStripeTableBytes = 256 * 8;
constexpr uint64_t kStripeAlign = 128;  // a pair of lines: Intel prefetches them together
constexpr uint32_t kMaxCounterStripes = 64;
constexpr uint64_t kMaxStripedBytes = 64ull << 20;

struct CounterLayout {
  uint32_t slots = 0;
  uint32_t stripes = 0;  // 0: shared slots, no table

  bool striped() const { return stripes > 0; }
  uint64_t table_bytes() const { return striped() ? kStripeTableBytes : 0; }
  uint64_t stripe_bytes() const;
  uint64_t bytes() const;                         // the whole mapping's payload
  uint64_t slot_offset(uint32_t slot) const;      // stripe 0's (the only one, shared)
  std::vector<uint8_t> table() const;             // the table's bytes (striped), written before any site runs
  // Each slot's count from the mapping's 8-byte words (missing ones count 0).
  std::vector<uint64_t> sums(std::span<const uint64_t> words) const;
};

// How many stripes `slots` slots get for `cpus` CPUs (at least 1, at most
// kMaxCounterStripes, within kMaxStripedBytes).
uint32_t stripes_for(uint32_t slots, uint32_t cpus);

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

// The bytes of a site's code at `at`, incrementing the counter at
// `slot_addr` (striped: stripe 0's, with the stripe table at `table`;
// value code: its table, loading the target of `source`).
Result<CounterCode> counter_code(uint64_t at, uint64_t slot_addr, CounterForm form, uint64_t table = 0,
                                 const Instruction* source = nullptr);
std::size_t counter_length(CounterForm form);
// Its instructions' places (the same for every address).
// Value code's depend on the load of `source`, the call it counts (none
// without it).
std::vector<CounterStep> counter_steps(CounterForm form, const Instruction* source = nullptr);

// Counter code is turned off in place by writing these 2 bytes over its
// first instruction: a jmp rel8 past the whole site. A thread stopped on the
// first instruction jumps; one stopped on a later one (saving flags, past
// the first lea) runs the rest unchanged, the original bytes still there.
// No thread can stop between the 2 bytes: they lie inside one instruction.
std::array<uint8_t, 2> counter_off_bytes(CounterForm form);
// The first bytes (at most kCounterStartBytes) of live counter code of that
// form (for checking that a site still holds it before turning it off).
constexpr std::size_t kCounterStartBytes = 8;
bool is_counter_start(std::span<const uint8_t> bytes, CounterForm form);

// What a value site counted: its targets, in the module's link-time
// numbering (a target outside the module lies outside its addresses), the
// most called first, and the calls to targets beyond its pairs.
struct ValueCounts {
  std::vector<std::pair<uint64_t, uint64_t>> targets;  // target → calls
  uint64_t other = 0;
  uint64_t calls() const;
  bool operator==(const ValueCounts&) const = default;
};

// What a function's counters read, by offset from its start: the form
// counts are kept and saved in (module_counts.h), independent of slots.
struct SiteCounts {
  std::map<uint64_t, uint64_t> blocks;     // block start → entries
  std::map<uint64_t, uint64_t> falls;      // conditional branch → fall-throughs
  std::map<uint64_t, ValueCounts> values;  // indirect call or jmp → its targets
  bool operator==(const SiteCounts&) const = default;
};

// The counts of a function starting at `start` from its sites' counters
// (`counters[slot]`); value sites' targets less `bias` (the module's load bias).
SiteCounts site_counts(uint64_t start, const std::vector<CounterSite>& sites, std::span<const uint64_t> counters,
                       uint64_t bias = 0);

// Exact block and edge counts of `cfg`: what the sites counted, and what
// follows from it by flow conservation (count_flow.h). A jump table edge
// that does not follow is the rest of its block's count split over such
// targets in proportion to their own counts. Counts lost to races can make
// a derived count negative: it is then 0. Offsets that are no block of
// `cfg` (counts of another build) are ignored, and a count that follows
// from nothing is 0.
struct FunctionCounts {
  std::vector<uint64_t> blocks;  // per block of cfg
  std::vector<EdgeCount> edges;  // every in-function edge with a count
};
FunctionCounts counts_from(const FunctionCfg& cfg, const SiteCounts& counts);

}  // namespace dyni::jit
