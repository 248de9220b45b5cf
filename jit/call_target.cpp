// Loading an indirect call's target: the operand re-encoded by Zydis.
#include "jit/call_target.h"

#include <fmt/format.h>

#include "jit/encoding.h"


namespace dyni::jit {
namespace {

bool is_gpr64(ZydisRegister r) { return ZydisRegisterGetClass(r) == ZYDIS_REGCLASS_GPR64; }

constexpr std::size_t kRipLoadLength = 7;  // REX.W 8B modrm disp32

}  // namespace

bool target_loadable(const Instruction& in) {
  if (in.flow != Flow::IndirectCall && in.flow != Flow::IndirectBranch) return false;
  if (in.operand_count < 1) return false;
  for (std::size_t k = 0; k < in.prefix_count && k < in.length; ++k)
    if ((in.bytes[k] & 0xf0) != 0x40) return false;
  const Operand& op = in.ops[0];
  if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) return is_gpr64(op.reg) && op.reg != ZYDIS_REGISTER_RSP;
  if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.size != 64) return false;
  const bool base_ok = op.base == ZYDIS_REGISTER_NONE || op.base == ZYDIS_REGISTER_RIP || is_gpr64(op.base);
  const bool index_ok = op.index == ZYDIS_REGISTER_NONE || (is_gpr64(op.index) && op.index != ZYDIS_REGISTER_RSP);
  return base_ok && index_ok && !(op.base == ZYDIS_REGISTER_RIP && op.index != ZYDIS_REGISTER_NONE);
}

Result<std::vector<uint8_t>> load_target(const Instruction& call, uint64_t at, ZydisRegister to, unsigned shift) {
  if (!target_loadable(call)) return fail(fmt::format("the target of {:#x} cannot be loaded", call.addr));
  const Operand& op = call.ops[0];
  ZydisEncoderRequest req = encoder_request(ZYDIS_MNEMONIC_MOV);
  req.operand_count = 2;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[0].reg.value = to;
  if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) {
    req.operands[1].type = ZYDIS_OPERAND_TYPE_REGISTER;
    req.operands[1].reg.value = op.reg;
  } else {
    int64_t disp = op.disp;
    if (op.base == ZYDIS_REGISTER_RSP) disp += shift;
    if (op.base == ZYDIS_REGISTER_RIP) disp = static_cast<int64_t>(call.rip_address - (at + kRipLoadLength));
    if (disp < INT32_MIN || disp > INT32_MAX) return fail(fmt::format("the target of {:#x} is beyond ±2 GB", call.addr));
    req.operands[1].type = ZYDIS_OPERAND_TYPE_MEMORY;
    req.operands[1].mem.base = op.base;
    req.operands[1].mem.index = op.index;
    req.operands[1].mem.scale = op.index == ZYDIS_REGISTER_NONE ? 0 : op.scale;
    req.operands[1].mem.displacement = disp;
    req.operands[1].mem.size = 8;
  }
  auto bytes = encoded(req);
  if (!bytes) return fail(fmt::format("the target of {:#x} cannot be encoded", call.addr));
  if (op.base == ZYDIS_REGISTER_RIP && bytes->size() != kRipLoadLength)
    return fail(fmt::format("the target of {:#x}: a rip-relative load of {} bytes", call.addr, bytes->size()));
  return bytes;
}

bool loads_target_of(const Instruction& load, const Instruction& call, ZydisRegister to, unsigned shift) {
  if (load.mnemonic != ZYDIS_MNEMONIC_MOV || load.operand_count != 2 || load.ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
      load.ops[0].reg != to || load.segment_override())
    return false;
  const Operand& want = call.ops[0];
  const Operand& got = load.ops[1];
  if (want.type != got.type) return false;
  if (want.type == ZYDIS_OPERAND_TYPE_REGISTER) return got.reg == want.reg;
  if (got.size != 64 || got.base != want.base || got.index != want.index ||
      (want.index != ZYDIS_REGISTER_NONE && got.scale != want.scale))
    return false;
  if (want.base == ZYDIS_REGISTER_RIP) return load.rip_address == call.rip_address;
  return got.disp == want.disp + (want.base == ZYDIS_REGISTER_RSP ? static_cast<int64_t>(shift) : 0);
}

}  // namespace dyni::jit
