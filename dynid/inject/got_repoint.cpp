// Other modules' JUMP_SLOT GOT slots re-pointed at a cache's copies, and put
// back (got_repoint.h).
#include "dynid/inject/got_repoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/inject/target_checks.h"
#include "dynid/target_memory.h"
#include "dynid/world_stop.h"
#include "elf/got_slots.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {
namespace {

using namespace std::chrono_literals;
constexpr int kSlotWindows = 5;  // a window whose threads do not all stop is tried again, 50 ms later
constexpr uint32_t kPtLoad = 1;

std::array<uint8_t, 8> bytes_of(uint64_t v) {
  std::array<uint8_t, 8> out{};
  std::memcpy(out.data(), &v, 8);
  return out;
}

std::string map_files_path(pid_t pid, const profiler::Mapping& m) {
  return fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end);
}

// What mapping `m` adds to `file`'s link-time addresses: the bias of the
// file's code mapping nearest below it (the same load of the file:
// profiler::mapping_bias), provided that some PT_LOAD segment holding m's
// file offset puts m where it is with that bias (else m is not the file's
// data as that load maps it: nothing in it is proven).
std::optional<uint64_t> bias_of(const elf::ElfFile& file, const std::vector<profiler::Mapping>& maps,
                                const profiler::Mapping& m) {
  const profiler::Mapping* code = nullptr;
  for (const profiler::Mapping& c : maps)
    if (c.executable && c.dev == m.dev && c.inode == m.inode && c.path == m.path && c.start <= m.start &&
        (!code || c.start > code->start))
      code = &c;
  auto bias = code ? profiler::mapping_bias(file, *code) : Result<uint64_t>(fail("no code mapping"));
  if (!bias) return std::nullopt;
  for (const elf::Segment& seg : file.segments())
    if (seg.type == kPtLoad && seg.offset / 4096 * 4096 <= m.offset && m.offset < seg.offset + seg.filesz &&
        m.start == *bias + seg.vaddr + m.offset - seg.offset)  // mod 2^64, as a bias is
      return *bias;
  return std::nullopt;
}

// A mapping a slot may lie in: a file's private data (not code, not shared
// memory such as /dev/zero or /dev/shm), the 8 bytes within it. A file
// replaced on disk since (an upgrade) is still read through map_files.
bool slot_mapping_kind(const profiler::Mapping& m, uint64_t addr) {
  return m.file_backed() && !m.shared && !m.executable && addr % 8 == 0 && addr >= m.start && addr + 8 <= m.end;
}

bool same_mapping(const profiler::Mapping& a, const profiler::Mapping& b) {
  return a.start == b.start && a.end == b.end && a.dev == b.dev && a.inode == b.inode && a.offset == b.offset &&
         a.path == b.path &&
         a.shared == b.shared && a.executable == b.executable;
}

// Whether `proven`'s mapping is still the one in `maps` (held in a window).
const profiler::Mapping* still_there(const std::vector<profiler::Mapping>& maps, const ProvenSlot& proven) {
  const profiler::Mapping* m = mapping_at(maps, proven.slot.addr);
  return m && same_mapping(*m, proven.mapping) ? m : nullptr;
}

