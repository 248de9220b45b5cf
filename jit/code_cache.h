// The code cache for one module: hot functions, each laid out by its profile,
// packed in the given order (call-graph affinity, function_order.h) at one
// base address, with calls and tail jumps between them going straight to the
// copies and calls through PLT stubs going straight to the function behind
// the stub when it is in reach. Carries everything injection needs: the
// bytes, the translation table (I6) and the patch plan (I1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "jit/block_layout.h"
#include "jit/cfg.h"
#include "jit/emitter.h"
#include "jit/patch_plan.h"
#include "jit/unwind_rows.h"

namespace dyni::jit {

struct HotCode {
  const FunctionCfg* cfg = nullptr;
  BlockLayout layout;
  bool shares_entry_bytes = false;  // another entry point (symbol, FDE) lies where the patch would go
  Promotions promotions = {};       // indirect calls to promote (promotion.h), where their target is cached
};

struct CachedFunction {
  uint64_t original_entry = 0;
  EmittedCode code;  // its slice of the cache
  // No entries when the entry cannot be patched (unpatched says why): the
  // copy is then reached only by calls from other cache code.
  FunctionPatch patch;
  std::string unpatched;
  std::vector<UnwindRow> unwind;  // the copy's frames (I6); empty when the original has no FDE
  std::vector<CounterSite> counters;  // a counting copy's sites (counting.h)
  Promotions promoted;                // its promotions whose target has a copy in this cache
};

// A function left out of the cache: its copy could not be emitted or failed
// the verifier. The reason's kind is "copy cannot be emitted" or "copy fails
// verification" (reason_kind), the detail follows.
struct CacheRejection {
  uint64_t function = 0;  // original entry
  std::string reason;
};

struct CodeCache {
  uint64_t base = 0;
  std::vector<uint8_t> bytes;
  std::vector<CachedFunction> functions;  // in cache order
  Redirects redirects;                    // what calls leaving a function were sent to
  std::vector<CacheRejection> rejected;   // never in `functions`, nor redirected to
  // A counting cache's counters: `counter_slots` 8-byte slots, shared or
  // in `counter_stripes` stripes (counting.h, CounterLayout), from
  // `counters_base` in a read-write mapping of their own (0 slots: none).
  uint64_t counters_base = 0;
  uint32_t counter_slots = 0;
  uint32_t counter_stripes = 0;
  CounterLayout counter_layout() const { return {counter_slots, counter_stripes}; }

  // Every cache instruction → its original address, over all functions.
  std::vector<TranslationEntry> translation() const;
  // The bytes as they go into a process that loaded the module `bias` bytes
  // from its link-time addresses: every absolute slot (rebuilt tables of
  // 8-byte entries) holds a run-time address. PC-relative code needs nothing.
  std::vector<uint8_t> loaded_at(uint64_t bias) const;
};

constexpr uint64_t kFunctionAlignment = 16;
constexpr uint8_t kPadding = 0xcc;  // int3: nothing should ever run it

// Which copies get their entry patched. A copy that runs the same
// instructions as its original (every block, in the original order, and no
// branch or call sent elsewhere than the original's: no call to another
// copy, no PLT stub bypassed) gains nothing from the patch, while every
// caller that arrives at the original (a virtual call, a call from code not
// copied) would pay the jump through it. WhenTheCopyDiffers leaves such an
// entry alone: calls from other copies still reach the copy directly.
enum class EntryPolicy { All, WhenTheCopyDiffers };

struct CacheOptions {
  bool verify = true;  // decode every emitted function back (tests: always)
  EntryPolicy entries = EntryPolicy::All;
  // Only entry patches that a uprobe or breakpoint at any instruction
  // leaves whole (patch_plan.h); false: also those after a kept first
  // instruction, which one at the second instruction breaks.
  bool probe_safe_entries = false;
  // Entries with no spot for the 5-byte jmp go through a pad between
  // functions (entry_pads.h), probe-safe too; false: session 20's spot.
  bool entry_pads = true;
  // jmp/jcc in rel8 form where the target's copy is within reach (emitter.h);
  // false: every one rel32, as before session 8 (for measurements).
  bool short_branches = true;
  // Counting copies (counting.h): every block copied, in its original order,
  // with counter code at its sites; every entry patched. The counters go at
  // `counters_base`, or when 0 at the first page boundary after the code.
  bool counting = false;
  uint64_t counters_base = 0;
  // Striped counters for this many CPUs (stripes_for); 0: shared slots.
  // Striped code runs rdpid: only where the CPU has it (CPUID.7.0:ECX[22]).
  uint32_t counter_stripes = 0;
  CounterSet counter_set = CounterSet::Fewest;  // plan_counters: Every for measurements
  bool count_values = true;                      // value sites at indirect calls and jmps (counting.h)
  bool promote_calls = true;                     // HotCode::promotions applied (promotion.h)
  // Measurements only: counting copies call each other directly, not
  // through the original entries (a thread would then stay on counting
  // copies after the phase: never in dynid).
  bool counting_calls_copies = false;
  // Where each copy starts: a multiple of this (at least kFunctionAlignment).
  // 64, a cache line: a copy's first instructions are one fetch. On mariadbd
  // (AMD EPYC Zen 4, KVM) user CPU per query went from x0.759 and x0.769 of
  // the original with 16 to x0.720 and x0.706 with 64, the cache 8 % larger
  // (docs/levers.md; dyni-inject's DYNI_FUNCTION_ALIGN=16 for the control).
  uint64_t function_alignment = 64;
};

// `plt`: PLT stub address → the function it reaches (read from the GOT by
// whoever knows it); applied only where the function is within ±2 GB.
// With `options.verify`, every function is decoded back (verifier.h). One bad
// function never fails the cache: a function whose copy cannot be emitted or
// fails the verifier is rejected with its reason, and the cache is packed
// again from the rest (so no call is sent to a copy that is not there).
// Every layout gets the blocks under its entry patch copied
// (with_entry_bytes_copied).
Result<CodeCache> build_code_cache(const std::vector<HotCode>& functions, uint64_t base,
                                   const Redirects& plt = {}, const CacheOptions& options = {});

}  // namespace dyni::jit
