// Emits a function's code for a new address. For now in original order (the
// profile-guided layout comes next): every instruction relocated, branches to
// instructions of the same function aimed at their new copies, everything
// else (calls, tail calls, jump-table targets) at the original code, which
// stays intact (I1). Returns the bytes and the translation table (I6).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "jit/cfg.h"

namespace dyni::jit {

struct TranslationEntry {
  uint64_t new_addr = 0;
  uint64_t original_addr = 0;
};

struct EmittedCode {
  uint64_t base = 0;
  std::vector<uint8_t> bytes;
  std::vector<TranslationEntry> translation;  // one per instruction, in new-address order
};

Result<EmittedCode> emit_in_order(const FunctionCfg& cfg, uint64_t base);

}  // namespace dyni::jit
