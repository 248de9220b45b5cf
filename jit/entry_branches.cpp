// Byte scan for branch encodings into entry patches, confirmed by decoding.
#include "jit/entry_branches.h"

#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "jit/decoder.h"
#include "jit/patch_plan.h"

namespace dyni::jit {
namespace {

int32_t rel32_at(std::span<const uint8_t> b, std::size_t i) {
  int32_t v;
  std::memcpy(&v, b.data() + i, 4);
  return v;
}

// The branch targets that the bytes at `i` would encode, if they were a branch.
std::vector<uint64_t> encoded_targets(std::span<const uint8_t> b, std::size_t i, uint64_t at) {
  std::vector<uint64_t> out;
  uint8_t op = b[i];
  std::size_t left = b.size() - i;
  if ((op == 0xe8 || op == 0xe9) && left >= 5) out.push_back(at + 5 + rel32_at(b, i + 1));
  bool two_byte_rel32 = (op == 0x0f && (b[i + 1] & 0xf0) == 0x80) || (op == 0xc7 && b[i + 1] == 0xf8);
  if (left >= 6 && two_byte_rel32) out.push_back(at + 6 + rel32_at(b, i + 2));
  bool rel8 = op == 0xeb || (op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3);
  if (rel8 && left >= 2) out.push_back(at + 2 + static_cast<int8_t>(b[i + 1]));
  return out;
}

// The span whose bytes `target` lands inside, after its start, if any.
std::optional<uint64_t> landing(const PatchSpans& patches, uint64_t target) {
  auto it = patches.lower_bound(target);
  if (it == patches.begin()) return std::nullopt;
  --it;
  if (it->first < target && target < it->second) return it->first;
  return std::nullopt;
}

// The pad whose bytes `target` lands in, its first included, if any.
std::optional<uint64_t> pad_landing(const PatchSpans& pads, uint64_t target) {
  auto it = pads.upper_bound(target);
  if (it == pads.begin()) return std::nullopt;
  --it;
  if (target < it->second) return it->first;
  return std::nullopt;
}

// Whether some instruction of `bytes` (at `addr`) branches to `target`; a
// function that does not decode may.
bool branches_to(std::span<const uint8_t> bytes, uint64_t addr, uint64_t target) {
  auto decoded = decode_function(bytes, addr);
  if (!decoded) return true;
  for (const Instruction& in : *decoded)
    if (in.has_target && in.target == target) return true;
  return false;
}

}  // namespace

std::set<uint64_t> entries_branched_into(const elf::FunctionTable& functions, const ModuleImage& image,
                                         const PatchSpans& patches, const PatchSpans& pads) {
  std::set<uint64_t> out;
  if (patches.empty() && pads.empty()) return out;
  for (const elf::Function& f : functions.functions()) {
    if (!image.is_code(f.addr)) continue;
    auto bytes = image.read(f.addr, f.size);
    if (!bytes) continue;
    std::map<uint64_t, uint64_t> candidates;  // target → the patch it lands in
    auto own = [&](uint64_t patch) { return patch >= f.addr && patch < f.addr + f.size; };  // plan_patch's part
    for (std::size_t i = 0; i + 1 < bytes->size(); ++i)
      for (uint64_t target : encoded_targets(*bytes, i, f.addr + i))
        if (auto patch = landing(patches, target); patch && !own(*patch)) candidates[target] = *patch;
        else if (auto pad = pad_landing(pads, target)) candidates[target] = *pad;
    for (const auto& [target, patch] : candidates)
      if (!out.count(patch) && branches_to(*bytes, f.addr, target)) out.insert(patch);
  }
  return out;
}

}  // namespace dyni::jit
