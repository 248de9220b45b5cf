// The target's executable as read for one injection (executable.h).
#include "dynid/inject/executable.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "dynid/proc_reader.h"
#include "dynid/patch_safety.h"
#include "dynid/target_memory.h"

namespace dyni::inject {

Result<Executable> read_executable(pid_t pid, const profiler::Symbolizer& symbols) {
  Executable exe;
  auto path = read_exe("/proc", pid);
  if (!path) return std::unexpected(path.error());
  for (const profiler::Module& m : symbols.modules())
    if (m.path == path->path && m.functions) exe.module = &m;
  if (!exe.module) return fail("the executable " + path->path + " has no function table");
  auto file = elf::ElfFile::open(fmt::format("/proc/{}/exe", pid));
  if (!file) return std::unexpected(file.error());
  exe.file = std::make_unique<elf::ElfFile>(std::move(*file));
  exe.image = std::make_unique<jit::ModuleImage>(*exe.file);
  const elf::Section* eh = exe.file->find_section(".eh_frame");
  const elf::Section* except = exe.file->find_section(".gcc_except_table");
  if (!eh) return fail("the executable has no .eh_frame");
  auto eh_bytes = exe.file->contents(*eh);
  if (!eh_bytes) return std::unexpected(eh_bytes.error());
  exe.unwind = {*eh_bytes, {}, 0, exe.module->bias};
  if (except)
    if (auto bytes = exe.file->contents(*except)) exe.unwind.lsda_section = *bytes, exe.unwind.lsda_section_addr = except->addr;
  auto fdes = elf::parse_eh_frame(*eh_bytes, eh->addr);
  if (!fdes) return std::unexpected(fdes.error());
  for (const elf::Fde& f : *fdes) exe.fdes[f.begin] = f;
  return exe;
}

std::pair<uint64_t, uint64_t> module_range(const std::vector<profiler::Mapping>& maps, const std::string& path) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& m : maps)
    if (m.path == path) lo = std::min(lo, m.start), hi = std::max(hi, m.end);
  return {lo, hi};
}

Status executable_where_it_was(pid_t pid, const Executable& prepared) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  if (module_range(*maps, prepared.module->path) != std::pair{prepared.lo, prepared.hi})
    return fail(fmt::format("process {}'s executable moved since it was read (exec?)", pid));
  return ok();
}

std::vector<uint64_t> unchanged_in_memory(pid_t pid, const Executable& exe, const std::vector<uint64_t>& hot,
                                          std::span<const PatchRecord> patched, std::vector<std::string>& skipped) {
  std::map<uint64_t, const PatchRecord*> ours;
  for (const PatchRecord& p : patched) ours[p.addr] = &p;
  std::vector<uint64_t> out;
  for (uint64_t addr : hot) {
    const elf::Function* f = exe.module->functions->find(addr);
    auto file_bytes = f ? exe.image->read(f->addr, f->size) : fail("unknown function");
    auto live = file_bytes ? read_target(pid, f->addr + exe.module->bias, f->size) : fail("");
    if (live)
      for (auto it = ours.lower_bound(f->addr + exe.module->bias); it != ours.end() && it->first < f->addr + exe.module->bias + f->size; ++it) {
        const uint64_t at = it->first - (f->addr + exe.module->bias);
        if (at + kPatchBytes > live->size()) continue;
        if (std::equal(it->second->replacement.begin(), it->second->replacement.end(), live->begin() + at))
          std::copy(it->second->original.begin(), it->second->original.end(), live->begin() + at);
      }
    if (live && std::equal(live->begin(), live->end(), file_bytes->begin(), file_bytes->end())) {
      out.push_back(addr);
      continue;
    }
    // A breakpoint is named as such: gdb's, or a uprobe's (the kernel
    // writes the int3 into the process's copy of the page).
    auto differs = live ? std::mismatch(live->begin(), live->end(), file_bytes->begin(), file_bytes->end()).first
                        : std::vector<uint8_t>::iterator{};
    if (live && differs != live->end() && *differs == kInt3)
      skipped.push_back(fmt::format("func_{:x}: {} at {:#x}", addr, kBreakpointInCode,
                                    f->addr + exe.module->bias + static_cast<uint64_t>(differs - live->begin())));
    else
      skipped.push_back(fmt::format("func_{:x}: its code in memory differs from the file", addr));
  }
  return out;
}

Result<std::vector<uint64_t>> without_rseq_sections(pid_t pid, const Executable& exe, const std::vector<uint64_t>& hot,
                                                    std::vector<std::string>& skipped) {
  const elf::Section* section = exe.file->find_section("__rseq_cs");
  if (!section || section->size == 0) return hot;
  const uint64_t bias = exe.module->bias;
  auto bytes = read_target(pid, section->addr + bias, section->size);
  if (!bytes) return fail("cannot read the executable's rseq descriptors: " + bytes.error().message());
  struct Range { uint64_t lo, hi; };
  std::vector<Range> held;
  for (std::size_t at = 0; at + 32 <= bytes->size(); at += 32) {
    uint64_t start = 0, length = 0, abort_ip = 0;
    std::memcpy(&start, bytes->data() + at + 8, 8);
    std::memcpy(&length, bytes->data() + at + 16, 8);
    std::memcpy(&abort_ip, bytes->data() + at + 24, 8);
    held.push_back({start, start + std::max<uint64_t>(length, 1)});
    held.push_back({abort_ip, abort_ip + 1});
  }
  std::vector<uint64_t> out;
  for (uint64_t addr : hot) {
    const elf::Function* f = exe.module->functions->find(addr);
    uint64_t lo = addr + bias, hi = lo + (f ? f->size : 1);
    bool holds = std::any_of(held.begin(), held.end(), [&](const Range& r) { return r.lo < hi && lo < r.hi; });
    if (holds)
      skipped.push_back(fmt::format("func_{:x}: holds an rseq critical section", addr));
    else
      out.push_back(addr);
  }
  return out;
}

}  // namespace dyni::inject
