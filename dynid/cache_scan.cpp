// Recognising a target's existing dyni caches by their records.
#include "dynid/cache_scan.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "dynid/target_memory.h"

namespace dyni {
namespace {

// One descriptor of /proc/PID/mem, each page read once.
std::size_t live_patches_by_page(pid_t pid, const std::vector<PatchRecord>& patches) {
  WindowMemory memory(pid);
  return static_cast<std::size_t>(std::count_if(patches.begin(), patches.end(), [&](const PatchRecord& p) {
    auto bytes = memory.read(p.addr, p.replacement.size());
    return bytes && std::equal(bytes->begin(), bytes->end(), p.replacement.begin());
  }));
}

bool may_be_cache(const profiler::Mapping& m) {
  return m.path.empty() && m.readable && m.executable && !m.writable && !m.shared && m.end - m.start >= 4096;
}

// Each mapping that starts with dyni's magic: its record; or why it has none
// this dynid can read, when its version is one this dynid does not know (a
// record whose version it knows but which does not decode was never
// finished: a dynid killed while writing it, before any patch pointed there).
struct Scan {
  std::vector<CacheRecord> records;
  std::vector<std::string> unreadable;
};

Scan scan(pid_t pid, const std::vector<profiler::Mapping>& maps) {
  Scan out;
  for (const profiler::Mapping& m : maps) {
    if (!may_be_cache(m)) continue;
    auto head = read_target(pid, m.start, 16);
    if (!head || !std::equal(kRecordMagic.begin(), kRecordMagic.end(), head->begin())) continue;
    uint32_t version = 0, total = 0;
    std::memcpy(&version, head->data() + 8, 4);
    std::memcpy(&total, head->data() + 12, 4);
    if (version < CacheRecord::kOldestVersion || version > CacheRecord::kVersion) {
      out.unreadable.push_back(fmt::format("a dyni cache at {:#x} has a record of version {}, which this dynid "
                                           "cannot read (it reads {} to {})", m.start, version,
                                           CacheRecord::kOldestVersion, CacheRecord::kVersion));
      continue;
    }
    uint64_t length = m.end - m.start;
    if (total < 16 || total > kMaxRecordBytes || total > length) continue;
    auto bytes = read_target(pid, m.start, total);
    if (!bytes) continue;
    if (auto record = decode_record(*bytes, m.start, length)) out.records.push_back(std::move(*record));
  }
  return out;
}

}  // namespace

std::vector<CacheRecord> find_cache_records(pid_t pid, const std::vector<profiler::Mapping>& maps) {
  return scan(pid, maps).records;
}

std::vector<std::string> unreadable_cache_records(pid_t pid, const std::vector<profiler::Mapping>& maps) {
  return scan(pid, maps).unreadable;
}

bool holds_jump(pid_t pid, const PatchRecord& patch) {
  auto bytes = read_target(pid, patch.addr, patch.replacement.size());
  return bytes && std::equal(bytes->begin(), bytes->end(), patch.replacement.begin());
}

// The patches' bytes in one process_vm_readv a thousand patches, not a page
// read each (an adopted child, a new backend per connection, must cost
// little: issue 21 item 3); a patch whose bytes cannot be read is not live.
// Where the call is refused (a seccomp filter on dynid), page by page.
std::size_t live_patches(pid_t pid, const std::vector<PatchRecord>& patches) {
  std::vector<std::array<uint8_t, 5>> bytes(patches.size());
  std::vector<bool> read(patches.size(), false);
  std::size_t next = 0;
  while (next < patches.size()) {
    const std::size_t count = std::min<std::size_t>(patches.size() - next, IOV_MAX);
    std::vector<iovec> local(count), remote(count);
    for (std::size_t k = 0; k < count; ++k) {
      local[k] = {bytes[next + k].data(), bytes[next + k].size()};
      remote[k] = {reinterpret_cast<void*>(patches[next + k].addr), patches[next + k].replacement.size()};
    }
    const ssize_t n = ::process_vm_readv(pid, local.data(), count, remote.data(), count, 0);
    if (n < 0 && (errno == ENOSYS || errno == EPERM) && next == 0) return live_patches_by_page(pid, patches);
    if (n < 0 && errno == ESRCH) return 0;  // gone
    // It reads whole patches, and stops at the first it cannot read: that
    // one is not live, and the next call starts after it.
    const std::size_t whole = n < 0 ? 0 : static_cast<std::size_t>(n) / bytes[0].size();
    for (std::size_t k = 0; k < whole; ++k) read[next + k] = true;
    next += whole == count ? count : whole + 1;
  }
  std::size_t live = 0;
  for (std::size_t k = 0; k < patches.size(); ++k)
    live += read[k] && std::equal(bytes[k].begin(), bytes[k].end(), patches[k].replacement.begin());
  return live;
}

}  // namespace dyni
