// A DWARF CFI interpreter for .eh_frame programs (DWARF 5 §6.4.2 opcodes, plus
// GNU_args_size and GNU_negative_offset_extended).
#include "elf/cfi.h"

#include <fmt/format.h>

#include <algorithm>

#include "elf/byte_reader.h"

namespace dyni::elf {
namespace {

constexpr std::size_t kMaxRows = 1 << 16;
constexpr std::size_t kMaxRememberDepth = 64;

using Kind = RegisterRule::Kind;

// Factored offsets in two's-complement arithmetic: hostile values wrap
// instead of overflowing (they then fail to match anything sane).
int64_t scale(uint64_t v, int64_t factor) { return static_cast<int64_t>(v * static_cast<uint64_t>(factor)); }
int64_t scale(int64_t v, int64_t factor) { return scale(static_cast<uint64_t>(v), factor); }
int64_t wrap_neg(int64_t v) { return static_cast<int64_t>(0 - static_cast<uint64_t>(v)); }

class Interpreter {
 public:
  Interpreter(std::span<const uint8_t> eh_frame, const Fde& fde) : bytes_(eh_frame), fde_(fde) {
    rows_.push_back({fde.begin, {}});
  }

  Status run(std::size_t offset, std::size_t size, bool initial) {
    if (offset > bytes_.size() || size > bytes_.size() - offset) return fail("CFI program outside .eh_frame");
    ByteReader r(bytes_.first(offset + size), offset);
    while (r.pos() < offset + size) {
      auto op = r.read<uint8_t>();
      if (!op) return fail("truncated CFI program");
      if (auto s = step(r, *op); !s) return s;
    }
    if (initial) initial_ = state();
    return ok();
  }

  std::vector<CfiRow> rows() && { return std::move(rows_); }

 private:
  CfiState& state() { return rows_.back().state; }

  Status advance(uint64_t delta) {
    uint64_t step = 0, to = 0;
    if (__builtin_mul_overflow(delta, fde_.code_align, &step) || __builtin_add_overflow(rows_.back().addr, step, &to) ||
        to > fde_.end)
      return fail("CFI advances past the FDE");
    if (to == rows_.back().addr) return ok();
    if (rows_.size() >= kMaxRows) return fail("too many CFI rows");
    rows_.push_back({to, state()});
    return ok();
  }

  Result<RegisterRule*> reg(std::optional<uint64_t> r) {
    if (!r || *r >= kCfiRegisters) return fail("CFI register out of range");
    return &state().regs[*r];
  }

  Status set(std::optional<uint64_t> r, Kind kind, int64_t value = 0) {
    auto rule = reg(r);
    if (!rule) return std::unexpected(rule.error());
    **rule = {kind, value, 0, 0};
    return ok();
  }

  Status set_expression(ByteReader& r, std::optional<uint64_t> regnum, Kind kind) {
    auto len = r.uleb128();
    std::size_t at = r.pos();
    if (!len || !r.skip(*len)) return fail("truncated CFI expression");
    auto rule = reg(regnum);
    if (!rule) return std::unexpected(rule.error());
    **rule = {kind, 0, at, static_cast<std::size_t>(*len)};
    return ok();
  }

  Status def_cfa(std::optional<uint64_t> r, std::optional<int64_t> offset) {
    if (!r || !offset || *r >= kCfiRegisters) return fail("bad CFA rule");
    state().cfa = {static_cast<uint32_t>(*r), *offset, false, 0, 0};
    return ok();
  }

