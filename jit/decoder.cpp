// Zydis decoding into Instructions with flow and PC-relative facts.
#include "jit/decoder.h"

#include <fmt/format.h>

#include <algorithm>

namespace dyni::jit {
namespace {

const ZydisDecoder& decoder() {
  static const ZydisDecoder d = [] {
    ZydisDecoder dec;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    return dec;
  }();
  return d;
}

Flow flow_of(const ZydisDecodedInstruction& zy) {
  // xabort outside a transaction does nothing; inside one, control resumes at
  // xbegin's abort target, which the CFG already has as xbegin's branch.
  if (zy.mnemonic == ZYDIS_MNEMONIC_XABORT) return Flow::Next;
  bool relative = zy.attributes & ZYDIS_ATTRIB_IS_RELATIVE;
  switch (zy.meta.category) {
    // xend is filed with the conditional branches but has no target: it
    // commits the transaction and goes on.
    case ZYDIS_CATEGORY_COND_BR: return relative ? Flow::CondBranch : Flow::Next;
    case ZYDIS_CATEGORY_UNCOND_BR: return relative ? Flow::Branch : Flow::IndirectBranch;
    case ZYDIS_CATEGORY_CALL: return relative ? Flow::Call : Flow::IndirectCall;
    case ZYDIS_CATEGORY_RET: return Flow::Return;
    default: break;
  }
  switch (zy.mnemonic) {
    case ZYDIS_MNEMONIC_INT3:
    case ZYDIS_MNEMONIC_UD2:
    case ZYDIS_MNEMONIC_HLT: return Flow::Stop;
    case ZYDIS_MNEMONIC_LOOP:
    case ZYDIS_MNEMONIC_LOOPE:
    case ZYDIS_MNEMONIC_LOOPNE:
    case ZYDIS_MNEMONIC_JRCXZ:
    case ZYDIS_MNEMONIC_JECXZ: return Flow::CondBranch;
    default: break;
  }
  return Flow::Next;
}

Operand compact(const ZydisDecodedOperand& op) {
  Operand o;
  o.type = op.type;
  o.actions = op.actions;
  o.size = op.size;
  if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) o.reg = op.reg.value;
  if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) {
    o.base = op.mem.base;
    o.index = op.mem.index;
    o.scale = op.mem.scale;
    o.disp = op.mem.disp.value;
  }
  if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) o.imm = op.imm.value.u;
  return o;
}

bool is_shift_or_rotate(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_SHL: case ZYDIS_MNEMONIC_SHR: case ZYDIS_MNEMONIC_SAR:
    case ZYDIS_MNEMONIC_ROL: case ZYDIS_MNEMONIC_ROR: case ZYDIS_MNEMONIC_RCL:
    case ZYDIS_MNEMONIC_RCR: case ZYDIS_MNEMONIC_SHLD: case ZYDIS_MNEMONIC_SHRD: return true;
    default: return false;
  }
}

// Whether `zy` writes its flags on every execution. Not so for: a shift or
// rotate by a count that may be 0 (by cl, or an immediate that masks to 0:
// the flags are left as they were), a rep-prefixed string instruction (rcx
// may be 0), and interrupts, syscalls and system instructions (taken to
// pass every flag through). "Undefined" flags count as written, as in
// LLVM's x86 definitions: no compiled code reads one.
bool writes_flags_always(const ZydisDecodedInstruction& zy, const ZydisDecodedOperand* ops) {
  switch (zy.meta.category) {
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_SYSTEM: return false;
    default: break;
  }
  if (zy.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) return false;
  if (!is_shift_or_rotate(zy.mnemonic)) return true;
  for (unsigned i = 0; i < zy.operand_count_visible; ++i)
    if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) return (ops[i].imm.value.u & (zy.operand_width == 64 ? 63 : 31)) != 0;
  return false;  // by cl
}

// What `zy` reads and always writes of the status flags. An interrupt,
// syscall or system instruction is taken to read them all.
void set_flags(const ZydisDecodedInstruction& zy, const ZydisDecodedOperand* ops, Instruction& in) {
  switch (zy.meta.category) {
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_SYSTEM: in.flags_read = kStatusFlags; return;
    default: break;
  }
  const ZydisAccessedFlags* f = zy.cpu_flags;
  if (!f) return;
  in.flags_read = static_cast<uint16_t>(f->tested & kStatusFlags);
  if (writes_flags_always(zy, ops))
    in.flags_written = static_cast<uint16_t>((f->modified | f->set_0 | f->set_1 | f->undefined) & kStatusFlags);
}

}  // namespace

Result<Instruction> decode_one(std::span<const uint8_t> bytes, uint64_t addr) {
  ZydisDecodedInstruction zy;
  std::array<ZydisDecodedOperand, ZYDIS_MAX_OPERAND_COUNT> ops;
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&decoder(), bytes.data(), bytes.size(), &zy, ops.data())))
    return fail(fmt::format("undecodable bytes at {:#x}", addr));
  Instruction in;
  in.addr = addr;
  in.length = zy.length;
  std::copy_n(bytes.begin(), in.length, in.bytes.begin());
  in.flow = flow_of(zy);
  in.mnemonic = zy.mnemonic;
  in.prefix_count = zy.raw.prefix_count;
  in.operand_count = zy.operand_count_visible;
  in.disp = {zy.raw.disp.offset, zy.raw.disp.size};
  in.imm = {zy.raw.imm[0].offset, zy.raw.imm[0].size};
  for (unsigned i = 0; i < in.ops.size() && i < zy.operand_count_visible; ++i) in.ops[i] = compact(ops[i]);
  set_flags(zy, ops.data(), in);
  for (unsigned i = 0; i < zy.operand_count_visible; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    bool rel_imm = op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative;
    bool rip_mem = op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP;
    if (!rel_imm && !rip_mem) continue;
    ZyanU64 absolute = 0;
    if (ZYAN_FAILED(ZydisCalcAbsoluteAddress(&zy, &op, addr, &absolute)))
      return fail(fmt::format("cannot compute the address operand at {:#x}", addr));
    if (rel_imm) {
      in.has_target = true;
      in.target = absolute;
    } else {
      in.rip_relative = true;
      in.rip_address = absolute;
    }
  }
  return in;
}

