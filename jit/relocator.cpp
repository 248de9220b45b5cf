// Byte-level relocation of single x86-64 instructions, fields located by Zydis.
#include "jit/relocator.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <limits>

namespace dyni::jit {
namespace {

enum class Kind { Copy, PatchDisp, PatchImm32, WidenJmp8, WidenJcc8, ExpandRel8Only };

Kind kind_of(const Instruction& in) {
  if (in.rip_relative) return Kind::PatchDisp;
  if (!in.has_target) return Kind::Copy;
  if (is_rel8_only(in)) return Kind::ExpandRel8Only;
  if (in.imm.size == 32) return Kind::PatchImm32;
  if (in.flow == Flow::Branch) return Kind::WidenJmp8;
  return Kind::WidenJcc8;
}

Result<int32_t> rel32(uint64_t target, uint64_t next_ip, uint64_t at) {
  int64_t delta = static_cast<int64_t>(target - next_ip);
  if (delta < std::numeric_limits<int32_t>::min() || delta > std::numeric_limits<int32_t>::max())
    return fail(fmt::format("PC-relative operand beyond ±2 GB at {:#x}", at));
  return static_cast<int32_t>(delta);
}

void put32(std::vector<uint8_t>& out, std::size_t offset, int32_t v) {
  std::memcpy(out.data() + offset, &v, 4);
}

// Prefix bytes before the opcode (e.g. 0x67 of jecxz); hint prefixes of rel8
// jcc/jmp (0x2e/0x3e) are dropped when widening.
std::size_t prefix_length(const Instruction& in) { return in.prefix_count; }

}  // namespace

bool is_rel8_only(const Instruction& in) {
  ZydisMnemonic m = in.mnemonic;
  return m == ZYDIS_MNEMONIC_JRCXZ || m == ZYDIS_MNEMONIC_JECXZ || m == ZYDIS_MNEMONIC_LOOP ||
         m == ZYDIS_MNEMONIC_LOOPE || m == ZYDIS_MNEMONIC_LOOPNE;
}

Status check_relocatable(const Instruction& in) {
  if (in.rip_relative && in.disp.size != 32)
    return fail(fmt::format("RIP-relative operand without disp32 at {:#x}", in.addr));
  if (!in.has_target) return ok();
  Kind k = kind_of(in);
  bool known = (k == Kind::PatchImm32) || (k == Kind::ExpandRel8Only && in.imm.size == 8) ||
               (k == Kind::WidenJmp8 && in.imm.size == 8 && in.bytes[in.prefix_count] == 0xeb) ||
               (k == Kind::WidenJcc8 && in.imm.size == 8 && in.bytes[in.prefix_count] >= 0x70 &&
                in.bytes[in.prefix_count] <= 0x7f);
  if (!known) return fail(fmt::format("unsupported branch encoding at {:#x}", in.addr));
  return ok();
}

bool can_be_short(const Instruction& in) {
  if (!in.has_target || is_rel8_only(in)) return false;
  if (in.flow == Flow::CondBranch) return jcc_condition(in).has_value();
  return in.flow == Flow::Branch && in.mnemonic == ZYDIS_MNEMONIC_JMP;
}

std::size_t relocated_length(const Instruction& in, BranchWidth width) {
  if (width == BranchWidth::Short && can_be_short(in)) return 2;
  switch (kind_of(in)) {
    case Kind::Copy:
    case Kind::PatchDisp:
    case Kind::PatchImm32: return in.length;
    case Kind::WidenJmp8: return 5;
    case Kind::WidenJcc8: return 6;
    case Kind::ExpandRel8Only: return prefix_length(in) + 2 + 2 + 5;
  }
  return in.length;
}

Result<std::vector<uint8_t>> short_branch(uint64_t at, uint64_t target, std::optional<unsigned> cc) {
  if (!fits_rel8(at + 2, target)) return fail(fmt::format("short branch out of reach at {:#x}", at));
  uint8_t opcode = cc ? static_cast<uint8_t>(0x70 | *cc) : uint8_t{0xeb};
  return std::vector<uint8_t>{opcode, static_cast<uint8_t>(target - (at + 2))};
}

Result<std::vector<uint8_t>> relocate(const Instruction& in, uint64_t new_addr,
                                      std::optional<uint64_t> new_target, BranchWidth width) {
  std::vector<uint8_t> out(in.bytes.begin(), in.bytes.begin() + in.length);
  uint64_t target = new_target.value_or(in.target);
  if (width == BranchWidth::Short) {
    if (!can_be_short(in)) return fail(fmt::format("no short form for the branch at {:#x}", in.addr));
    return short_branch(new_addr, target, jcc_condition(in));
  }
  std::size_t len = relocated_length(in);
  switch (kind_of(in)) {
    case Kind::Copy: return out;
    case Kind::PatchDisp: {
      if (in.disp.size != 32) return fail(fmt::format("RIP-relative operand without disp32 at {:#x}", in.addr));
      auto d = rel32(in.rip_address, new_addr + len, in.addr);
      if (!d) return std::unexpected(d.error());
      put32(out, in.disp.offset, *d);
      return out;
    }
    case Kind::PatchImm32: {
      auto d = rel32(target, new_addr + len, in.addr);
      if (!d) return std::unexpected(d.error());
      put32(out, in.imm.offset, *d);
      return out;
    }
    case Kind::WidenJmp8: {
      auto d = rel32(target, new_addr + 5, in.addr);
      if (!d) return std::unexpected(d.error());
      out = {0xe9, 0, 0, 0, 0};
      put32(out, 1, *d);
      return out;
    }
    case Kind::WidenJcc8: {
      uint8_t opcode = in.bytes[prefix_length(in)];
      if (opcode < 0x70 || opcode > 0x7f) return fail(fmt::format("unexpected short branch at {:#x}", in.addr));
      auto d = rel32(target, new_addr + 6, in.addr);
      if (!d) return std::unexpected(d.error());
      out = {0x0f, static_cast<uint8_t>(0x80 | (opcode & 0x0f)), 0, 0, 0, 0};
      put32(out, 2, *d);
      return out;
    }
    case Kind::ExpandRel8Only: {
      std::size_t p = prefix_length(in);
      auto d = rel32(target, new_addr + len, in.addr);
      if (!d) return std::unexpected(d.error());
      out.assign(in.bytes.begin(), in.bytes.begin() + p + 1);  // prefixes + opcode
      out.insert(out.end(), {0x02, 0xeb, 0x05, 0xe9, 0, 0, 0, 0});  // op +2; jmp +5; jmp target
      put32(out, out.size() - 4, *d);
      return out;
    }
  }
  return out;
}

std::optional<unsigned> jcc_condition(const Instruction& in) {
  if (in.flow != Flow::CondBranch || is_rel8_only(in) || in.prefix_count + 1u >= in.length) return std::nullopt;
  uint8_t op = in.bytes[in.prefix_count], op2 = in.bytes[in.prefix_count + 1];
  if (op >= 0x70 && op <= 0x7f) return op & 0x0f;
  if (op == 0x0f && (op2 & 0xf0) == 0x80) return op2 & 0x0f;
  return std::nullopt;
}

Result<std::vector<uint8_t>> relocate_inverted(const Instruction& in, uint64_t new_addr, uint64_t new_target,
                                               BranchWidth width) {
  auto cc = jcc_condition(in);
  if (!cc) return fail(fmt::format("branch without an opposite condition at {:#x}", in.addr));
  if (width == BranchWidth::Short) return short_branch(new_addr, new_target, *cc ^ 1);
  auto out = relocate(in, new_addr, new_target);
  if (!out) return out;
  std::size_t opcode = out->size() >= 6 ? out->size() - 6 : 0;  // 0f 8x rel32, after any prefixes
  if (out->size() < 6 || (*out)[opcode] != 0x0f || ((*out)[opcode + 1] & 0xf0) != 0x80)
    return fail(fmt::format("relocated jcc without its 0f 8x opcode at {:#x}", in.addr));
  (*out)[opcode + 1] ^= 1;
  return out;
}

}  // namespace dyni::jit
