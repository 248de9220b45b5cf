// Decode-back checks of emitted code against its translation table.
#include "jit/verifier.h"

#include <fmt/format.h>

#include <map>

#include "jit/decoder.h"
#include "jit/relocator.h"

namespace dyni::jit {
namespace {

// The bytes of `in` other than its displacement and relative immediate.
bool same_bytes_outside_pc_fields(const Instruction& a, const Instruction& b) {
  if (a.length != b.length) return false;
  for (std::size_t i = 0; i < a.length; ++i) {
    bool in_disp = a.rip_relative && i >= a.zy.raw.disp.offset && i < a.zy.raw.disp.offset + 4u;
    bool in_imm = a.has_target && i >= a.zy.raw.imm[0].offset &&
                  i < a.zy.raw.imm[0].offset + a.zy.raw.imm[0].size / 8u;
    if (!in_disp && !in_imm && a.bytes[i] != b.bytes[i]) return false;
  }
  return true;
}

}  // namespace

Status verify(const FunctionCfg& original, const EmittedCode& code) {
  std::map<uint64_t, const Instruction*> by_addr;
  std::map<uint64_t, uint64_t> new_of;
  for (const Instruction& in : original.instructions) by_addr[in.addr] = &in;
  for (const TranslationEntry& t : code.translation) new_of[t.original_addr] = t.new_addr;
  if (new_of.size() != original.instructions.size())
    return fail("verifier: translation table does not cover every instruction");
  for (std::size_t k = 0; k < code.translation.size(); ++k) {
    const TranslationEntry& t = code.translation[k];
    auto orig = by_addr.find(t.original_addr);
    if (orig == by_addr.end()) return fail(fmt::format("verifier: no original for {:#x}", t.new_addr));
    const Instruction& o = *orig->second;
    uint64_t next = k + 1 < code.translation.size() ? code.translation[k + 1].new_addr : code.base + code.bytes.size();
    if (next - t.new_addr != relocated_length(o))
      return fail(fmt::format("verifier: {:#x} has the wrong length", t.new_addr));
    std::span<const uint8_t> at(code.bytes.data() + (t.new_addr - code.base), next - t.new_addr);
    // An expanded rel8-only branch ends in the jmp rel32 that carries its target.
    bool expanded = o.has_target && at.size() > o.length && o.length + 7u == at.size();
    auto d = decode_one(expanded ? at.subspan(at.size() - 5) : at,
                        expanded ? next - 5 : t.new_addr);
    if (!d) return fail("verifier: " + d.error().message());
    if (!expanded && d->zy.mnemonic != o.zy.mnemonic)
      return fail(fmt::format("verifier: {:#x} is not the instruction of {:#x}", t.new_addr, o.addr));
    if (!o.has_target && !o.rip_relative && !same_bytes_outside_pc_fields(o, *d))
      return fail(fmt::format("verifier: {:#x} changed bytes of {:#x}", t.new_addr, o.addr));
    if (o.rip_relative && (d->rip_address != o.rip_address || !same_bytes_outside_pc_fields(o, *d)))
      return fail(fmt::format("verifier: {:#x} no longer addresses {:#x}", t.new_addr, o.rip_address));
    if (o.has_target) {
      auto inside = new_of.find(o.target);
      uint64_t want = inside != new_of.end() ? inside->second : o.target;
      if (!d->has_target || d->target != want)
        return fail(fmt::format("verifier: branch at {:#x} misses the image of {:#x}", t.new_addr, o.target));
    }
  }
  return ok();
}

}  // namespace dyni::jit
