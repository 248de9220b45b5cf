// The module whose hot functions are copied, as read for one injection
// (target_module.h).
#include "dynid/inject/target_module.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/paths.h"
#include "dynid/proc_reader.h"
#include "dynid/clean_thread.h"
#include "dynid/inject/module_policy.h"
#include "dynid/patch_safety.h"
#include "dynid/target_memory.h"
#include "elf/got_slots.h"
#include "jit/decoder.h"

namespace dyni::inject {

namespace {

// The library mapped from `path` with a function table, and the map_files
// name of its executable mapping (the very file mapped, whatever its path
// now names). A library mapped twice (dlmopen) is refused: the symbolizer
// keeps one bias for it.
struct FoundLibrary {
  const profiler::Module* module = nullptr;
  std::string opened;  // /proc/PID/map_files/... of its code mapping
  uint64_t load = 0;   // that mapping's start less its file offset
  profiler::Mapping code;
};

Result<FoundLibrary> find_library(pid_t pid, const profiler::Symbolizer& symbols,
                                  const std::vector<profiler::Mapping>& maps, const std::string& path) {
  const profiler::Module* module = nullptr;
  bool named = false;
  for (const profiler::Module& m : symbols.modules()) {
    named |= m.path == path;
    if (m.path == path && m.functions) module = &m;
  }
  if (!named) return fail(std::string("not mapped: ") + kUnloadedWhileRead);
  if (!module) return fail("not mapped with a function table");
  FoundLibrary found{module, "", 0, {}};
  int loads = 0, code = 0;
  for (const profiler::Mapping& m : maps) {
    if (m.path != path) continue;
    if (m.inode != module->inode) return fail("mapped from two files (replaced on disk and loaded again?)");
    loads += m.offset == 0;
    if (m.executable && code++ == 0) {
      found.opened = fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end), found.load = m.start - m.offset;
      found.code = m;
    }
  }
  if (loads == 0 && code == 0) return fail(std::string("not mapped now: ") + kUnloadedWhileRead);
  if (loads != 1 || code != 1) return fail(fmt::format("mapped {} times (dlmopen?)", std::max(loads, code)));
  return found;
}

std::map<uint64_t, PltStub> plt_stubs(const TargetModule& module) {
  std::map<uint64_t, PltStub> out;
  for (const char* name : {".plt", ".plt.sec", ".plt.got"}) {
    const elf::Section* plt = module.file->find_section(name);
    auto bytes = plt ? module.file->contents(*plt) : fail("");
    if (!bytes) continue;
    const uint64_t stride = plt->entsize ? plt->entsize : 16;
    for (uint64_t at = 0; at + stride <= bytes->size(); at += stride) {
      auto stub = jit::decode_function(bytes->subspan(at, stride), plt->addr + at);
      if (!stub) continue;  // a stub that does not decode whole is left to itself
      bool first = true;
      for (const jit::Instruction& in : *stub) {
        // jmp [rip+d]: the decoder files it as a branch without a target.
        if (in.mnemonic == ZYDIS_MNEMONIC_JMP && !in.has_target && in.rip_relative) {
          out[plt->addr + at] = {in.rip_address, first};
          break;
        }
        first = first && (in.mnemonic == ZYDIS_MNEMONIC_ENDBR64 || in.mnemonic == ZYDIS_MNEMONIC_NOP);
      }
    }
  }
  return out;
}

// glibc's functions that find their caller's module by the return address.
bool caller_sensitive(std::string_view name) {
  for (std::string_view n : {"dlopen", "dlmopen", "dlsym", "dlvsym", "__libc_dlopen_mode", "__libc_dlsym", "__libc_dlvsym"})
    if (name == n) return true;
  return false;
}

// The module's calls that reach those functions, through its PLT or its GOT,
// and the functions its own PLT's slots name, from its relocations: named
// whether or not ld.so has bound them yet.
Result<jit::CallerLookups> caller_lookups(const TargetModule& module) {
  auto slots = elf::got_slots(*module.file);
  if (!slots) return fail("cannot name its GOT slots: " + slots.error().message());
  jit::CallerLookups out;
  std::map<uint64_t, const elf::GotSlot*> by_slot;
  for (const elf::GotSlot& s : *slots) {
    by_slot[s.slot] = &s;
    if (caller_sensitive(s.name)) out.slots.insert(s.slot);
  }
  for (const auto& [stub, plt] : module.plt_stubs) {
    auto s = by_slot.find(plt.slot);
    if (s == by_slot.end()) continue;
    if (caller_sensitive(s->second->name)) out.stubs.insert(stub);
    else if (s->second->defined && s->second->jump_slot) out.plt_functions[stub] = s->second->defined;
  }
  return out;
}

}  // namespace

