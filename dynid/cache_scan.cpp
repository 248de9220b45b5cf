// Recognising a target's existing dyni caches by their records.
#include "dynid/cache_scan.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "dynid/target_memory.h"
#include "elf/elf_file.h"
#include "profiler/symbolizer.h"

namespace dyni {
namespace {

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
  auto bytes = read_target(pid, patch.addr, changed_bytes(patch));
  return bytes && std::equal(bytes->begin(), bytes->end(), patch.replacement.begin());
}

// One descriptor of /proc/PID/mem, each page read once: an adopted child
// (a new backend) costs a few reads, not an open per patch (issue 21 item 3).
// Not process_vm_readv: it pins the pages, and pinning a page that a forked
// child still shares with its parent copies it (the kernel unshares anonymous
// pages under a pin), so each adopted child would get private copies of
// every patched page of the parent's text.
std::size_t live_patches(pid_t pid, const std::vector<PatchRecord>& patches) {
  WindowMemory memory(pid);
  return static_cast<std::size_t>(std::count_if(patches.begin(), patches.end(), [&](const PatchRecord& p) {
    if (p.kind == PatchKind::Pad) return false;  // a pad alone reaches nothing (an undo may leave one)
    auto bytes = memory.read(p.addr, changed_bytes(p));
    return bytes && std::equal(bytes->begin(), bytes->end(), p.replacement.begin());
  }));
}

std::optional<RecordModule> module_of_record(pid_t pid, const std::vector<profiler::Mapping>& maps,
                                             const CacheRecord& record, const std::string& exe_path,
                                             const std::string& exe_build_id) {
  // An executable without a build-id has records without one: it is the
  // only module dynid copies without (inject/target_module.h).
  if (record.build_id == exe_build_id) return RecordModule{exe_path, true, 0, 0};
  if (record.build_id.empty()) return std::nullopt;
  for (const profiler::Mapping& m : maps) {
    if (!m.executable || !m.file_backed() || m.path == exe_path) continue;
    // Only the headers and notes: every library of the target may be read here.
    auto file = elf::ElfFile::open_notes(fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end));
    if (!file || file->build_id() != record.build_id) continue;
    auto bias = profiler::mapping_bias(*file, m);
    if (bias && *bias == record.module_bias) return RecordModule{m.path, false, m.inode, m.start - m.offset, m.dev};
  }
  return std::nullopt;
}

}  // namespace dyni
