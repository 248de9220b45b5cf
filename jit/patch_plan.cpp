// Entry patches and their static safety checks.
#include "jit/patch_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

namespace dyni::jit {

// With CET's indirect-branch tracking, indirect calls must land on endbr64:
// it stays, and the jmp goes right after it.
namespace {

// Why 5 bytes at `entry` cannot take the jmp, if they cannot: past the
// function's end, a branch target inside them, a call returning inside them.
std::optional<std::string> refusal(const FunctionCfg& cfg, uint64_t entry) {
  const uint64_t end = entry + kEntryPatchSize;
  if (cfg.end < end) return fmt::format("too small to patch at {:#x}", entry);
  auto inside_entry = [&](uint64_t a) { return a > entry && a < end; };  // landing on `entry` itself is fine
  for (const Instruction& in : cfg.instructions)
    if (in.has_target && in.flow != Flow::Call && inside_entry(in.target))
      return fmt::format("branch target in the entry bytes at {:#x}", in.target);
  for (const JumpTable& t : cfg.tables)
    for (uint64_t a : t.targets)
      if (inside_entry(a)) return fmt::format("branch target in the entry bytes at {:#x}", a);
  for (const Instruction& in : cfg.instructions) {
    if (in.addr >= end) break;
    bool returns_inside = (in.flow == Flow::Call || in.flow == Flow::IndirectCall) && in.end() > entry && in.end() < end;
    if (returns_inside) return fmt::format("call in the entry bytes at {:#x}", in.addr);
  }
  return std::nullopt;
}

}  // namespace

bool keeps_first_instruction(const FunctionCfg& cfg) {
  if (cfg.blocks.empty() || cfg.blocks[0].start != cfg.start || cfg.blocks[0].count < 2) return false;
  const Instruction& first = cfg.instructions[cfg.blocks[0].first];
  const Instruction& second = cfg.instructions[cfg.blocks[0].first + 1];
  return first.addr == cfg.start && first.flow == Flow::Next && first.mnemonic != ZYDIS_MNEMONIC_ENDBR64 &&
         !refusal(cfg, second.addr);
}

bool first_byte_takes_a_uprobe(const FunctionCfg& cfg) {
  if (cfg.instructions.empty() || cfg.instructions[0].addr != cfg.start) return false;
  const Instruction& first = cfg.instructions[0];
  return first.flow == Flow::Branch && first.length == kEntryPatchSize && first.bytes[0] == kJmpRel32Opcode;
}

uint64_t patch_address(const FunctionCfg& cfg) {
  bool endbr = !cfg.instructions.empty() && cfg.instructions[0].mnemonic == ZYDIS_MNEMONIC_ENDBR64;
  return cfg.start + (endbr || keeps_first_instruction(cfg) ? cfg.instructions[0].length : 0);
}

Result<FunctionPatch> plan_patch(const FunctionCfg& cfg, uint64_t cache_entry) {
  uint64_t entry = patch_address(cfg), end = entry + kEntryPatchSize;
  if (auto why = refusal(cfg, entry)) return fail(*why);
  if (entry == cfg.start && !first_byte_takes_a_uprobe(cfg))
    return fail(fmt::format("first instruction cannot be kept before the jmp at {:#x}", entry));
  EntryPatch patch{entry, {}, {}};
  for (const Instruction& in : cfg.instructions) {
    if (in.addr >= end) break;
    for (uint64_t a = std::max(in.addr, entry); a < in.end() && a < end; ++a) patch.original[a - entry] = in.bytes[a - in.addr];
  }
  if (auto aimed = aim_entry_patch(patch, cache_entry); !aimed) return std::unexpected(aimed.error());
  return FunctionPatch{cfg.start, {patch}};
}

Status aim_entry_patch(EntryPatch& patch, uint64_t to) {
  int64_t delta = static_cast<int64_t>(to - (patch.addr + kEntryPatchSize));
  if (delta < INT32_MIN || delta > INT32_MAX) return fail(fmt::format("cache beyond ±2 GB of {:#x}", patch.addr));
  int32_t rel = static_cast<int32_t>(delta);
  patch.replacement[0] = kJmpRel32Opcode;
  std::memcpy(patch.replacement.data() + 1, &rel, 4);
  return ok();
}

BlockLayout with_entry_bytes_copied(const FunctionCfg& cfg, BlockLayout layout) {
  uint64_t entry = patch_address(cfg), end = entry + kEntryPatchSize;
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
    bool overlaps = cfg.blocks[b].start < end && cfg.blocks[b].end > entry;
    if (overlaps && !layout.copied[b]) {
      layout.copied[b] = true;
      layout.order.push_back(b);
    }
  }
  return layout;
}

}  // namespace dyni::jit
