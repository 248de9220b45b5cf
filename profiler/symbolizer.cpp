// Loading a target's executable modules and resolving IPs to functions.
#include "profiler/symbolizer.h"

#include <elf.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "common/log.h"

namespace dyni::profiler {
namespace {

Module load_module(pid_t pid, const Mapping& m) {
  Module mod{m.path, m.deleted, 0, "", nullptr, m.inode, m.dev};
  // map_files names this exact mapping's file, even if deleted, renamed or in
  // another mount namespace.
  std::string via = fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end);
  auto file = elf::ElfFile::open(via);
  if (!file) {
    mod.error = file.error().message();
    return mod;
  }
  auto bias = mapping_bias(*file, m);
  // Detached debug symbols (e.g. libc6-dbg) name local functions too.
  std::optional<elf::ElfFile> debug;
  if (std::string path = elf::debug_file_path(file->build_id()); !path.empty() && ::access(path.c_str(), R_OK) == 0) {
    auto opened = elf::ElfFile::open_symbols(path);
    if (opened) debug = std::move(*opened);
    else log::warn("profiler: ignoring debug file {}: {}", path, opened.error().message());
  }
  auto table = elf::FunctionTable::build(*file, debug ? &*debug : nullptr);
  if (!bias || !table) {
    mod.error = bias ? table.error().message() : bias.error().message();
    return mod;
  }
  mod.bias = *bias;
  mod.functions = std::make_shared<const elf::FunctionTable>(std::move(*table));
  return mod;
}

}  // namespace

Result<uint64_t> mapping_bias(const elf::ElfFile& file, const Mapping& m) {
  for (const auto& seg : file.segments()) {
    if (seg.type != PT_LOAD || !(seg.flags & PF_X)) continue;
    if (m.offset < seg.offset || m.offset >= seg.offset + std::max(seg.filesz, uint64_t{1})) continue;
    uint64_t link_start = seg.vaddr + (m.offset - seg.offset);
    return m.start - link_start;
  }
  return fail(fmt::format("no executable PT_LOAD covers file offset {:#x}", m.offset));
}

Result<Symbolizer> Symbolizer::for_process(pid_t pid) {
  auto maps = read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  Symbolizer s;
  std::map<std::string, int> by_path;
  for (const Mapping& m : *maps) {
    if (!m.executable || !m.file_backed()) continue;
    std::string key = fmt::format("{}:{}", m.path, m.inode);
    auto it = by_path.find(key);
    if (it == by_path.end()) {
      Module mod = load_module(pid, m);
      if (!mod.error.empty())
        log::warn("profiler: pid {}: cannot read {}: {}", pid, m.path, mod.error);
      s.modules_.push_back(std::move(mod));
      it = by_path.emplace(key, static_cast<int>(s.modules_.size() - 1)).first;
    }
    s.ranges_.push_back({m.start, m.end, it->second});
  }
  std::sort(s.ranges_.begin(), s.ranges_.end(), [](auto& a, auto& b) { return a.start < b.start; });
  return s;
}

Location Symbolizer::locate(uint64_t ip) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), ip,
                             [](uint64_t a, const Range& r) { return a < r.start; });
  if (it == ranges_.begin()) return {};
  --it;
  if (ip >= it->end) return {};
  const Module& mod = modules_[static_cast<std::size_t>(it->module)];
  Location loc{it->module, nullptr, ip - mod.bias};
  if (mod.functions) loc.function = mod.functions->find(loc.link_addr);
  return loc;
}

}  // namespace dyni::profiler
