// The patch that sends a function's callers to its cache copy: a 5-byte
// `jmp rel32` over its entry, with the original bytes kept for undo (I1, I2:
// one write per entry). Per function, all entries or none (STYLE.md §5).
// What can be checked without the process is checked here (I4): the entry
// bytes must belong to the function alone, no branch may land inside them, and
// no call inside them may leave a return address there. dynid adds the live
// part: no thread's PC or return address inside them at patch time.
// A function that begins with endbr64 keeps it: the jmp goes after it.
// Any other function keeps its first instruction too where it can
// (keeps_first_instruction): the jmp goes after it, and lands in the copy
// just after that instruction's copy. A uprobe attached at the function
// (bpftrace's uprobe:FUNC, offset 0) after injection then works: the kernel
// writes its int3 over that instruction, runs the FILE's instruction out of
// line and resumes right after it, on dyni's jmp; and removing the probe
// writes the file's byte back over the file's instruction. With the jmp at
// the first byte, the probe's out-of-line run resumed inside the jmp's
// displacement (SIGILL), and its removal left half a jmp.
// Invariant: an entry patch lies at a function's first byte only where a
// uprobe there leaves it whole (first_byte_takes_a_uprobe): the function
// begins with a jmp rel32. Any other function whose first instruction
// cannot be kept (a call or branch first, too small for the jmp after it)
// is left unpatched; its copy runs when other copies call it. Most such
// functions are getters of a few bytes, which run as fast in the original.
// A uprobe at an offset inside the jmp (uprobe:FUNC+N) still breaks it.
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
  std::array<uint8_t, kEntryPatchSize> replacement{};  // jmp rel32 to the copy
};

struct FunctionPatch {
  uint64_t function = 0;  // original entry
  std::vector<EntryPatch> entries;
};

// The entry patch of `cfg`, its jmp aimed at `cache_entry` (code_cache.cpp
// re-aims it at its landing once the copy is emitted).
Result<FunctionPatch> plan_patch(const FunctionCfg& cfg, uint64_t cache_entry);

// `patch`'s replacement made a jmp rel32 to `to`.
Status aim_entry_patch(EntryPatch& patch, uint64_t to);

// `layout` with every block that overlaps the entry patch copied (appended
// after the others). Invariant: no exit from the cache lands in bytes the
// patch overwrites. A branch from the copy to such a block left in the
// original code would run the patch's jmp back into the copy: an endless
// loop, or a jump into the middle of the jmp.
BlockLayout with_entry_bytes_copied(const FunctionCfg& cfg, BlockLayout layout);

// Whether `cfg`'s entry patch goes after its first instruction, which then
// runs in the original before the jmp, and not again in the copy: one that
// only falls through (no branch, call, return or stop; not endbr64, whose
// own rule is above), followed in the entry block by another instruction,
// where the jmp can go as at an entry (room before the function ends, no
// branch target or return address inside). The second may be a jmp that
// the layout drops: the copy then goes on at its target (code_cache.cpp).
bool keeps_first_instruction(const FunctionCfg& cfg);

// Whether a uprobe attached at `cfg`'s first byte after injection leaves an
// entry patch there whole: the first instruction is a jmp rel32, which the
// kernel emulates (to the file's target, in the original code), and whose
// opcode, written back when the probe goes, is the patch's own.
bool first_byte_takes_a_uprobe(const FunctionCfg& cfg);

// Where `cfg`'s entry patch goes: just after a leading endbr64 or a kept
// first instruction, else its start (then only if the uprobe rule allows).
uint64_t patch_address(const FunctionCfg& cfg);

}  // namespace dyni::jit