  Status step(ByteReader& r, uint8_t op) {
    uint8_t low = op & 0x3f;
    int64_t da = fde_.data_align;
    switch (op >> 6) {
      case 1: return advance(low);                                               // advance_loc
      case 2: {                                                                  // offset
        auto off = r.uleb128();
        if (!off) return fail("truncated CFI offset");
        return set(low, Kind::AtCfa, scale(*off, da));
      }
      case 3: return restore(low);                                               // restore
      default: break;
    }
    switch (op) {
      case 0x00: return ok();                                                    // nop
      case 0x01: return fail("DW_CFA_set_loc in .eh_frame");
      case 0x02: { auto d = r.read<uint8_t>(); return d ? advance(*d) : fail("truncated CFI"); }
      case 0x03: { auto d = r.read<uint16_t>(); return d ? advance(*d) : fail("truncated CFI"); }
      case 0x04: { auto d = r.read<uint32_t>(); return d ? advance(*d) : fail("truncated CFI"); }
      case 0x05: {                                                               // offset_extended
        auto regnum = r.uleb128();
        auto off = r.uleb128();
        return off ? set(regnum, Kind::AtCfa, scale(*off, da)) : fail("truncated CFI");
      }
      case 0x06: return restore(r.uleb128());                                    // restore_extended
      case 0x07: return set(r.uleb128(), Kind::Undefined);
      case 0x08: return set(r.uleb128(), Kind::Same);
      case 0x09: {                                                               // register
        auto regnum = r.uleb128();
        auto other = r.uleb128();
        if (!other || *other >= kCfiRegisters) return fail("CFI register out of range");
        return set(regnum, Kind::InRegister, static_cast<int64_t>(*other));
      }
      case 0x0a:                                                                 // remember_state
        if (stack_.size() >= kMaxRememberDepth) return fail("CFI remember_state too deep");
        stack_.push_back(state());
        return ok();
      case 0x0b:                                                                 // restore_state
        if (stack_.empty()) return fail("CFI restore_state without remember_state");
        state() = stack_.back();
        stack_.pop_back();
        return ok();
      case 0x0c: { auto regnum = r.uleb128(); auto off = r.uleb128();            // def_cfa
        return def_cfa(regnum, off ? std::optional(static_cast<int64_t>(*off)) : std::nullopt); }
      case 0x0d: {                                                               // def_cfa_register
        auto regnum = r.uleb128();
        if (state().cfa.expression) return fail("def_cfa_register after a CFA expression");
        return def_cfa(regnum, state().cfa.offset);
      }
      case 0x0e: { auto off = r.uleb128();                                       // def_cfa_offset
        return def_cfa(state().cfa.reg, off ? std::optional(static_cast<int64_t>(*off)) : std::nullopt); }
      case 0x0f: {                                                               // def_cfa_expression
        auto len = r.uleb128();
        std::size_t at = r.pos();
        if (!len || !r.skip(*len)) return fail("truncated CFA expression");
        state().cfa = {0, 0, true, at, static_cast<std::size_t>(*len)};
        return ok();
      }
      case 0x10: { auto regnum = r.uleb128(); return set_expression(r, regnum, Kind::Expression); }
      case 0x11: {                                                               // offset_extended_sf
        auto regnum = r.uleb128();
        auto off = r.sleb128();
        return off ? set(regnum, Kind::AtCfa, scale(*off, da)) : fail("truncated CFI");
      }
      case 0x12: { auto regnum = r.uleb128(); auto off = r.sleb128();            // def_cfa_sf
        return def_cfa(regnum, off ? std::optional(scale(*off, da)) : std::nullopt); }
      case 0x13: { auto off = r.sleb128();                                       // def_cfa_offset_sf
        return def_cfa(state().cfa.reg, off ? std::optional(scale(*off, da)) : std::nullopt); }
      case 0x14: { auto regnum = r.uleb128(); auto off = r.uleb128();            // val_offset
        return off ? set(regnum, Kind::ValCfa, scale(*off, da)) : fail("truncated CFI"); }
      case 0x15: { auto regnum = r.uleb128(); auto off = r.sleb128();            // val_offset_sf
        return off ? set(regnum, Kind::ValCfa, scale(*off, da)) : fail("truncated CFI"); }
      case 0x16: { auto regnum = r.uleb128(); return set_expression(r, regnum, Kind::ValExpression); }
      case 0x2e: return r.uleb128() ? ok() : fail("truncated CFI");              // GNU_args_size
      case 0x2f: {                                                               // GNU_negative_offset_extended
        auto regnum = r.uleb128();
        auto off = r.uleb128();
        return off ? set(regnum, Kind::AtCfa, wrap_neg(scale(*off, da))) : fail("truncated CFI");
      }
      default: return fail(fmt::format("unknown CFI opcode {:#x}", op));
    }
  }

  Status restore(std::optional<uint64_t> regnum) {
    if (!regnum || *regnum >= kCfiRegisters) return fail("CFI register out of range");
    state().regs[*regnum] = initial_.regs[*regnum];
    return ok();
  }

  std::span<const uint8_t> bytes_;
  const Fde& fde_;
  std::vector<CfiRow> rows_;
  std::vector<CfiState> stack_;
  CfiState initial_;
};

}  // namespace

Result<std::vector<CfiRow>> cfi_rows(std::span<const uint8_t> eh_frame, const Fde& fde) {
  Interpreter in(eh_frame, fde);
  if (auto s = in.run(fde.cie_program, fde.cie_program_size, true); !s) return std::unexpected(s.error());
  if (auto s = in.run(fde.program, fde.program_size, false); !s) return std::unexpected(s.error());
  return std::move(in).rows();
}

Result<CfiState> cfi_state_at(const std::vector<CfiRow>& rows, uint64_t end, uint64_t addr) {
  if (rows.empty() || addr < rows.front().addr || addr >= end)
    return fail(fmt::format("no unwind row for {:#x}", addr));
  auto it = std::upper_bound(rows.begin(), rows.end(), addr, [](uint64_t a, const CfiRow& r) { return a < r.addr; });
  return std::prev(it)->state;
}

}  // namespace dyni::elf
