// Promoted calls: which sites, and their code (encoded by Zydis).
#include "jit/promotion.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "jit/call_target.h"
#include "jit/decoder.h"
#include "jit/encoding.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kCmpLength = 7, kJccLength = 6, kCallLength = 5;

// cmp r11, [rip + literal], at `at`.
Result<std::vector<uint8_t>> compare(uint64_t at, uint64_t literal) {
  ZydisEncoderRequest req = encoder_request(ZYDIS_MNEMONIC_CMP);
  req.operand_count = 2;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[0].reg.value = ZYDIS_REGISTER_R11;
  req.operands[1].type = ZYDIS_OPERAND_TYPE_MEMORY;
  req.operands[1].mem.base = ZYDIS_REGISTER_RIP;
  req.operands[1].mem.displacement = static_cast<int64_t>(literal - (at + kCmpLength));
  req.operands[1].mem.size = 8;
  return encoded(req);
}

// A rel32 branch `opcode` (call e8, jmp e9, jne 0f 85) at `at` to `to`.
Result<std::vector<uint8_t>> rel32(std::vector<uint8_t> opcode, uint64_t at, uint64_t to) {
  const int64_t delta = static_cast<int64_t>(to - (at + opcode.size() + 4));
  if (delta < INT32_MIN || delta > INT32_MAX) return fail(fmt::format("promoted call beyond ±2 GB at {:#x}", at));
  const int32_t d = static_cast<int32_t>(delta);
  const auto* raw = reinterpret_cast<const uint8_t*>(&d);
  opcode.insert(opcode.end(), raw, raw + 4);
  return opcode;
}

Result<std::vector<uint8_t>> call_r11() {
  ZydisEncoderRequest req = encoder_request(ZYDIS_MNEMONIC_CALL);
  req.operand_count = 1;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[0].reg.value = ZYDIS_REGISTER_R11;
  return encoded(req);
}

// Whether some path from instruction `i` of `cfg` on may read r11 before
// writing all of it (a call's clobber counts as a write, the ABI's; leaving
// the function ends a path): a caller that keeps a value in r11 across an
// indirect call (a callee declared no_caller_saved_registers, hand-written
// code) is never promoted, since the promoted code writes r11.
bool r11_read_from(const FunctionCfg& cfg, std::size_t i) {
  const uint16_t bit = gpr_bit(ZYDIS_REGISTER_R11);
  std::vector<std::size_t> work{i};
  std::set<std::size_t> seen;
  while (!work.empty()) {
    std::size_t k = work.back();
    work.pop_back();
    for (; k < cfg.instructions.size(); ++k) {
      if (!seen.insert(k).second) break;
      const Instruction& in = cfg.instructions[k];
      const RegisterUse use = register_use(in);
      if (use.read & bit) return true;
      const bool whole = in.operand_count >= 1 && in.ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                         gpr_bit(in.ops[0].reg) == bit && in.ops[0].size >= 32;
      if ((use.written & bit) && (whole || in.flow == Flow::Call || in.flow == Flow::IndirectCall)) break;
      if (use.written & bit) return true;  // a part of it written: the rest still read later, maybe
      if (in.flow == Flow::Return || in.flow == Flow::Stop || in.flow == Flow::IndirectBranch) break;
      if (in.has_target && (in.flow == Flow::Branch || in.flow == Flow::CondBranch)) {
        if (in.target < cfg.start || in.target >= cfg.end) return true;  // followed nowhere: say it may
        auto to = std::lower_bound(cfg.instructions.begin(), cfg.instructions.end(), in.target,
                                   [](const Instruction& x, uint64_t a) { return x.addr < a; });
        if (to == cfg.instructions.end() || to->addr != in.target) return true;
        work.push_back(static_cast<std::size_t>(to - cfg.instructions.begin()));
        if (in.flow == Flow::Branch) break;
      }
    }
  }
  return false;
}

}  // namespace

std::map<uint64_t, uint64_t> promotions(const FunctionCfg& cfg, const SiteCounts& counts, const std::set<uint64_t>& copied) {
  std::map<uint64_t, uint64_t> out;
  for (std::size_t i = 0; i < cfg.instructions.size(); ++i) {
    const Instruction& in = cfg.instructions[i];
    if (in.flow != Flow::IndirectCall || !target_loadable(in)) continue;
    auto site = counts.values.find(in.addr - cfg.start);
    if (site == counts.values.end() || site->second.targets.empty()) continue;
    const uint64_t calls = site->second.calls();
    const auto [target, n] = site->second.targets.front();
    if (calls < kPromoteMinCalls || static_cast<double>(n) < kPromoteShare * static_cast<double>(calls)) continue;
    if (copied.count(target) && !r11_read_from(cfg, i + 1)) out[in.addr] = target;
  }
  return out;
}

Result<std::size_t> promoted_length(const Instruction& call) {
  auto load = load_target(call, 0, ZYDIS_REGISTER_R11, 0);
  if (!load) return std::unexpected(load.error());
  return load->size() + kCmpLength + kJccLength + kCallLength;
}

std::vector<uint8_t> promoted_offsets(const Instruction& call) {
  auto load = load_target(call, 0, ZYDIS_REGISTER_R11, 0);
  if (!load) return {};
  std::vector<uint8_t> out;
  uint8_t at = 0;
  for (std::size_t n : {load->size(), kCmpLength, kJccLength, kCallLength})
    out.push_back(at), at = static_cast<uint8_t>(at + n);
  return out;
}

namespace {

// The parts in order, each where `offsets` planned it.
Result<std::vector<uint8_t>> joined(std::vector<Result<std::vector<uint8_t>>> parts, const std::vector<uint8_t>& offsets,
                                    uint64_t at) {
  std::vector<uint8_t> out;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (!parts[k]) return std::unexpected(parts[k].error());
    // Invariant: the planned offsets (the translation table rests on them).
    if (out.size() != offsets[k]) return fail(fmt::format("promoted call: step {} at {:#x} misplaced", k, at));
    out.insert(out.end(), parts[k]->begin(), parts[k]->end());
  }
  return out;
}

}  // namespace

Result<std::vector<uint8_t>> promoted_code(const Instruction& call, uint64_t at, uint64_t copy, uint64_t literal,
                                           uint64_t stub) {
  const std::vector<uint8_t> offsets = promoted_offsets(call);
  if (offsets.size() != kPromotedInstructions) return fail(fmt::format("promoted call: no load for {:#x}", call.addr));
  std::vector<Result<std::vector<uint8_t>>> parts;
  parts.push_back(load_target(call, at, ZYDIS_REGISTER_R11, 0));
  parts.push_back(compare(at + offsets[1], literal));
  parts.push_back(rel32({0x0f, 0x85}, at + offsets[2], stub));  // jne
  parts.push_back(rel32({0xe8}, at + offsets[3], copy));
  return joined(std::move(parts), offsets, at);
}

Result<std::vector<uint8_t>> promoted_stub(uint64_t at, uint64_t back) {
  std::vector<Result<std::vector<uint8_t>>> parts;
  parts.push_back(call_r11());
  parts.push_back(rel32({0xe9}, at + kStubCallLength, back));
  auto out = joined(std::move(parts), {0, static_cast<uint8_t>(kStubCallLength)}, at);
  if (out && out->size() != kStubLength) return fail(fmt::format("promoted call: a stub of {} bytes at {:#x}", out->size(), at));
  return out;
}

}  // namespace dyni::jit