// One stop window: the slots that are safe now are written. nullopt: no
// window (threads did not all stop in time).
Result<std::optional<std::vector<std::string>>> repoint_window(const std::vector<ProvenSlot>& slots, Injection& out) {
  RaisedPriority priority;  // outlives the WorldStop below
  auto w = WorldStop::stop(out.pid, kWindowStopTimeout);
  if (!w) return std::optional<std::vector<std::string>>{};
  if (auto same = same_target_with_record(out); !same) return std::unexpected(same.error());
  auto maps = profiler::read_maps(out.pid);  // held: no thread can map or unmap meanwhile
  if (!maps) return std::unexpected(maps.error());
  WindowMemory memory(out.pid);
  const EntryJumps entries = entry_jumps(out);
  const Reader read = [&](uint64_t addr, std::size_t n) { return memory.read(addr, n); };
  std::vector<std::string> skipped;
  for (const ProvenSlot& p : slots) {
    const SlotRecord& s = p.slot;
    auto skip = [&](const std::string& why) { skipped.push_back(fmt::format("GOT slot {:#x}: {}", s.addr, why)); };
    const profiler::Mapping* m = still_there(*maps, p);
    if (!m) {
      skip("its module's mapping changed since it was read (unloaded?)");
      continue;
    }
    if (word_of(memory.read(s.addr, 8)) != s.original) {
      skip("no longer holds the function it was bound to (ld.so or a GOT hook wrote it since)");
      continue;
    }
    if (!callee_entry_is_ours(s.original, s.replacement, entries, read)) {
      skip("its function's entry does not hold dyni's jump");
      continue;
    }
    if (auto r = memory.write_in_mapping(*m, s.addr, bytes_of(s.replacement)); !r) {
      skip(r.error().message());
      continue;
    }
    out.slots_patched.push_back(s);
  }
  w->resume();
  return std::optional{std::move(skipped)};
}

// Module `path`'s file and bias where its code is mapped now: the first
// code mapping of that path whose bias the file gives (an old binary may
// map its headers executable too).
struct LoadedFile {
  elf::ElfFile file;
  uint64_t bias = 0;
};
Result<LoadedFile> loaded_file(pid_t pid, const std::vector<profiler::Mapping>& maps, const std::string& path) {
  std::optional<elf::ElfFile> file;
  Status why = fail(path + " is not mapped as code");
  for (const profiler::Mapping& m : maps) {
    if (!m.file_backed() || !m.executable || m.path != path) continue;
    if (!file) {
      auto opened = elf::ElfFile::open(map_files_path(pid, m));
      if (!opened) return std::unexpected(opened.error());
      file = std::move(*opened);
    }
    auto bias = profiler::mapping_bias(*file, m);
    if (bias) return LoadedFile{std::move(*file), *bias};
    why = std::unexpected(bias.error());
  }
  return std::unexpected(why.error());
}

}  // namespace

Result<std::vector<SlotCandidate>> slot_candidates(pid_t pid, const std::vector<std::string>& holders, uint64_t lo,
                                                   uint64_t hi) {
  std::vector<SlotCandidate> out;
  if (holders.empty()) return out;
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  for (const std::string& holder : holders) {
    const bool mapped = std::any_of(maps->begin(), maps->end(), [&](const profiler::Mapping& m) {
      return m.file_backed() && m.executable && m.path == holder;
    });
    if (!mapped) continue;  // not loaded (unloaded since it was copied)
    auto loaded = loaded_file(pid, *maps, holder);
    auto slots = loaded ? elf::got_slots(loaded->file) : Result<std::vector<elf::GotSlot>>(std::unexpected(loaded.error()));
    if (!slots) {
      log::info("pid {}: no GOT slot of {} is re-pointed: {}", pid, holder, slots.error().message());
      continue;
    }
    for (const elf::GotSlot& s : *slots) {
      if (!s.jump_slot) continue;  // GLOB_DAT: an address-of may read it
      const uint64_t addr = s.slot + loaded->bias;
      std::optional<uint64_t> value = word_of(read_target(pid, addr, 8));
      if (value && *value >= lo && *value < hi) out.push_back({addr, *value});
    }
  }
  return out;
}

std::vector<SlotRecord> plan_slots(const std::vector<SlotCandidate>& candidates, const std::vector<CopyRange>& copies) {
  std::map<uint64_t, uint64_t> copy_of;  // a patched function's run-time start → its copy's
  for (const CopyRange& c : copies)
    if (c.entry_patch) copy_of[c.original_entry] = c.cache_addr;
  std::vector<SlotRecord> out;
  for (const SlotCandidate& c : candidates)
    if (auto it = copy_of.find(c.value); it != copy_of.end()) out.push_back({c.addr, c.value, it->second});
  return out;
}

