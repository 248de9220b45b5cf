// Emits one function's copied blocks, in layout order, for a new address.
// Every instruction is relocated; within the function, branches go to the
// new copy of their target block, or to the same instruction in the original
// code when that block was not copied (the original stays intact, I1); calls
// and jumps that leave the function go where `Redirects` says (the cache copy
// of a hot callee, the function behind a PLT stub) or to their original
// target. Where the layout breaks a fall-through, a `jmp` is added (also
// after a last jcc or call, whose fall-through is past the function's end);
// where it makes a jump fall through, the jump is dropped or a jcc's
// condition inverted. A jump table proven rebuildable (cfg.h) whose load is
// copied gets a table of its own after the code (RebuiltTable), so that a
// copied switch dispatches to the copies instead of leaving the cache. A
// An indirect call may be promoted to a guarded direct call (promotion.h),
// its literal after the tables. A
// counting copy also runs counter code at its sites (counting.h): a block's
// before the instruction the site names, a fall-through's right after its
// conditional branch, a value site's just before its indirect call or jmp
// (after a block counter there).
// Returns the bytes and the translation table (I6).
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "jit/block_layout.h"
#include "jit/cfg.h"
#include "jit/counting.h"
#include "jit/relocator.h"

namespace dyni::jit {

// What a cache instruction is, relative to the original it maps to.
enum class Translation : uint8_t {
  Copied,    // the original instruction, PC-relative fields re-aimed
  Inverted,  // the original jcc with the opposite condition: target and fall-through swapped
  Jump,      // an added jmp, as if execution continued at the original address
  // Counter code (counting.h), which maps to no original instruction; it
  // has the frame of `original_addr`, with rsp `stack_shift` bytes lower:
  BlockCounter,  // runs just before the original instruction: branches to that instruction land here
  EdgeCounter,   // runs as the conditional branch at original_addr falls through (its frame)
  ValueCounter,  // value code: runs just before the indirect call or jmp at original_addr, as BlockCounter
  Promoted,      // the guarded direct call that stands for the indirect call at original_addr (promotion.h)
  // Bytes that put a loop top (BlockLayout::loop_top) on its boundary:
  // one multi-byte nop where the code before runs into the loop top, or
  // int3s where it cannot (nothing runs them: no branch lands on padding).
  // original_addr is the loop top's first instruction, which runs next.
  Padding,
};

struct TranslationEntry {
  uint64_t new_addr = 0;
  uint64_t original_addr = 0;
  Translation kind = Translation::Copied;
  uint8_t stack_shift = 0;  // counter code saving flags: rsp is this far below the original's
};

inline bool is_counter(Translation k) {
  return k == Translation::BlockCounter || k == Translation::EdgeCounter || k == Translation::ValueCounter;
}

// Counter code for a counting copy: its sites (plan_counters), where slot 0
// is (stripe 0's, striped), and the stripe table (striped sites only).
struct CounterPlacement {
  const std::vector<CounterSite>* sites = nullptr;  // none: a copy without counters
  uint64_t slots_base = 0;
  uint64_t table = 0;
};

// Where branches that leave a function are sent instead of their original target.
struct Redirects {
  std::unordered_map<uint64_t, uint64_t> to;
  uint64_t operator()(uint64_t target) const {
    auto it = to.find(target);
    return it == to.end() ? target : it->second;
  }
};

// Padding before a loop top: at most this many bytes, else to the next
// 16-byte boundary, else none (as a compiler's `.p2align 5,,15`).
constexpr uint64_t kMaxLoopPadding = 15;
// The longest nop one Padding entry holds (ZydisEncoderNopFill's longest form).
constexpr uint64_t kLongestNop = 9;

// A jump table rebuilt for a copy: the copy's load reads it instead of the
// original (its displacement moved by addr - original), and each entry is
// the image of the original's: the copy of the target block, or the
// original block when that was not copied (an exit). 4-byte entries stay
// relative to the original table, whose address the base register still
// holds; 8-byte entries are absolute, in link-time numbering like every
// address here, and listed in EmittedCode::absolute_slots: the injector adds
// the module's load bias to each (CodeCache::loaded_at).
struct RebuiltTable {
  uint64_t original = 0;  // the original table
  uint64_t addr = 0;      // the rebuilt one, in the cache after the code
  uint64_t load = 0;      // the original load instruction
  unsigned entry_size = 4;
  std::vector<uint64_t> targets;  // where each entry sends execution now
};

// An indirect call promoted (promotion.h): its code at `addr`, comparing
// with the 8-byte absolute slot `literal` (which holds `target`, link-time)
// and calling `copy`, the image of `target`; its stub at `stub`.
struct PromotedCall {
  uint64_t addr = 0, call = 0, literal = 0, target = 0, copy = 0, stub = 0;
};

// Indirect calls to promote: call address → the target whose copy it calls.
using Promotions = std::map<uint64_t, uint64_t>;

// A site's counter code in a counting copy.
struct EmittedCounter {
  uint64_t addr = 0;       // its first instruction
  uint64_t slot_addr = 0;  // the counter it increments, outside the code
  CounterSite site;
};

struct EmittedCode {
  uint64_t base = 0;
  std::vector<uint8_t> bytes;                 // the code, then the rebuilt tables
  std::vector<TranslationEntry> translation;  // one per cache instruction, in address order
  uint64_t code_size = 0;                     // the instructions' bytes (the tables follow)
  std::vector<RebuiltTable> tables;
  std::vector<uint64_t> absolute_slots;       // 8-byte link-time addresses in `bytes`, by address
  std::vector<EmittedCounter> counters;       // a counting copy's, by address
  uint64_t counter_slots_base = 0;            // where slot 0 is (CounterPlacement::slots_base)
  uint64_t counter_table = 0;                 // the stripe table (CounterPlacement::table)
  std::vector<PromotedCall> promoted;         // by address; their literals follow the rebuilt tables
};

// The size emit_function() will produce for `layout` at `base` (known
// before the bytes: only whether a base-less table load can be rebuilt
// depends on the address, emitter.cpp).
// `shortest`: Short lets a jmp/jcc whose target's copy is within reach take
// the rel8 form; Near makes every one rel32 (for measurements).
// `counting`: the counter code to put in (a counting copy), or none.
// `promoted`: indirect calls to emit as promoted calls (promotion.h), each
// target redirected to a copy.
uint64_t emitted_size(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base,
                      BranchWidth shortest = BranchWidth::Short, const CounterPlacement& counting = {},
                      const Promotions& promoted = {});

Result<EmittedCode> emit_function(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base,
                                  const Redirects& redirects = {}, BranchWidth shortest = BranchWidth::Short,
                                  const CounterPlacement& counting = {}, const Promotions& promoted = {});

// Every block in original order, nothing redirected.
Result<EmittedCode> emit_in_order(const FunctionCfg& cfg, uint64_t base);

}  // namespace dyni::jit
