// Direct call sites in code left in the original, re-pointed at the copies
// (call_sites.h).
#include "jit/call_sites.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "jit/decoder.h"

namespace dyni::jit {
namespace {

// Where the 5 rewritten bytes of `in` begin: the instruction itself for
// `call`/`jmp rel32`, its second byte for `jcc rel32`; -1 for any other
// form (a prefix, rel8, an indirect call).
int rewritten_offset(const Instruction& in) {
  if (in.prefix_count != 0 || !in.has_target) return -1;
  if (in.length == 5 && (in.bytes[0] == 0xe8 || in.bytes[0] == 0xe9)) return 0;
  if (in.length == 6 && in.bytes[0] == 0x0f && (in.bytes[1] & 0xf0) == 0x80) return 1;
  return -1;
}

// The function's instructions, when its whole range decodes as one run.
Result<std::vector<Instruction>> decode_whole(const elf::Function& f, const ModuleImage& image) {
  auto bytes = image.read(f.addr, f.size);
  if (!bytes) return std::unexpected(bytes.error());
  auto code = decode_function(*bytes, f.addr);
  if (!code) return std::unexpected(code.error());
  uint64_t end = code->empty() ? f.addr : code->back().addr + code->back().length;
  if (end != f.addr + f.size) return fail("its instructions do not end at its end");
  return code;
}

// `in`'s rewritten bytes, displaced to `to`; nothing when rel32 cannot reach it.
std::optional<CallSitePatch> displaced(const Instruction& in, int offset, uint64_t to) {
  CallSitePatch p;
  p.addr = in.addr + static_cast<uint64_t>(offset);
  std::copy_n(in.bytes.begin() + offset, kCallSiteBytes, p.original.begin());
  const int64_t rel = static_cast<int64_t>(to - (in.addr + in.length));
  if (rel < std::numeric_limits<int32_t>::min() || rel > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const int32_t rel32 = static_cast<int32_t>(rel);
  p.replacement = p.original;
  std::memcpy(p.replacement.data() + 1, &rel32, 4);
  return p;
}

// The site's 5 bytes overlap some copied entry's first 5 bytes (which the
// entry patch rewrites).
bool overlaps_an_entry(uint64_t addr, const std::map<uint64_t, uint64_t>& copies) {
  auto it = copies.lower_bound(addr >= kCallSiteBytes ? addr - kCallSiteBytes + 1 : 0);
  return it != copies.end() && it->first < addr + kCallSiteBytes;
}

}  // namespace

uint64_t rel32_target(uint64_t addr, std::span<const uint8_t, kCallSiteBytes> bytes) {
  int32_t rel = 0;
  std::memcpy(&rel, bytes.data() + 1, 4);
  return addr + kCallSiteBytes + static_cast<uint64_t>(static_cast<int64_t>(rel));
}

CallSitePlan plan_call_sites(const ModuleImage& image, std::span<const elf::Function> callers,
                             const std::map<uint64_t, uint64_t>& copies) {
  CallSitePlan plan;
  std::set<uint64_t> seen;
  for (const elf::Function& f : callers) {
    const uint64_t start = f.addr;
    if (copies.count(start) || !seen.insert(start).second) continue;
    auto code = decode_whole(f, image);
    if (!code) {
      plan.skipped.push_back(fmt::format("func_{:x}: call sites not scanned: {}", start, code.error().message()));
      continue;
    }
    ++plan.callers_scanned;
    for (const Instruction& in : *code) {
      const int offset = rewritten_offset(in);
      auto copy = offset < 0 ? copies.end() : copies.find(in.target);
      if (copy == copies.end()) continue;
      auto p = displaced(in, offset, copy->second);
      if (!p || overlaps_an_entry(p->addr, copies)) continue;
      p->caller = start, p->callee = copy->first;
      plan.patches.push_back(*p);
    }
  }
  std::sort(plan.patches.begin(), plan.patches.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  return plan;
}

}  // namespace dyni::jit
