// Re-addressing a function's CFI rows to its cache copy.
#include "jit/unwind_rows.h"

#include <fmt/format.h>

namespace dyni::jit {
namespace {

constexpr uint32_t kDwarfRsp = 7;

// The frame of counter code that has moved rsp `shift` bytes down (saving
// flags past the red zone, counting.h): a CFA found from rsp is that much
// further from it; one found from another register (rbp) is where it was,
// and so is every register saved at a CFA offset. A rule given by a DWARF
// expression may read rsp: it cannot be moved, and the copy gets no rows;
// nor can a frame kept in rax or rcx, which striped counter code uses.
Result<elf::CfiState> shifted(elf::CfiState state, uint8_t shift, uint64_t at) {
  if (!shift) return state;
  bool expression = state.cfa.expression;
  for (const elf::RegisterRule& r : state.regs)
    expression |= r.kind == elf::RegisterRule::Kind::Expression || r.kind == elf::RegisterRule::Kind::ValExpression ||
                  (r.kind == elf::RegisterRule::Kind::InRegister && r.value == kDwarfRsp);
  if (expression) return fail(fmt::format("counter code at {:#x} under a frame given by an expression", at));
  // Striped counter code holds other values in rax and rcx (counting.h): a
  // frame found from them, or a register kept in them, is not true there.
  constexpr uint16_t kDwarfRax = 0, kDwarfRcx = 2;
  bool scratch = state.cfa.reg == kDwarfRax || state.cfa.reg == kDwarfRcx;
  for (const elf::RegisterRule& r : state.regs)
    scratch |= r.kind == elf::RegisterRule::Kind::InRegister && (r.value == kDwarfRax || r.value == kDwarfRcx);
  if (scratch) return fail(fmt::format("counter code at {:#x} under a frame kept in rax or rcx", at));
  if (state.cfa.reg == kDwarfRsp) state.cfa.offset += shift;
  return state;
}

}  // namespace

uint64_t frame_address(const EmittedCode& code, std::size_t k, uint64_t original_end) {
  const TranslationEntry& t = code.translation[k];
  bool past_end = t.kind == Translation::Jump && t.original_addr >= original_end && k > 0;
  return past_end ? code.translation[k - 1].original_addr : t.original_addr;
}

Result<elf::CfiState> cache_frame(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                  const EmittedCode& code, std::size_t k) {
  auto state = elf::cfi_state_at(original, original_end, frame_address(code, k, original_end));
  if (!state) return state;
  return shifted(*state, code.translation[k].stack_shift, code.translation[k].new_addr);
}

Result<std::vector<UnwindRow>> cache_unwind_rows(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                                 const EmittedCode& code) {
  std::vector<UnwindRow> rows;
  for (std::size_t k = 0; k < code.translation.size(); ++k) {
    uint64_t frame = frame_address(code, k, original_end);
    auto state = cache_frame(original, original_end, code, k);
    if (!state) return std::unexpected(state.error());
    if (!rows.empty() && rows.back().state == *state) continue;
    rows.push_back({code.translation[k].new_addr, frame, *state});
  }
  return rows;
}

}  // namespace dyni::jit
