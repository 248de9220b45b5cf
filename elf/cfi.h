// DWARF call-frame information: runs an FDE's CFI program (after its CIE's
// initial program) into rows — from each address on, how to find the CFA and
// each register's saved value. Input is untrusted (I9): every read is
// bounds-checked, the row count and remember-state depth are capped, and
// anything malformed is an error. Expressions are kept as opaque byte ranges
// (their offsets in .eh_frame): rows with them can be compared and copied.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "elf/eh_frame.h"

namespace dyni::elf {

constexpr std::size_t kCfiRegisters = 17;  // x86-64 DWARF: rax..r15 (0-15), return address (16)

struct CfaRule {
  uint32_t reg = 7;     // rsp
  int64_t offset = 8;   // CFA = reg + offset, unless `expression`
  bool expression = false;
  std::size_t expr_offset = 0, expr_size = 0;
  bool operator==(const CfaRule&) const = default;
};

struct RegisterRule {
  enum class Kind : uint8_t { Unspecified, Undefined, Same, AtCfa, ValCfa, InRegister, Expression, ValExpression };
  Kind kind = Kind::Unspecified;
  int64_t value = 0;  // AtCfa/ValCfa: offset from the CFA; InRegister: the register
  std::size_t expr_offset = 0, expr_size = 0;
  bool operator==(const RegisterRule&) const = default;
};

struct CfiState {
  CfaRule cfa;
  std::array<RegisterRule, kCfiRegisters> regs{};
  bool operator==(const CfiState&) const = default;
};

struct CfiRow {
  uint64_t addr = 0;  // in effect from here to the next row (or the FDE's end)
  CfiState state;
};

// The rows of `fde` (from parse_eh_frame over the same `eh_frame` bytes).
Result<std::vector<CfiRow>> cfi_rows(std::span<const uint8_t> eh_frame, const Fde& fde);

// The state in effect at `addr`, or an error outside [rows' first address, end).
Result<CfiState> cfi_state_at(const std::vector<CfiRow>& rows, uint64_t end, uint64_t addr);

}  // namespace dyni::elf
