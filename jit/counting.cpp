// Counter sites, counter code (encoded by Zydis) and counts back to edges.
#include "jit/counting.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "jit/flags_liveness.h"

namespace dyni::jit {
namespace {

std::size_t block_index(const FunctionCfg& cfg, uint64_t start) { return cfg.block_at(start) - cfg.blocks.data(); }

// Ways into each block: in-function edges, plus the call into the entry.
std::vector<unsigned> ways_in(const FunctionCfg& cfg) {
  std::vector<unsigned> n(cfg.blocks.size(), 0);
  if (!n.empty()) n[0] = 1;
  for (const Block& b : cfg.blocks)
    for (uint64_t s : b.successors) ++n[block_index(cfg, s)];
  return n;
}

// Where the block counter of `b` goes: the first instruction, up to its
// first call, before which the plain code may run; else the block's start.
// Never before a last jmp after other instructions, which the layout may
// drop (the counter would then stand for an instruction not in the copy).
CounterSite block_site(const FunctionCfg& cfg, const Block& b, const std::vector<uint16_t>& live) {
  for (std::size_t i = b.first; i < b.first + b.count; ++i) {
    bool droppable = i > b.first && i + 1 == b.first + b.count && cfg.instructions[i].flow == Flow::Branch;
    if (!droppable && !(live[i] & kCounterClobbers)) return {CounterKind::Block, b.start, cfg.instructions[i].addr, false, 0};
    Flow f = cfg.instructions[i].flow;
    if (f == Flow::Call || f == Flow::IndirectCall) break;
  }
  return {CounterKind::Block, b.start, b.start, true, 0};
}

// Whether the conditional branch ending `b` needs a fall-through counter:
// its edges do not follow from block counts alone.
bool needs_fall_through_site(const FunctionCfg& cfg, const Block& b, const std::vector<unsigned>& in) {
  const Instruction& last = cfg.instructions[b.first + b.count - 1];
  if (last.flow != Flow::CondBranch) return false;
  const Block* fall = cfg.block_at(last.end());
  if (!fall) return true;  // falls past the function's end
  if (last.has_target && last.target == last.end()) return false;  // both ways go to the same block
  return in[fall - cfg.blocks.data()] > 1;
}

Result<std::size_t> encode(const ZydisEncoderRequest& req, std::vector<uint8_t>& out) {
  std::array<uint8_t, ZYDIS_MAX_INSTRUCTION_LENGTH> buf{};
  ZyanUSize length = buf.size();
  if (ZYAN_FAILED(ZydisEncoderEncodeInstruction(&req, buf.data(), &length))) return fail("counter code: cannot encode");
  out.insert(out.end(), buf.begin(), buf.begin() + length);
  return length;
}

ZydisEncoderRequest request(ZydisMnemonic m) {
  ZydisEncoderRequest req;
  std::memset(&req, 0, sizeof req);
  req.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
  req.mnemonic = m;
  return req;
}

// lea rsp, [rsp + disp]
ZydisEncoderRequest move_rsp(int32_t disp) {
  ZydisEncoderRequest req = request(ZYDIS_MNEMONIC_LEA);
  req.operand_count = 2;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[0].reg.value = ZYDIS_REGISTER_RSP;
  req.operands[1].type = ZYDIS_OPERAND_TYPE_MEMORY;
  req.operands[1].mem.base = ZYDIS_REGISTER_RSP;
  req.operands[1].mem.displacement = disp;
  req.operands[1].mem.size = 8;
  return req;
}

// inc qword ptr [rip + disp]
ZydisEncoderRequest increment(int64_t disp) {
  ZydisEncoderRequest req = request(ZYDIS_MNEMONIC_INC);
  req.operand_count = 1;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_MEMORY;
  req.operands[0].mem.base = ZYDIS_REGISTER_RIP;
  req.operands[0].mem.displacement = disp;
  req.operands[0].mem.size = 8;
  return req;
}

constexpr std::size_t kIncLength = 7;  // 48 ff 05 disp32

}  // namespace

std::vector<CounterSite> plan_counters(const FunctionCfg& cfg, uint32_t first_slot) {
  std::vector<uint16_t> live = live_flags_before(cfg);
  std::vector<unsigned> in = ways_in(cfg);
  std::vector<CounterSite> sites;
  uint32_t slot = first_slot;
  for (const Block& b : cfg.blocks) {
    CounterSite s = block_site(cfg, b, live);
    s.slot = slot++;
    sites.push_back(s);
    if (!needs_fall_through_site(cfg, b, in)) continue;
    std::size_t last = b.first + b.count - 1;
    bool saves = live_flags_at_next(cfg, live, last) & kCounterClobbers;
    sites.push_back({CounterKind::FallThrough, cfg.instructions[last].addr, 0, saves, slot++});
  }
  return sites;
}

std::size_t counter_length(bool saves_flags) { return saves_flags ? 5 + 1 + kIncLength + 1 + 8 : kIncLength; }

std::vector<CounterStep> counter_steps(bool saves_flags) {
  if (!saves_flags) return {{0, 0}};
  constexpr uint8_t kPushed = kRedZone + 8;
  return {{0, 0}, {5, kRedZone}, {6, kPushed}, {6 + kIncLength, kPushed}, {7 + kIncLength, kRedZone}};
}

Result<CounterCode> counter_code(uint64_t at, uint64_t slot_addr, bool saves_flags) {
  CounterCode code;
  auto step = [&](const ZydisEncoderRequest& req, uint8_t shift) -> Status {
    code.steps.push_back({static_cast<uint8_t>(code.bytes.size()), shift});
    auto n = encode(req, code.bytes);
    return n ? ok() : Status(std::unexpected(n.error()));
  };
  const uint64_t inc_at = at + (saves_flags ? 6 : 0);
  const int64_t disp = static_cast<int64_t>(slot_addr - (inc_at + kIncLength));
  if (disp < INT32_MIN || disp > INT32_MAX) return fail(fmt::format("counter beyond ±2 GB at {:#x}", at));
  Status s = ok();
  if (saves_flags) {
    s = step(move_rsp(-static_cast<int32_t>(kRedZone)), 0);
    if (s) s = step(request(ZYDIS_MNEMONIC_PUSHFQ), kRedZone);
    if (s) s = step(increment(disp), kRedZone + 8);
    if (s) s = step(request(ZYDIS_MNEMONIC_POPFQ), kRedZone + 8);
    if (s) s = step(move_rsp(static_cast<int32_t>(kRedZone)), kRedZone);
  } else {
    s = step(increment(disp), 0);
  }
  if (!s) return std::unexpected(s.error());
  // Invariant: the planned length and places (emitted_size and the
  // translation table rest on them).
  std::vector<CounterStep> planned = counter_steps(saves_flags);
  bool same_places = planned.size() == code.steps.size() &&
                     std::equal(planned.begin(), planned.end(), code.steps.begin(), [](CounterStep a, CounterStep b) {
                       return a.offset == b.offset && a.stack_shift == b.stack_shift;
                     });
  if (code.bytes.size() != counter_length(saves_flags) || !same_places)
    return fail(fmt::format("counter code: {} bytes at {:#x}, planned {}", code.bytes.size(), at,
                            counter_length(saves_flags)));
  return code;
}

SiteCounts site_counts(uint64_t start, const std::vector<CounterSite>& sites, std::span<const uint64_t> counters) {
  SiteCounts out;
  for (const CounterSite& s : sites) {
    uint64_t value = s.slot < counters.size() ? counters[s.slot] : 0;
    (s.kind == CounterKind::Block ? out.blocks : out.falls)[s.at - start] = value;
  }
  return out;
}

std::array<uint8_t, 2> counter_off_bytes(bool saves_flags) {
  return {0xeb, static_cast<uint8_t>(counter_length(saves_flags) - 2)};
}

bool is_counter_start(std::span<const uint8_t> bytes, bool saves_flags) {
  static constexpr std::array<uint8_t, 3> kInc = {0x48, 0xff, 0x05};               // inc qword [rip + …]
  static constexpr std::array<uint8_t, 5> kLea = {0x48, 0x8d, 0x64, 0x24, 0x80};   // lea rsp, [rsp - 128]
  std::span<const uint8_t> want = saves_flags ? std::span<const uint8_t>(kLea) : std::span<const uint8_t>(kInc);
  return bytes.size() >= want.size() && std::equal(want.begin(), want.end(), bytes.begin());
}

FunctionCounts counts_from(const FunctionCfg& cfg, const SiteCounts& counts) {
  FunctionCounts out;
  out.blocks.assign(cfg.blocks.size(), 0);
  std::map<uint64_t, uint64_t> falls;  // conditional branch → its fall-through count
  for (const auto& [offset, n] : counts.blocks)
    if (const Block* b = cfg.block_at(cfg.start + offset); b && b->start == cfg.start + offset)
      out.blocks[b - cfg.blocks.data()] = n;
  for (const auto& [offset, n] : counts.falls) falls[cfg.start + offset] = n;
  for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
    const Block& b = cfg.blocks[k];
    const Instruction& last = cfg.instructions[b.first + b.count - 1];
    const uint64_t n = out.blocks[k];
    auto edge = [&](uint64_t to, uint64_t count) {
      if (const Block* t = cfg.block_at(to); t && t->start == to)
        out.edges.push_back({k, static_cast<std::size_t>(t - cfg.blocks.data()), static_cast<double>(count)});
    };
    if (last.flow == Flow::CondBranch) {
      auto site = falls.find(last.addr);
      const Block* fall = cfg.block_at(last.end());
      uint64_t fell = site != falls.end() ? site->second : fall ? out.blocks[fall - cfg.blocks.data()] : 0;
      fell = std::min(fell, n);
      if (last.has_target && last.target == last.end()) fell = n;
      if (fall) edge(last.end(), fell);
      if (last.has_target && last.target != last.end()) edge(last.target, n - fell);
      continue;
    }
    if (b.successors.size() == 1) {
      edge(b.successors[0], n);
      continue;
    }
    uint64_t total = 0;  // a jump table: split by the targets' own counts
    for (uint64_t s : b.successors) total += out.blocks[block_index(cfg, s)];
    for (uint64_t s : b.successors) {
      uint64_t share = out.blocks[block_index(cfg, s)];
      edge(s, total ? static_cast<uint64_t>(static_cast<double>(n) * static_cast<double>(share) / total) : 0);
    }
  }
  return out;
}

}  // namespace dyni::jit
