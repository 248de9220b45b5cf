// The patch that sends a function's callers to its cache copy: a 5-byte
// `jmp rel32` in its entry, with the original bytes kept for undo (I1, I2:
// one write per entry). Per function, all entries or none (STYLE.md §5).
// What can be checked without the process is checked here (I4): the entry
// bytes must belong to the function alone, no branch may land inside them, and
// no call inside them may leave a return address there. dynid adds the live
// part: no thread's PC or return address inside them at patch time.
//
// Invariant (uprobe-safe entries): the patch changes no byte at which one
// of the file's instructions begins. A uprobe (bpftrace's uprobe:FUNC or
// FUNC+N, perf probe after a prologue), a gdb breakpoint, sits at such a
// byte: the kernel writes its int3 there, runs the FILE's instruction out
// of line and resumes after it, in the original code; removing the probe
// writes the file's byte back. So the jmp goes into one instruction of the
// entry block (entry_spot), after the leading ones that only fall through,
// which run in the original first (their copies are skipped):
//  - a jmp rel32: only its displacement changes (0xe9 stays);
//  - an instruction of 6 bytes or more that begins with a REX prefix
//    (0x40-0x4f): its first byte stays, and the jmp's 5 follow it. REX
//    before e9 is a jmp rel32 on every x86-64 CPU (near branches have a
//    64-bit operand size in 64-bit mode; REX.W only confirms it, and the
//    other REX bits name no operand here: AMD APM vol. 3 1.2.7, Intel SDM
//    vol. 2 2.2.1); its displacement counts from the end of the 6 bytes,
//    the end of the 5 written;
//  - else, where the function has a pad (FunctionCfg::entry_pad,
//    entry_pads.h), an instruction of 3 bytes or more that begins with a
//    REX prefix: its first byte stays, and `eb rel8` follows it, to the
//    pad, which holds the jmp rel32.
// With a probe there, execution goes the original's way; with none, into
// the copy just where the original would have run that instruction.
// Some functions have neither before their first branch (short
// instructions only, then a test), or no pad. Their entry keeps its first instruction and puts
// the jmp at the second's start, as before; a uprobe at the function works,
// one at the second instruction (uprobe:FUNC+N) breaks the jmp. Where an
// operator probes such offsets, CacheOptions::probe_safe_entries leaves
// those entries as they are (other copies still call their copies). A
// function whose first instruction cannot be kept either (a call or a
// branch first, too small) keeps its entry as it is.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.h"
#include "jit/block_layout.h"
#include "jit/cfg.h"

namespace dyni::jit {

constexpr std::size_t kEntryPatchSize = 5;
constexpr uint8_t kJmpRel32Opcode = 0xe9;

struct EntryPatch {
  uint64_t addr = 0;                                 // original entry
  std::array<uint8_t, kEntryPatchSize> original{};   // restored by undo
  // jmp rel32 to the copy; through a pad, `eb rel8` to the pad, then the
  // original's last 3 bytes (unchanged: the 5 are written as one)
  std::array<uint8_t, kEntryPatchSize> replacement{};
  bool probe_safe = true;  // EntrySpot::probe_safe: it changes no byte where an instruction begins
  // Through a pad (entry_pads.h): its 5 bytes, written before the short
  // jump and put back after it.
  uint64_t pad = 0;
  std::array<uint8_t, kEntryPatchSize> pad_original{};
  std::array<uint8_t, kEntryPatchSize> pad_replacement{};  // jmp rel32 to the copy
};

// Where a function's entry patch goes. The first `kept` instructions run in
// the original; the patched one begins at `at` and runs in the copy.
struct EntrySpot {
  std::size_t kept = 0;
  uint64_t at = 0;    // the patched instruction's start: where execution enters the jmp
  uint64_t addr = 0;  // the jmp's first byte: `at`, or `at + 1` after a REX prefix
  bool probe_safe = true;  // the invariant above holds; else `at` is the second instruction
  EntryPad pad;      // addr != 0: a short jump at `addr` to this pad (entry_pads.h)
};

struct FunctionPatch {
  uint64_t function = 0;  // original entry
  std::vector<EntryPatch> entries;
};

// The entry patch of `cfg`, its jmp aimed at `cache_entry` (code_cache.cpp
// re-aims it at its landing once the copy is emitted).
// `probe_safe_only`: refuses an entry_spot that is not probe_safe.
Result<FunctionPatch> plan_patch(const FunctionCfg& cfg, uint64_t cache_entry, bool probe_safe_only);

// `patch`'s replacement made a jmp rel32 to `to`.
Status aim_entry_patch(EntryPatch& patch, uint64_t to);

// `layout` with every block that overlaps the entry patch copied (appended
// after the others). Invariant: no exit from the cache lands in bytes the
// patch overwrites. A branch from the copy to such a block left in the
// original code would run the patch's jmp back into the copy: an endless
// loop, or a jump into the middle of the jmp.
BlockLayout with_entry_bytes_copied(const FunctionCfg& cfg, BlockLayout layout);

// Where `cfg`'s entry patch goes (the invariant above): the first
// instruction of its entry block that can take the jmp, where the jmp can
// go as at an entry (room before the function ends, no branch target or
// return address inside), after only instructions that fall through (no
// branch, call, return or stop). A jmp rel32 there may be one the copy's
// layout drops: the copy then goes on at its target (code_cache.cpp).
// Else the second instruction's start, if the first only falls through and
// the jmp can go there (not probe_safe).
Result<EntrySpot> entry_spot(const FunctionCfg& cfg);

// Whether `patch` changes a byte where one of `cfg`'s instructions begins
// (a uprobe or breakpoint there would break it): a check of the invariant
// above apart from entry_spot, for tests and dyni-scan.
bool changes_an_instruction_start(const FunctionCfg& cfg, const EntryPatch& patch);

// entry_spot's jmp address, or the function's start where it has none.
uint64_t patch_address(const FunctionCfg& cfg);

// The end of the bytes `patch` changes: its 5, or a short jump's 2
// (through a pad; the other 3 are written as the file has them).
inline uint64_t changed_end(const EntryPatch& patch) { return patch.addr + (patch.pad ? 2 : kEntryPatchSize); }

}  // namespace dyni::jit
