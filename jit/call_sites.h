// Direct calls that reach the copies (issue 20 item 1). A function left in
// the original code (not hot enough, or rejected by the jit) that calls a
// copied function with a rel32 call or jump reaches the copy through the
// jump at the original entry: two taken branches, and the entry's line and
// page. Its displacement re-pointed at the copy saves that hop. Pure: it
// reads the module's bytes.
//
// A site is a `call rel32` or `jmp rel32` (E8/E9 and its displacement), 5
// bytes rewritten whole in one write; its first byte never changes, so a
// thread whose PC is at the instruction runs the old or the new one whole
// (the caller writes it in a stop window). A `jcc rel32` tail call is left
// alone: its first byte would stay out of the live check of the 5 bytes.
//
// Invariants:
//  - a caller is scanned only when its whole range decodes as one run of
//    instructions and no direct branch of it lands inside one of them (no
//    data in code, no bad bound, I5);
//  - a site's target is the entry of a copied function whose entry patch is
//    at its first byte, so the original displacement names an entry the
//    same cache patches, and the new one leads where that patch leads;
//  - no site's 5 bytes overlap any entry patch of the cache.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "elf/function_table.h"
#include "jit/module_image.h"

namespace dyni::jit {

constexpr std::size_t kCallSiteBytes = 5;

struct CallSitePatch {
  uint64_t addr = 0;  // link-time address of the call or jmp
  std::array<uint8_t, kCallSiteBytes> original{};     // the file's
  std::array<uint8_t, kCallSiteBytes> replacement{};  // the same instruction, displaced to the copy
  uint64_t caller = 0;  // start of the function that holds it
  uint64_t callee = 0;  // the copied function's original entry
};

struct CallSitePlan {
  std::vector<CallSitePatch> patches;  // by address
  std::vector<std::string> unscanned;  // "func_<hex>: why" for callers whose code is not understood
  std::size_t callers_scanned = 0;
};

// What the cache copies, as the call sites see it.
// An entry patch lies at most this far into its function, after the
// instructions it keeps (patch_plan.h). Records of version 7 hold entry
// patches at most kMaxEntryPatchOffsetV7 bytes in (one kept instruction).
constexpr uint64_t kMaxEntryPatchOffset = 48;
constexpr uint64_t kMaxEntryPatchOffsetV7 = 15;

struct CopiedCode {
  std::map<uint64_t, uint64_t> entries;  // start of a function whose entry is patched → its copy's start
  std::set<uint64_t> functions;          // every copied function's start: never a caller
  std::set<uint64_t> patch_bytes;        // the first byte of every entry patch (5 bytes each)
};

// The sites in `callers` (functions of `image`) whose rel32 target is a key
// of `copied.entries`, displaced to that key's value. Sites that cannot
// reach it in rel32 are left alone.
CallSitePlan plan_call_sites(const ModuleImage& image, std::span<const elf::Function> callers,
                             const CopiedCode& copied);

// The target of the 5 rewritten bytes at `addr` (a site's or an entry jump's
// `replacement` or `original`): addr + 5 + rel32, whatever the first byte.
// Inline: dynid's record checks use it without the jit's library.
inline uint64_t rel32_target(uint64_t addr, std::span<const uint8_t, kCallSiteBytes> bytes) {
  int32_t rel = 0;
  std::memcpy(&rel, bytes.data() + 1, 4);
  return addr + kCallSiteBytes + static_cast<uint64_t>(static_cast<int64_t>(rel));
}

}  // namespace dyni::jit
