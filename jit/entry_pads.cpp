// Short jumps to pads between functions, measured (jit/entry_pads.h).
#include "jit/entry_pads.h"

#include <algorithm>
#include <map>

#include "jit/call_sites.h"
#include "jit/decoder.h"
#include "jit/patch_plan.h"

namespace dyni::jit {

namespace {

constexpr uint64_t kMaxPaddingBytes = 4096;  // a longer gap is data or something else, not padding

bool is_padding(std::span<const uint8_t> bytes, uint64_t addr) {
  for (std::size_t at = 0; at < bytes.size();) {
    auto in = decode_one(bytes.subspan(at), addr + at);
    if (!in || (in->mnemonic != ZYDIS_MNEMONIC_NOP && in->mnemonic != ZYDIS_MNEMONIC_INT3)) return false;
    at += in->length;
  }
  return true;
}

}  // namespace

std::optional<uint64_t> short_jump_spot(const FunctionCfg& cfg) {
  if (cfg.blocks.empty() || cfg.blocks[0].start != cfg.start) return std::nullopt;
  const Block& entry = cfg.blocks[0];
  for (std::size_t i = 0; i < entry.count; ++i) {
    const Instruction& in = cfg.instructions[entry.first + i];
    if (in.addr - cfg.start >= kMaxEntryPatchOffset) break;
    if ((in.bytes[0] & 0xf0) == 0x40 && in.length >= kShortJumpSize) return in.addr;
    if (in.flow != Flow::Next) break;
  }
  return std::nullopt;
}

std::vector<PaddingRun> padding_runs(std::span<const elf::Function> functions, const ModuleImage& image) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const elf::Function& f : functions)
    if (f.size) ranges.emplace_back(f.addr, f.addr + f.size);
  std::sort(ranges.begin(), ranges.end());
  std::vector<PaddingRun> out;
  uint64_t covered = 0;  // the end of the functions so far
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    covered = std::max(covered, ranges[i].second);
    if (i + 1 == ranges.size()) break;
    const uint64_t start = covered, end = ranges[i + 1].first;
    if (end <= start || end - start < kEntryPatchSize || end - start > kMaxPaddingBytes || !image.is_code(start)) continue;
    auto bytes = image.read(start, end - start);
    if (bytes && is_padding(*bytes, start)) out.push_back({start, end});
  }
  return out;
}

std::size_t spots_with_pads(std::vector<uint64_t> spots, const std::vector<PaddingRun>& runs) {
  std::sort(spots.begin(), spots.end());
  std::map<uint64_t, uint64_t> next_free;  // run start → its first byte not handed out
  for (const PaddingRun& r : runs) next_free[r.start] = r.start;
  std::map<uint64_t, uint64_t> end_of;
  for (const PaddingRun& r : runs) end_of[r.start] = r.end;
  std::size_t served = 0;
  for (uint64_t spot : spots) {
    const uint64_t from = spot + kShortJumpSize;  // rel8 counts from the short jump's end
    const uint64_t lo = from >= 128 ? from - 128 : 0, hi = from + 127;  // the pad's first byte
    // Runs that may hold a pad in [lo, hi]: those starting before hi,
    // from the last one starting before lo.
    auto it = next_free.upper_bound(lo);
    if (it != next_free.begin()) --it;
    for (; it != next_free.end() && it->first <= hi; ++it) {
      const uint64_t pad = std::max(it->second, lo);
      if (pad <= hi && pad + kEntryPatchSize <= end_of[it->first]) {
        it->second = pad + kEntryPatchSize;
        ++served;
        break;
      }
    }
  }
  return served;
}

}  // namespace dyni::jit
