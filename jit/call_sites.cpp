// Direct call sites in code left in the original, re-pointed at the copies
// (call_sites.h).
#include "jit/call_sites.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "jit/decoder.h"

namespace dyni::jit {
namespace {

// A `call rel32` or `jmp rel32` with no prefix.
bool is_site_form(const Instruction& in) {
  return in.prefix_count == 0 && in.has_target && in.length == kCallSiteBytes &&
         (in.bytes[0] == 0xe8 || in.bytes[0] == 0xe9);
}

// The function's instructions, when its whole range decodes as one run
// (decode_function refuses a byte that does not decode and a last
// instruction that runs past the end) and every direct branch into the range
// lands on one of them.
Result<std::vector<Instruction>> decode_whole(const elf::Function& f, const ModuleImage& image) {
  auto bytes = image.read(f.addr, f.size);
  if (!bytes) return std::unexpected(bytes.error());
  auto code = decode_function(*bytes, f.addr);
  if (!code) return std::unexpected(code.error());
  std::set<uint64_t> starts;
  for (const Instruction& in : *code) starts.insert(in.addr);
  for (const Instruction& in : *code)
    if (in.has_target && in.target >= f.addr && in.target < f.addr + f.size && !starts.count(in.target))
      return fail(fmt::format("the branch at {:#x} lands inside an instruction", in.addr));
  return code;
}

// `in`, displaced to `to`; nothing when rel32 cannot reach it.
std::optional<CallSitePatch> displaced(const Instruction& in, uint64_t to) {
  CallSitePatch p;
  p.addr = in.addr;
  std::copy_n(in.bytes.begin(), kCallSiteBytes, p.original.begin());
  const int64_t rel = static_cast<int64_t>(to - (in.addr + in.length));
  if (rel < std::numeric_limits<int32_t>::min() || rel > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const int32_t rel32 = static_cast<int32_t>(rel);
  p.replacement = p.original;
  std::memcpy(p.replacement.data() + 1, &rel32, 4);
  return p;
}

// The site's 5 bytes overlap an entry patch's 5 bytes.
bool overlaps_a_patch(uint64_t addr, const std::set<uint64_t>& patch_bytes) {
  auto it = patch_bytes.lower_bound(addr >= kCallSiteBytes ? addr - kCallSiteBytes + 1 : 0);
  return it != patch_bytes.end() && *it < addr + kCallSiteBytes;
}

// Callers may overlap (a function table keeps nested entries): the same
// site found twice is kept once; two sites that share bytes without being
// the same disagree on where an instruction starts, and both go.
CallSitePlan without_overlaps(CallSitePlan plan) {
  std::vector<CallSitePatch> unique;
  for (const CallSitePatch& p : plan.patches)
    if (unique.empty() || unique.back().addr != p.addr || unique.back().original != p.original) unique.push_back(p);
  auto overlap = [&](std::size_t a, std::size_t b) { return unique[a].addr + kCallSiteBytes > unique[b].addr; };
  plan.patches.clear();
  for (std::size_t i = 0; i < unique.size(); ++i)
    if (!(i > 0 && overlap(i - 1, i)) && !(i + 1 < unique.size() && overlap(i, i + 1))) plan.patches.push_back(unique[i]);
  return plan;
}

}  // namespace

CallSitePlan plan_call_sites(const ModuleImage& image, std::span<const elf::Function> callers,
                             const CopiedCode& copied) {
  CallSitePlan plan;
  std::set<uint64_t> seen;
  for (const elf::Function& f : callers) {
    if (copied.functions.count(f.addr) || !seen.insert(f.addr).second) continue;
    auto code = decode_whole(f, image);
    if (!code) {
      plan.unscanned.push_back(fmt::format("func_{:x}: {}", f.addr, code.error().message()));
      continue;
    }
    ++plan.callers_scanned;
    for (const Instruction& in : *code) {
      auto copy = is_site_form(in) ? copied.entries.find(in.target) : copied.entries.end();
      if (copy == copied.entries.end() || overlaps_a_patch(in.addr, copied.patch_bytes)) continue;
      auto p = displaced(in, copy->second);
      if (!p) continue;
      p->caller = f.addr, p->callee = copy->first;
      plan.patches.push_back(*p);
    }
  }
  std::sort(plan.patches.begin(), plan.patches.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  return without_overlaps(std::move(plan));
}

}  // namespace dyni::jit
