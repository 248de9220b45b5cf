// Direct calls that reach the copies (issue 20 item 1). A function left in
// the original code (not hot enough, or rejected by the jit) that calls a
// copied function with a rel32 call or jump reaches the copy through the
// jump at the original entry: two taken branches, and the entry's line and
// page. Its displacement re-pointed at the copy saves that hop. Pure: it
// reads the module's bytes.
//
// A site is rewritten as 5 bytes: a `call`/`jmp rel32` whole (E8/E9 and its
// displacement), or a `jcc rel32` from its second opcode byte (0F 8x: the 8x
// and the displacement). Its first byte is the same in both, so a thread
// whose PC is at the instruction runs the old or the new one whole, never a
// mix (the caller writes it in a stop window). Only displacements change.
//
// Invariant: a caller is scanned only when its whole range decodes as one
// run of instructions that ends exactly at its end (no data in code, no bad
// bound, I5); a site is planned only when its target is a copied function's
// entry, so the original displacement names an entry the same cache patches.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "elf/function_table.h"
#include "jit/module_image.h"

namespace dyni::jit {

constexpr std::size_t kCallSiteBytes = 5;

struct CallSitePatch {
  uint64_t addr = 0;  // link-time address of the 5 bytes rewritten
  std::array<uint8_t, kCallSiteBytes> original{};     // the file's
  std::array<uint8_t, kCallSiteBytes> replacement{};  // the same instruction, displaced to the copy
  uint64_t caller = 0;  // start of the function that holds it
  uint64_t callee = 0;  // the copied function's original entry
};

struct CallSitePlan {
  std::vector<CallSitePatch> patches;  // by address
  std::vector<std::string> skipped;    // "func_<hex>: why" for callers not scanned
  std::size_t callers_scanned = 0;
};

// The sites in `callers` (functions of `image`; those that are themselves
// copied are passed over) whose rel32 target is a key of `copies` (original
// entry → where its entry jump leads, link-time), displaced to that address.
// Sites that cannot reach it in rel32, or whose bytes overlap a copied
// entry's first 5 bytes, are left alone.
CallSitePlan plan_call_sites(const ModuleImage& image, std::span<const elf::Function> callers,
                             const std::map<uint64_t, uint64_t>& copies);

// The target of the 5 rewritten bytes at `addr` (a site's or an entry jump's
// `replacement` or `original`): addr + 5 + rel32, whatever the first byte.
uint64_t rel32_target(uint64_t addr, std::span<const uint8_t, kCallSiteBytes> bytes);

}  // namespace dyni::jit
