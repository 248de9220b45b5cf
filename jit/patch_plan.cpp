// Entry patches and their static safety checks.
#include "jit/patch_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "jit/call_sites.h"
#include "jit/entry_pads.h"

namespace dyni::jit {

namespace {

// Why the jmp's 5 bytes at `addr`, in the instruction that begins at `at`,
// cannot be patched, if they cannot: past the function's end, a branch
// target inside them, a call returning inside them. Landing on `at` itself
// is fine: it runs the jmp. A short jump changes only its 2 bytes, up to
// `changed` (the other 3 of the 5 are written as they are).
std::optional<std::string> refusal(const FunctionCfg& cfg, uint64_t at, uint64_t addr, uint64_t changed = 0) {
  if (cfg.end < addr + kEntryPatchSize) return fmt::format("too small to patch at {:#x}", addr);
  const uint64_t end = changed ? changed : addr + kEntryPatchSize;
  auto inside_entry = [&](uint64_t a) { return a > at && a < end; };
  for (const Instruction& in : cfg.instructions)
    if (in.has_target && in.flow != Flow::Call && inside_entry(in.target))
      return fmt::format("branch target in the entry bytes at {:#x}", in.target);
  for (const JumpTable& t : cfg.tables)
    for (uint64_t a : t.targets)
      if (inside_entry(a)) return fmt::format("branch target in the entry bytes at {:#x}", a);
  for (const Instruction& in : cfg.instructions) {
    if (in.addr >= end) break;
    bool returns_inside = (in.flow == Flow::Call || in.flow == Flow::IndirectCall) && inside_entry(in.end());
    if (returns_inside) return fmt::format("call in the entry bytes at {:#x}", in.addr);
  }
  return std::nullopt;
}

bool is_rex(uint8_t byte) { return (byte & 0xf0) == 0x40; }

// Where in `in` the jmp can go without changing the byte it begins at.
std::optional<uint64_t> jmp_inside(const Instruction& in) {
  if (in.flow == Flow::Branch && in.length == kEntryPatchSize && in.bytes[0] == kJmpRel32Opcode) return in.addr;
  if (is_rex(in.bytes[0]) && in.length > kEntryPatchSize) return in.addr + 1;
  return std::nullopt;
}

}  // namespace

namespace {

// The first instruction of the entry block, within kMaxEntryPatchOffset and
// after instructions that only fall through, that takes the jmp whole.
Result<EntrySpot> probe_safe_spot(const FunctionCfg& cfg) {
  const Block& entry = cfg.blocks[0];
  std::string why = fmt::format("no instruction takes the jmp whole before a branch at {:#x}", cfg.start);
  for (std::size_t i = 0; i < entry.count; ++i) {
    const Instruction& in = cfg.instructions[entry.first + i];
    if (in.addr - cfg.start >= kMaxEntryPatchOffset) break;
    if (auto addr = jmp_inside(in)) {
      auto refused = refusal(cfg, in.addr, *addr);
      if (!refused) return EntrySpot{i, in.addr, *addr, true, {}};
      why = *refused;
    }
    if (in.flow != Flow::Next) break;
  }
  return fail(why);
}

// A short jump to the function's pad (entry_pads.h) after the REX prefix
// of its short-jump spot; its 5 bytes are checked as the jmp's would be.
Result<EntrySpot> through_pad(const FunctionCfg& cfg) {
  const std::optional<uint64_t> at = cfg.entry_pad.addr ? short_jump_spot(cfg) : std::nullopt;
  if (!at) return fail(fmt::format("no pad or short-jump spot at {:#x}", cfg.start));
  const int64_t rel = static_cast<int64_t>(cfg.entry_pad.addr) - static_cast<int64_t>(*at + kShortJumpSize);
  if (rel < INT8_MIN || rel > INT8_MAX) return fail(fmt::format("pad beyond a short jump's reach at {:#x}", *at));
  const Block& entry = cfg.blocks[0];
  for (std::size_t i = 0; i < entry.count; ++i)
    if (cfg.instructions[entry.first + i].addr == *at) {
      if (auto why = refusal(cfg, *at, *at + 1, *at + kShortJumpSize)) return fail(*why);
      return EntrySpot{i, *at, *at + 1, true, cfg.entry_pad};
    }
  return fail(fmt::format("no short-jump spot in the entry block at {:#x}", cfg.start));
}

// Session 20's spot: the jmp at the second instruction's start, the first
// kept. A uprobe at the function works; one at the second instruction
// breaks the jmp. An endbr64 first (CET: indirect calls land on it) stays
// where it is, and the jmp after it lands on the copy's start, which runs
// its copy again: nothing is kept, also where the second instruction begins
// another block.
Result<EntrySpot> after_first_instruction(const FunctionCfg& cfg) {
  const Block& entry = cfg.blocks[0];
  const Instruction& first = cfg.instructions[entry.first];
  if (first.mnemonic == ZYDIS_MNEMONIC_ENDBR64) {
    if (auto why = refusal(cfg, first.end(), first.end())) return fail(*why);
    return EntrySpot{0, first.end(), first.end(), false, {}};
  }
  if (entry.count < 2 || first.flow != Flow::Next) {
    if (auto why = refusal(cfg, cfg.start, cfg.start)) return fail(*why);  // what a patch at the start would break
    return fail(fmt::format("first instruction cannot be kept before the jmp at {:#x}", cfg.start));
  }
  const uint64_t second = cfg.instructions[entry.first + 1].addr;
  if (auto why = refusal(cfg, second, second)) return fail(*why);
  return EntrySpot{1, second, second, false, {}};
}

}  // namespace

Result<EntrySpot> entry_spot(const FunctionCfg& cfg) {
  if (cfg.blocks.empty() || cfg.blocks[0].start != cfg.start || cfg.instructions.empty())
    return fail(fmt::format("no entry block at {:#x}", cfg.start));
  auto safe = probe_safe_spot(cfg);
  if (safe) return safe;
  auto padded = through_pad(cfg);
  return padded ? padded : after_first_instruction(cfg);
}

bool changes_an_instruction_start(const FunctionCfg& cfg, const EntryPatch& patch) {
  for (const Instruction& in : cfg.instructions)
    if (in.addr >= patch.addr && in.addr < patch.addr + kEntryPatchSize &&
        patch.original[in.addr - patch.addr] != patch.replacement[in.addr - patch.addr])
      return true;
  return false;
}

uint64_t patch_address(const FunctionCfg& cfg) {
  auto spot = entry_spot(cfg);
  return spot ? spot->addr : cfg.start;
}

Result<FunctionPatch> plan_patch(const FunctionCfg& cfg, uint64_t cache_entry, bool probe_safe_only) {
  auto spot = entry_spot(cfg);
  if (!spot) return std::unexpected(spot.error());
  if (probe_safe_only && !spot->probe_safe) return std::unexpected(probe_safe_spot(cfg).error());
  const uint64_t entry = spot->addr, end = entry + kEntryPatchSize;
  EntryPatch patch{entry, {}, {}, spot->probe_safe, spot->pad.addr, spot->pad.original, {}};
  for (const Instruction& in : cfg.instructions) {
    if (in.addr >= end) break;
    for (uint64_t a = std::max(in.addr, entry); a < in.end() && a < end; ++a) patch.original[a - entry] = in.bytes[a - in.addr];
  }
  if (auto aimed = aim_entry_patch(patch, cache_entry); !aimed) return std::unexpected(aimed.error());
  return FunctionPatch{cfg.start, {patch}};
}

namespace {

// The pad's jmp to `to`; the short jump to the pad, the rest of the 5 bytes the file's.
Status aim_through_pad(EntryPatch& patch, uint64_t to) {
  const int64_t delta = static_cast<int64_t>(to - (patch.pad + kEntryPatchSize));
  const int64_t rel = static_cast<int64_t>(patch.pad) - static_cast<int64_t>(patch.addr + 2);
  if (delta < INT32_MIN || delta > INT32_MAX) return fail(fmt::format("cache beyond ±2 GB of {:#x}", patch.pad));
  if (rel < INT8_MIN || rel > INT8_MAX) return fail(fmt::format("pad beyond a short jump's reach at {:#x}", patch.addr));
  const int32_t rel32 = static_cast<int32_t>(delta);
  patch.pad_replacement[0] = kJmpRel32Opcode;
  std::memcpy(patch.pad_replacement.data() + 1, &rel32, 4);
  patch.replacement = patch.original;
  patch.replacement[0] = kJmpRel8Opcode;
  patch.replacement[1] = static_cast<uint8_t>(static_cast<int8_t>(rel));
  return ok();
}

}  // namespace

Status aim_entry_patch(EntryPatch& patch, uint64_t to) {
  if (patch.pad) return aim_through_pad(patch, to);
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