std::vector<ProvenSlot> prove_slots(pid_t pid, const std::vector<SlotRecord>& slots) {
  std::vector<ProvenSlot> out;
  if (slots.empty()) return out;
  auto maps = profiler::read_maps(pid);
  if (!maps) {
    log::warn("pid {}: its GOT slots are left as they are: {}", pid, maps.error().message());
    return out;
  }
  std::map<uint64_t, std::set<uint64_t>> jump_slots;  // a mapping's start → its file's JUMP_SLOT slots, run-time
  for (const SlotRecord& s : slots) {
    const profiler::Mapping* m = mapping_at(*maps, s.addr);
    if (!m || !slot_mapping_kind(*m, s.addr)) continue;
    if (!jump_slots.contains(m->start)) {
      std::set<uint64_t>& known = jump_slots[m->start];
      auto file = elf::ElfFile::open(map_files_path(pid, *m));
      auto relocated = file ? elf::got_slots(*file) : Result<std::vector<elf::GotSlot>>(std::unexpected(file.error()));
      std::optional<uint64_t> bias = file ? bias_of(*file, *maps, *m) : std::nullopt;
      if (relocated && bias)
        for (const elf::GotSlot& g : *relocated)
          if (g.jump_slot) known.insert(g.slot + *bias);
    }
    if (jump_slots[m->start].contains(s.addr)) out.push_back({s, *m});
  }
  if (out.size() < slots.size())
    log::warn("pid {}: {} of {} GOT slots are not JUMP_SLOT slots of the files mapped there now (unloaded, or "
              "another file there): left as they are", pid, slots.size() - out.size(), slots.size());
  return out;
}

Status repoint_slots(const std::vector<SlotRecord>& slots, Injection& out) {
  if (slots.empty()) return ok();
  const std::vector<ProvenSlot> proven = prove_slots(out.pid, slots);
  if (proven.size() < slots.size())
    out.skipped.push_back(fmt::format("GOT slots: {} of {} are not JUMP_SLOT slots of the files mapped there now",
                                      slots.size() - proven.size(), slots.size()));
  if (proven.empty()) return ok();
  for (int window = 0; window < kSlotWindows; ++window) {
    auto skipped = repoint_window(proven, out);
    if (!skipped) return std::unexpected(skipped.error());
    if (*skipped) {
      out.skipped.insert(out.skipped.end(), (*skipped)->begin(), (*skipped)->end());
      return ok();
    }
    std::this_thread::sleep_for(50ms);
  }
  out.skipped.push_back(fmt::format("GOT slots: {} left as they are: the target's threads did not stop in time",
                                    proven.size()));
  return ok();
}

std::size_t restore_slots(pid_t pid, const std::vector<ProvenSlot>& proven, const std::vector<profiler::Mapping>& maps) {
  std::size_t restored = 0;
  WindowMemory memory(pid);
  for (const ProvenSlot& p : proven) {
    const SlotRecord& s = p.slot;
    const profiler::Mapping* m = still_there(maps, p);
    if (!m) {
      log::warn("pid {}: the GOT slot at {:#x} is left as it is: its mapping changed before the window", pid, s.addr);
      continue;
    }
    if (word_of(memory.read(s.addr, 8)) != s.replacement) continue;
    if (auto r = memory.write_in_mapping(*m, s.addr, bytes_of(s.original)); !r) {
      log::warn("pid {}: the GOT slot at {:#x} could not be put back ({}): it still leads to its copy, which stays "
                "mapped", pid, s.addr, r.error().message());
      continue;
    }
    ++restored;
  }
  return restored;
}

bool slot_holds(pid_t pid, const SlotRecord& s, uint64_t value) {
  return word_of(read_target(pid, s.addr, 8)) == value;
}

bool any_slot_repointed(const Injection& in) {
  return std::any_of(in.slots.begin(), in.slots.end(),
                     [&](const SlotRecord& s) { return slot_holds(in.pid, s, s.replacement); });
}

}  // namespace dyni::inject