Result<TargetModule> read_target_module(pid_t pid, const profiler::Symbolizer& symbols, const std::string& path) {
  TargetModule target;
  auto exe = read_exe("/proc", pid);
  if (!exe) return std::unexpected(exe.error());
  target.executable = exe->path;
  const bool library = !path.empty() && path != exe->path;
  profiler::Mapping code;  // a library's code mapping
  const std::string what = library ? "the library " + path : "the executable " + exe->path;
  std::string opened = fmt::format("/proc/{}/exe", pid);
  if (library) {
    if (std::string why = why_library_stays(path); !why.empty()) return fail(why);
    auto maps = profiler::read_maps(pid);
    if (!maps) return std::unexpected(maps.error());
    auto found = find_library(pid, symbols, *maps, path);
    if (!found) return fail(what + ": " + found.error().message());
    target.module = found->module, opened = found->opened, target.load = found->load;
    code = found->code;
  } else {
    for (const profiler::Module& m : symbols.modules())
      if (m.path == exe->path && m.functions) target.module = &m;
    if (!target.module) return fail(what + " has no function table");
  }
  auto file = elf::ElfFile::open(opened);
  if (!file) return std::unexpected(file.error());
  target.file = std::make_unique<elf::ElfFile>(std::move(*file));
  // The symbols were read from the maps before: a library loaded again
  // elsewhere since has another bias than theirs.
  if (library) {
    auto bias = profiler::mapping_bias(*target.file, code);
    if (!bias || *bias != target.module->bias) return fail(what + ": loaded elsewhere now: " + kUnloadedWhileRead);
  }
  if (library && target.file->build_id().empty())
    return fail(what + " has no build-id (the cache's record names its module by it)");
  target.image = std::make_unique<jit::ModuleImage>(*target.file);
  const elf::Section* eh = target.file->find_section(".eh_frame");
  const elf::Section* except = target.file->find_section(".gcc_except_table");
  if (!eh) return fail(what + " has no .eh_frame");
  auto eh_bytes = target.file->contents(*eh);
  if (!eh_bytes) return std::unexpected(eh_bytes.error());
  target.unwind = {*eh_bytes, {}, 0, target.module->bias};
  if (except)
    if (auto bytes = target.file->contents(*except))
      target.unwind.lsda_section = *bytes, target.unwind.lsda_section_addr = except->addr;
  auto fdes = elf::parse_eh_frame(*eh_bytes, eh->addr);
  if (!fdes) return std::unexpected(fdes.error());
  for (const elf::Fde& f : *fdes) target.fdes[f.begin] = f;
  target.plt_stubs = plt_stubs(target);
  auto lookups = caller_lookups(target);
  if (!lookups) return fail(what + ": " + lookups.error().message());
  target.caller_lookups = std::move(*lookups);
  if (library && is_glibc_libc(path)) {
    auto kept = libc_functions_kept_in_place(*target.file, *target.module->functions);
    if (!kept) return fail(what + ": " + kept.error().message());
    target.system_library = true;
    target.kept_in_place = std::move(*kept);
  }
  return target;
}

jit::Redirects plt_redirects(pid_t pid, TargetModule& module) {
  jit::Redirects out;
  module.plt_slots.clear();
  const uint64_t bias = module.module->bias;
  for (const auto& [stub, plt] : module.plt_stubs) {
    std::optional<uint64_t> slot = plt.direct ? word_of(read_target(pid, plt.slot + bias, 8)) : std::nullopt;
    if (!slot) continue;
    const uint64_t value = *slot;
    const elf::Function* f = module.module->functions->find(value - bias);
    if (!f || f->addr != value - bias) continue;
    out.to[stub] = f->addr;
    module.plt_slots[plt.slot + bias] = value;
  }
  return out;
}

Status slots_unchanged(pid_t pid, const std::map<uint64_t, uint64_t>& slots) {
  for (const auto& [slot, value] : slots) {
    std::optional<uint64_t> now = word_of(read_target(pid, slot, 8));
    if (!now) return fail(fmt::format("cannot read the PLT slot at {:#x} again", slot));
    if (*now != value) return fail(fmt::format("the PLT slot at {:#x} changed since it was read (a GOT hook?)", slot));
  }
  return ok();
}

std::pair<uint64_t, uint64_t> module_range(const std::vector<profiler::Mapping>& maps, const std::string& path) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& m : maps)
    if (m.path == path) lo = std::min(lo, m.start), hi = std::max(hi, m.end);
  return {lo, hi};
}

Status module_where_it_was(pid_t pid, const TargetModule& prepared) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  const bool same_file = std::all_of(maps->begin(), maps->end(), [&](const profiler::Mapping& m) {
    return m.path != prepared.module->path || (m.inode == prepared.module->inode && m.dev == prepared.module->dev);
  });
  if (!same_file || module_range(*maps, prepared.module->path) != std::pair{prepared.lo, prepared.hi})
    return fail(fmt::format("process {}'s {} moved since it was read ({})", pid, prepared.module->path,
                            prepared.module->path == prepared.executable ? "exec?" : "unloaded and loaded again?"));
  return ok();
}

std::vector<uint64_t> unchanged_in_memory(pid_t pid, const TargetModule& exe, const std::vector<uint64_t>& hot,
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

Result<std::vector<uint64_t>> without_rseq_sections(pid_t pid, const TargetModule& exe, const std::vector<uint64_t>& hot,
                                                    std::vector<std::string>& skipped) {
  const elf::Section* section = exe.file->find_section("__rseq_cs");
  if (!section || section->size == 0) return hot;
  const uint64_t bias = exe.module->bias;
  auto bytes = read_target(pid, section->addr + bias, section->size);
  if (!bytes) return fail("cannot read the rseq descriptors of " + exe.module->path + ": " + bytes.error().message());
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
