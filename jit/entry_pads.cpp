// Short jumps to pads between functions (jit/entry_pads.h).
#include "jit/entry_pads.h"

#include <algorithm>
#include <cstring>

#include "jit/call_sites.h"
#include "jit/decoder.h"
#include "jit/patch_plan.h"

namespace dyni::jit {

namespace {

constexpr uint64_t kMaxPaddingBytes = 4096;  // a longer gap is data or something else, not padding
constexpr uint64_t kPageSize = 4096;

bool is_padding(std::span<const uint8_t> bytes, uint64_t addr) {
  for (std::size_t at = 0; at < bytes.size();) {
    auto in = decode_one(bytes.subspan(at), addr + at);
    if (!in || (in->mnemonic != ZYDIS_MNEMONIC_NOP && in->mnemonic != ZYDIS_MNEMONIC_INT3)) return false;
    at += in->length;
  }
  return true;
}

bool never_falls_through(Flow flow) {
  return flow == Flow::Branch || flow == Flow::IndirectBranch || flow == Flow::Return || flow == Flow::Stop;
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
  struct Range {
    uint64_t start, end;
  };
  std::vector<Range> ranges;
  std::vector<uint64_t> starts;  // every symbol's, sized or not
  for (const elf::Function& f : functions) {
    starts.push_back(f.addr);
    if (f.size) ranges.push_back({f.addr, f.addr + f.size});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  std::sort(starts.begin(), starts.end());
  std::vector<PaddingRun> out;
  uint64_t covered = 0, covering = 0;  // the end of the functions so far, and the function that reaches it
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].end > covered) covered = ranges[i].end, covering = ranges[i].start;
    if (i + 1 == ranges.size()) break;
    const uint64_t start = covered, end = ranges[i + 1].start;
    if (end <= start || end - start < kEntryPatchSize || end - start > kMaxPaddingBytes || !image.is_code(start)) continue;
    auto symbol = std::lower_bound(starts.begin(), starts.end(), start);
    if (symbol != starts.end() && *symbol < end) continue;
    auto bytes = image.read(start, end - start);
    if (bytes && is_padding(*bytes, start)) out.push_back({start, end, covering});
  }
  return out;
}

EntryPads::EntryPads(std::span<const elf::Function> functions, const ModuleImage& image)
    : image_(&image), runs_(padding_runs(functions, image)) {
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    by_start_[runs_[i].start] = i;
    by_end_[runs_[i].end] = i;
  }
}

std::optional<Flow> EntryPads::last_flow(uint64_t function, uint64_t end) const {
  if (end <= function) return std::nullopt;
  auto bytes = image_->read(function, end - function);
  auto decoded = bytes ? decode_function(*bytes, function) : fail("");
  if (!decoded || decoded->empty() || decoded->back().end() != end) return std::nullopt;
  return decoded->back().flow;
}

std::optional<EntryPad> EntryPads::pad_at(uint64_t addr, uint64_t spot) const {
  const int64_t rel = static_cast<int64_t>(addr) - static_cast<int64_t>(spot + kShortJumpSize);
  if (rel < INT8_MIN || rel > INT8_MAX || addr % kPageSize > kPageSize - kEntryPatchSize) return std::nullopt;
  auto bytes = image_->read(addr, kEntryPatchSize);
  if (!bytes) return std::nullopt;
  EntryPad pad{addr, {}};
  std::memcpy(pad.original.data(), bytes->data(), kEntryPatchSize);
  return pad;
}

std::optional<EntryPad> EntryPads::pad_for(const FunctionCfg& cfg, uint64_t spot) const {
  if (auto before = by_end_.find(cfg.start); before != by_end_.end()) {
    const PaddingRun& run = runs_[before->second];
    if (auto flow = last_flow(run.before, run.start); flow && never_falls_through(*flow))
      if (auto pad = pad_at(run.end - kEntryPatchSize, spot)) return pad;
  }
  if (auto after = by_start_.find(cfg.end); after != by_start_.end()) {
    const PaddingRun& run = runs_[after->second];
    if (run.before != cfg.start) return std::nullopt;  // another function ends there too: its, not this one's
    auto last = std::find_if(cfg.instructions.begin(), cfg.instructions.end(),
                             [&](const Instruction& in) { return in.end() == cfg.end; });
    const bool ends = last != cfg.instructions.end() && never_falls_through(last->flow);
    if (ends && run.end - run.start >= 2 * kEntryPatchSize) return pad_at(run.start, spot);
  }
  return std::nullopt;
}

std::string EntryPads::why_none(const FunctionCfg& cfg, uint64_t spot) const {
  if (pad_for(cfg, spot)) return "";
  auto before = by_end_.find(cfg.start);
  auto after = by_start_.find(cfg.end);
  const bool long_after = after != by_start_.end() && runs_[after->second].end - runs_[after->second].start >= 2 * kEntryPatchSize;
  if (before == by_end_.end() && !long_after) return "no padding of 5 bytes before it, nor of 10 after it";
  if (before != by_end_.end()) {
    const PaddingRun& run = runs_[before->second];
    auto flow = last_flow(run.before, run.start);
    if (!flow) return "the function before it does not decode up to its padding";
    if (*flow == Flow::Call || *flow == Flow::IndirectCall) return "the function before it ends in a call";
    if (!never_falls_through(*flow)) return "the function before it falls through into its padding";
  }
  return "its padding is out of reach, across a page, or after another function's end";
}

}  // namespace dyni::jit
