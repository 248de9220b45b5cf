// The patch that sends a function's callers to its cache copy: a 5-byte
// `jmp rel32` over its entry, with the original bytes kept for undo (I1, I2:
// one write per entry). Per function, all entries or none (STYLE.md §5).
// What can be checked without the process is checked here (I4): the entry
// bytes must belong to the function alone, no branch may land inside them, and
// no call inside them may leave a return address there. dynid adds the live
// part: no thread's PC or return address inside them at patch time.
// A function that begins with endbr64 keeps it: the jmp goes after it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/result.h"
#include "jit/block_layout.h"
#include "jit/cfg.h"

namespace dyni::jit {

constexpr std::size_t kEntryPatchSize = 5;

struct EntryPatch {
  uint64_t addr = 0;                                 // original entry
  std::array<uint8_t, kEntryPatchSize> original{};   // restored by undo
  std::array<uint8_t, kEntryPatchSize> replacement{};  // jmp rel32 to the copy
};

struct FunctionPatch {
  uint64_t function = 0;  // original entry
  std::vector<EntryPatch> entries;
};

Result<FunctionPatch> plan_patch(const FunctionCfg& cfg, uint64_t cache_entry);

// `layout` with every block that overlaps the entry patch copied (appended
// after the others). Invariant: no exit from the cache lands in bytes the
// patch overwrites. A branch from the copy to such a block left in the
// original code would run the patch's jmp back into the copy: an endless
// loop, or a jump into the middle of the jmp.
BlockLayout with_entry_bytes_copied(const FunctionCfg& cfg, BlockLayout layout);

// Where `cfg`'s entry patch goes: its start, or just after a leading endbr64.
uint64_t patch_address(const FunctionCfg& cfg);

}  // namespace dyni::jit
