// Toward uprobe-safe entries for every function (issue 23; jit/patch_plan.h).
// A function whose entry block has no instruction that takes the 5-byte jmp
// whole (a frame-pointer prologue of short instructions, then a branch:
// about half of mariadbd's hot ones) could still be entered without
// changing a byte where an instruction begins, with a 2-byte jump: `REX eb
// rel8` over an instruction of 3 bytes or more that begins with a REX
// prefix (`48 89 e5`, mov %rsp,%rbp), the prefix kept as for the 5-byte jmp
// (REX before a near jmp changes nothing), to a 5-byte `jmp rel32` to the
// copy in a "pad": 5 bytes of the padding between two functions, within a
// rel8's reach of the short jump's end. Padding holds only nops and int3s
// in the file and lies outside every function: no code runs there, and no
// probe is put there.
//
// Measured only (dyni-scan prints how many entries would reach a pad):
// dyni writes no pad yet. Writing them needs a patch kind of its own (the
// pad written before the short jump, undone after it), a PC check for
// threads stopped at a pad, and I8 for pads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "elf/function_table.h"
#include "jit/cfg.h"
#include "jit/module_image.h"

namespace dyni::jit {

constexpr std::size_t kShortJumpSize = 3;  // REX, eb, rel8

// The first instruction of `cfg`'s entry block, after ones that only fall
// through and within kMaxEntryPatchOffset, of kShortJumpSize bytes or more
// that begins with a REX prefix: its address; none when there is none.
std::optional<uint64_t> short_jump_spot(const FunctionCfg& cfg);

// Padding between functions: [start, end), at least kEntryPatchSize bytes.
struct PaddingRun {
  uint64_t start = 0, end = 0;
};

// The gaps between `functions` (any order; overlapping ones merged) that
// lie in code and decode wholly into nops and int3s.
std::vector<PaddingRun> padding_runs(std::span<const elf::Function> functions, const ModuleImage& image);

// How many of the short-jump spots `spots` (addresses, as short_jump_spot
// gives) get a pad of their own in `runs`, each 5 bytes of one run within
// the rel8's reach of its spot's end, handed out from the lowest spot up,
// each the lowest free pad it reaches.
std::size_t spots_with_pads(std::vector<uint64_t> spots, const std::vector<PaddingRun>& runs);

}  // namespace dyni::jit
