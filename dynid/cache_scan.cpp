// Recognising a target's existing dyni caches by their records.
#include "dynid/cache_scan.h"

#include <algorithm>
#include <cstring>

#include "dynid/target_memory.h"

namespace dyni {
namespace {

bool may_be_cache(const profiler::Mapping& m) {
  return m.path.empty() && m.readable && m.executable && !m.writable && !m.shared && m.end - m.start >= 4096;
}

}  // namespace

std::vector<CacheRecord> find_cache_records(pid_t pid, const std::vector<profiler::Mapping>& maps) {
  std::vector<CacheRecord> out;
  for (const profiler::Mapping& m : maps) {
    if (!may_be_cache(m)) continue;
    auto head = read_target(pid, m.start, 16);
    if (!head || !std::equal(kRecordMagic.begin(), kRecordMagic.end(), head->begin())) continue;
    uint32_t total = 0;
    std::memcpy(&total, head->data() + 12, 4);
    uint64_t length = m.end - m.start;
    if (total < 16 || total > kMaxRecordBytes || total > length) continue;
    auto bytes = read_target(pid, m.start, total);
    if (!bytes) continue;
    if (auto record = decode_record(*bytes, m.start, length)) out.push_back(std::move(*record));
  }
  return out;
}

bool holds_jump(pid_t pid, const PatchRecord& patch) {
  auto bytes = read_target(pid, patch.addr, patch.replacement.size());
  return bytes && std::equal(bytes->begin(), bytes->end(), patch.replacement.begin());
}

std::size_t live_patches(pid_t pid, const std::vector<PatchRecord>& patches) {
  return static_cast<std::size_t>(std::count_if(patches.begin(), patches.end(),
                                                [&](const PatchRecord& p) { return holds_jump(pid, p); }));
}

}  // namespace dyni
