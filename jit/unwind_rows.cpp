// Re-addressing a function's CFI rows to its cache copy.
#include "jit/unwind_rows.h"

namespace dyni::jit {

Result<std::vector<UnwindRow>> cache_unwind_rows(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                                 const EmittedCode& code) {
  std::vector<UnwindRow> rows;
  for (const TranslationEntry& t : code.translation) {
    auto state = elf::cfi_state_at(original, original_end, t.original_addr);
    if (!state) return std::unexpected(state.error());
    if (!rows.empty() && rows.back().state == *state) continue;
    rows.push_back({t.new_addr, t.original_addr, *state});
  }
  return rows;
}

}  // namespace dyni::jit