uint16_t gpr_bit(ZydisRegister r) {
  ZydisRegister wide = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r);
  if (wide < ZYDIS_REGISTER_RAX || wide > ZYDIS_REGISTER_R15) return 0;
  return static_cast<uint16_t>(1u << (wide - ZYDIS_REGISTER_RAX));
}

RegisterUse register_use(const Instruction& in) {
  constexpr uint16_t kAll = 0xffff;
  constexpr uint16_t kRsp = 1u << 4;
  RegisterUse use;
  ZydisDecodedInstruction zy;
  std::array<ZydisDecodedOperand, ZYDIS_MAX_OPERAND_COUNT> ops;
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&decoder(), in.bytes.data(), in.length, &zy, ops.data())))
    return {kAll, kAll, true, true};
  switch (zy.meta.category) {
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_SYSTEM: return {kAll, kAll, true, true};
    default: break;
  }
  if (zy.mnemonic == ZYDIS_MNEMONIC_NOP) return use;  // nop [rax+rax]: padding, the address is never formed
  for (unsigned i = 0; i < zy.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) {
      use.read |= gpr_bit(op.mem.base) | gpr_bit(op.mem.index);
      if (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) use.writes_memory = true;
    }
    if (op.type != ZYDIS_OPERAND_TYPE_REGISTER) continue;
    if (op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) use.read |= gpr_bit(op.reg.value);
    if (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) use.written |= gpr_bit(op.reg.value);
  }
  // Zydis 4 lists no rsi/rdi (nor rcx under rep) for cmps, scas, ins and
  // outs; every string instruction is taken to move all three. clzero stores 64 bytes
  // at [rax] without a memory operand.
  if (zy.meta.category == ZYDIS_CATEGORY_STRINGOP || zy.meta.category == ZYDIS_CATEGORY_IOSTRINGOP) {
    constexpr uint16_t kStringRegisters = (1u << 6) | (1u << 7) | (1u << 1);  // rsi rdi rcx
    use.read |= kStringRegisters;
    use.written |= kStringRegisters;
  }
  if (zy.mnemonic == ZYDIS_MNEMONIC_CLZERO) use.read |= 1u, use.writes_memory = true;
  if (in.flow == Flow::Call || in.flow == Flow::IndirectCall) {
    use.writes_memory = true;
    use.read |= kArguments | kRsp;
    use.written |= static_cast<uint16_t>(kAll & ~kCalleeSaved & ~kRsp);
  }
  const ZydisAccessedFlags* f = zy.cpu_flags;
  use.writes_flags = in.flow == Flow::Call || in.flow == Flow::IndirectCall ||
                     (f && (f->modified | f->set_0 | f->set_1 | f->undefined) != 0);
  return use;
}

Result<std::vector<uint8_t>> with_displacement(const Instruction& in, int32_t disp) {
  ZydisDecodedInstruction zy;
  std::array<ZydisDecodedOperand, ZYDIS_MAX_OPERAND_COUNT> ops;
  auto memory = [&]() -> int {
    int found = -1;
    for (unsigned i = 0; i < zy.operand_count_visible; ++i)
      if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY) found = found < 0 ? static_cast<int>(i) : -2;
    return found;
  };
  int m = -1;
  if (ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder(), in.bytes.data(), in.length, &zy, ops.data()))) m = memory();
  if (m < 0 || ops[m].mem.base == ZYDIS_REGISTER_RIP || ops[m].mem.type != ZYDIS_MEMOP_TYPE_MEM)
    return fail(fmt::format("not a base+index load at {:#x}", in.addr));
  ZydisEncoderRequest req;
  if (ZYAN_FAILED(ZydisEncoderDecodedInstructionToEncoderRequest(&zy, ops.data(), zy.operand_count_visible, &req)))
    return fail(fmt::format("cannot re-encode the load at {:#x}", in.addr));
  // A displacement that needs 32 bits: the encoder picks disp32, and the
  // length is then the same for every address the cache may get.
  req.operands[m].mem.displacement = disp;
  std::array<uint8_t, ZYDIS_MAX_INSTRUCTION_LENGTH> out{};
  ZyanUSize length = out.size();
  if (ZYAN_FAILED(ZydisEncoderEncodeInstruction(&req, out.data(), &length)))
    return fail(fmt::format("cannot re-encode the load at {:#x}", in.addr));
  return std::vector<uint8_t>(out.begin(), out.begin() + length);
}

Result<std::vector<Instruction>> decode_function(std::span<const uint8_t> bytes, uint64_t addr) {
  std::vector<Instruction> out;
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    auto in = decode_one(bytes.subspan(offset), addr + offset);
    if (!in) return std::unexpected(in.error());
    offset += in->length;
    out.push_back(*in);
  }
  return out;
}

}  // namespace dyni::jit
