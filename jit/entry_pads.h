// Uprobe-safe entries for the functions with no instruction that takes the
// 5-byte jmp whole (issue 23; jit/patch_plan.h): a frame-pointer prologue of
// short instructions, then a branch, about half of mariadbd's hot ones.
// Such a function is entered with a 2-byte jump, `REX eb rel8`, over an
// instruction of 3 bytes or more that begins with a REX prefix (`48 89 e5`,
// mov %rsp,%rbp): the prefix stays, as for the 5-byte jmp (REX before a near
// jmp changes nothing), so no byte where an instruction begins changes. It
// jumps to a "pad": 5 bytes of the padding between two functions, within a
// rel8's reach, which hold a `jmp rel32` to the copy.
//
// Invariants a pad relies on:
//  - Nothing runs in it but the short jump's way: padding is only nops and
//    int3s in the file, outside every function (no symbol of any size
//    starts in it), after a function whose last instruction never falls
//    through (ret, jmp, ud2, hlt, int3: an assembler function that falls
//    into the next one through its alignment nops, as glibc's __memset_chk
//    does into memset, runs its padding). A direct branch into it is looked
//    for in all the module's code (entry_branches.h).
//  - Each pad belongs to one function, chosen from the file alone: the last
//    5 bytes of the padding just before the function, else the first 5 of
//    the padding just after it when that padding holds 10 bytes or more
//    (its last 5 are the next function's). So the counting cache's pads and
//    the optimized cache's that replaces it are the same bytes for the same
//    function, and no two patches share one.
//  - A pad never crosses a page (I2: one write).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "elf/function_table.h"
#include "jit/cfg.h"
#include "jit/module_image.h"

namespace dyni::jit {

constexpr std::size_t kShortJumpSize = 3;  // REX, eb, rel8
constexpr uint8_t kJmpRel8Opcode = 0xeb;

// The first instruction of `cfg`'s entry block, after ones that only fall
// through and within kMaxEntryPatchOffset, of kShortJumpSize bytes or more
// that begins with a REX prefix: its address; none when there is none.
std::optional<uint64_t> short_jump_spot(const FunctionCfg& cfg);

// Padding between functions: [start, end), at least kEntryPatchSize bytes.
struct PaddingRun {
  uint64_t start = 0, end = 0;
  uint64_t before = 0;  // the start of the function that ends at `start`
};

// The gaps between `functions` (any order; overlapping ones merged) that
// lie in code, decode wholly into nops and int3s, and hold no symbol.
std::vector<PaddingRun> padding_runs(std::span<const elf::Function> functions, const ModuleImage& image);

// Each function's pad, by the rule above.
class EntryPads {
 public:
  EntryPads(std::span<const elf::Function> functions, const ModuleImage& image);

  // The pad `cfg` may enter through from its short-jump spot `spot`, or none.
  std::optional<EntryPad> pad_for(const FunctionCfg& cfg, uint64_t spot) const;

  // Why `cfg` has no pad (pad_for gives none), for dyni-scan: "no padding
  // around it", "the function before ends in a call", ...
  std::string why_none(const FunctionCfg& cfg, uint64_t spot) const;

  const std::vector<PaddingRun>& runs() const { return runs_; }

 private:
  std::optional<EntryPad> pad_at(uint64_t addr, uint64_t spot) const;
  // The flow of the last instruction of the function at `function`, if it
  // decodes one instruction after the other up to exactly `end`.
  std::optional<Flow> last_flow(uint64_t function, uint64_t end) const;

  const ModuleImage* image_;
  std::vector<PaddingRun> runs_;
  std::map<uint64_t, std::size_t> by_start_, by_end_;  // run start / end → index
};

}  // namespace dyni::jit
