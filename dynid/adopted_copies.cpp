// Rebuilding an adopted cache's copies from the target (adopted_copies.h).
#include "dynid/adopted_copies.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "common/file_io.h"
#include "dynid/copy_origins.h"
#include "dynid/target_memory.h"
#include "elf/eh_frame.h"
#include "elf/function_table.h"
#include "profiler/symbolizer.h"

namespace dyni {
namespace {

constexpr uint64_t kMaxEhFrameBytes = 16 << 20;  // dyni writes well under 1 MiB for 705 copies

}  // namespace


Result<AdoptedCopies> adopted_copies(pid_t pid, const CacheRecord& record) {
  AdoptedCopies out;
  // The record is the target's: its sizes are bounded before anything is read.
  if (record.eh_frame_size > kMaxEhFrameBytes || record.code_size > record.cache_length)
    return fail(fmt::format("the record's .eh_frame ({} bytes) or code is larger than dyni makes", record.eh_frame_size));
  const uint64_t eh_frame_addr = record.cache_addr + record.eh_frame_offset;
  auto bytes = read_target(pid, eh_frame_addr, record.eh_frame_size);
  if (!bytes) return std::unexpected(bytes.error());
  out.eh_frame = std::move(*bytes);
  auto fdes = elf::parse_eh_frame(out.eh_frame, eh_frame_addr);
  if (!fdes) return fail("the cache's .eh_frame: " + fdes.error().message());
  std::sort(fdes->begin(), fdes->end(), [](const elf::Fde& a, const elf::Fde& b) { return a.begin < b.begin; });
  auto symbols = profiler::Symbolizer::for_process(pid);
  if (!symbols) return std::unexpected(symbols.error());
  const uint64_t code_lo = record.cache_addr + record.code_offset, code_hi = code_lo + record.code_size;
  std::vector<bool> named(fdes->size(), false);
  for (const PatchRecord& patch : record.patches) {
    if (patch.kind != PatchKind::Entry) continue;
    const uint64_t to = entry_jump_target(patch, record.patches);  // through its pad, a short jump's
    if (to < code_lo || to >= code_hi) continue;
    auto fde = std::upper_bound(fdes->begin(), fdes->end(), to, [](uint64_t a, const elf::Fde& f) { return a < f.begin; });
    if (fde == fdes->begin()) continue;
    --fde;
    const std::size_t i = static_cast<std::size_t>(fde - fdes->begin());
    if (to >= fde->end || fde->begin < code_lo || fde->end > code_hi || named[i]) continue;
    named[i] = true;
    // The function's start: the patch lies there, or after a kept first
    // instruction or endbr64 (jit/patch_plan.h).
    const profiler::Location at = symbols->locate(patch.addr);
    const uint64_t start = at.function ? patch.addr - (at.link_addr - at.function->addr) : patch.addr;
    out.copies.push_back({fde->begin, fde->end - fde->begin, start,
                          at.function ? elf::display_name(*at.function) : fmt::format("func_{:x}", at.link_addr),
                          {}, patch.addr, std::nullopt});  // whether a uprobe leaves it whole is not recorded
  }
  std::sort(out.copies.begin(), out.copies.end(),
            [](const CopyRange& a, const CopyRange& b) { return a.cache_addr < b.cache_addr; });
  return out;
}

std::vector<CopyRange> copies_from_origins(const std::string& path, const CacheRecord& record,
                                           const std::string& tier) {
  std::vector<CopyRange> copies;
  auto text = read_file(path, 256 << 20);
  std::size_t skipped = 0;  // a line cut short by a dynid killed while writing
  auto origins = text ? parse_origins(*text, &skipped) : std::unexpected(text.error());
  if (!origins) return copies;
  std::map<uint64_t, CopyOrigin*> by_addr;  // a line written twice (appended again) counts once: the last
  for (CopyOrigin& o : *origins)
    if (o.tier == tier && o.cache_addr >= record.cache_addr && o.cache_addr + o.size <= record.cache_addr + record.cache_length)
      by_addr[o.cache_addr] = &o;
  for (auto& [addr, o] : by_addr) copies.push_back({o->cache_addr, o->size, o->original_entry, std::move(o->name), {}, 0, std::nullopt});
  return copies;
}

}  // namespace dyni
