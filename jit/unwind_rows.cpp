// Re-addressing a function's CFI rows to its cache copy.
#include "jit/unwind_rows.h"

namespace dyni::jit {

uint64_t frame_address(const EmittedCode& code, std::size_t k, uint64_t original_end) {
  const TranslationEntry& t = code.translation[k];
  bool past_end = t.kind == Translation::Jump && t.original_addr >= original_end && k > 0;
  return past_end ? code.translation[k - 1].original_addr : t.original_addr;
}

Result<std::vector<UnwindRow>> cache_unwind_rows(const std::vector<elf::CfiRow>& original, uint64_t original_end,
                                                 const EmittedCode& code) {
  std::vector<UnwindRow> rows;
  for (std::size_t k = 0; k < code.translation.size(); ++k) {
    uint64_t frame = frame_address(code, k, original_end);
    auto state = elf::cfi_state_at(original, original_end, frame);
    if (!state) return std::unexpected(state.error());
    if (!rows.empty() && rows.back().state == *state) continue;
    rows.push_back({code.translation[k].new_addr, frame, *state});
  }
  return rows;
}

}  // namespace dyni::jit
