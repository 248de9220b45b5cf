// Other modules' JUMP_SLOT GOT slots re-pointed at a cache's copies, and put
// back (got_repoint.h).
#include "dynid/inject/got_repoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/inject/target_checks.h"
#include "dynid/target_memory.h"
#include "dynid/world_stop.h"
#include "elf/got_slots.h"

namespace dyni::inject {
namespace {

using namespace std::chrono_literals;
constexpr int kSlotWindows = 5;  // a window whose threads do not all stop is tried again, 50 ms later

std::array<uint8_t, 8> bytes_of(uint64_t v) {
  std::array<uint8_t, 8> out{};
  std::memcpy(out.data(), &v, 8);
  return out;
}

std::optional<uint64_t> value_of(const Result<std::vector<uint8_t>>& bytes) {
  if (!bytes || bytes->size() != 8) return std::nullopt;
  uint64_t v = 0;
  std::memcpy(&v, bytes->data(), 8);
  return v;
}

// Where a slot may be written: 8-aligned (one write, never across a page)
// in a data mapping (not code) of a file; of one of `files` where they are
// known. The cache itself is anonymous memory.
const profiler::Mapping* slot_mapping(const std::vector<profiler::Mapping>& maps, uint64_t addr,
                                      const std::vector<uint64_t>& files) {
  const profiler::Mapping* m = mapping_at(maps, addr);
  if (!m || addr % 8 || m->executable || !m->file_backed() || addr + 8 > m->end) return nullptr;
  if (!files.empty() && std::find(files.begin(), files.end(), m->inode) == files.end()) return nullptr;
  return m;
}

// A mapping of the holder's file, as it is loaded now (none: unloaded).
const profiler::Mapping* mapping_of(const std::vector<profiler::Mapping>& maps, const SlotHolder& holder) {
  for (const profiler::Mapping& m : maps)
    if (m.file_backed() && m.inode == holder.inode && m.path == holder.module) return &m;
  return nullptr;
}

// One stop window: the slots that are safe now are written. nullopt: no
// window (threads did not all stop in time).
Result<std::optional<std::vector<std::string>>> repoint_window(const std::vector<SlotRecord>& slots, Injection& out) {
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
  for (const SlotRecord& s : slots) {
    auto skip = [&](const std::string& why) { skipped.push_back(fmt::format("GOT slot {:#x}: {}", s.addr, why)); };
    const profiler::Mapping* m = slot_mapping(*maps, s.addr, out.slot_files);
    if (!m) {
      skip("no longer in a data mapping of the module that held it (unloaded?)");
      continue;
    }
    if (value_of(memory.read(s.addr, 8)) != s.original) {
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

}  // namespace

Result<std::vector<SlotCandidate>> slot_candidates(pid_t pid, const std::vector<SlotHolder>& holders, uint64_t lo,
                                                   uint64_t hi) {
  std::vector<SlotCandidate> out;
  if (holders.empty()) return out;
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  for (const SlotHolder& holder : holders) {
    const profiler::Mapping* m = mapping_of(*maps, holder);
    if (!m) continue;  // unloaded since it was copied
    auto file = elf::ElfFile::open(fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m->start, m->end));
    auto slots = file ? elf::got_slots(*file) : Result<std::vector<elf::GotSlot>>(std::unexpected(file.error()));
    if (!slots) {
      log::info("pid {}: no GOT slot of {} is re-pointed: {}", pid, holder.module, slots.error().message());
      continue;
    }
    for (const elf::GotSlot& s : *slots) {
      if (!s.jump_slot) continue;  // GLOB_DAT: an address-of may read it
      const uint64_t addr = s.slot + holder.bias;
      std::optional<uint64_t> value = value_of(read_target(pid, addr, 8));
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

Status repoint_slots(const std::vector<SlotRecord>& slots, Injection& out) {
  if (slots.empty()) return ok();
  for (int window = 0; window < kSlotWindows; ++window) {
    auto skipped = repoint_window(slots, out);
    if (!skipped) return std::unexpected(skipped.error());
    if (*skipped) {
      out.skipped.insert(out.skipped.end(), (*skipped)->begin(), (*skipped)->end());
      return ok();
    }
    std::this_thread::sleep_for(50ms);
  }
  out.skipped.push_back(fmt::format("GOT slots: {} left as they are: the target's threads did not stop in time",
                                    slots.size()));
  return ok();
}

Result<std::size_t> restore_slots(const Injection& in, const std::vector<profiler::Mapping>& maps) {
  std::size_t restored = 0;
  for (const SlotRecord& s : in.slots_patched) {
    // A record read from the target is untrusted (I9): only a file's data,
    // and only where the slot still holds the copy's address.
    const profiler::Mapping* m = slot_mapping(maps, s.addr, in.slot_files);
    if (!m || !slot_holds(in.pid, s, s.replacement)) continue;
    if (auto r = write_in_mapping(in.pid, *m, s.addr, bytes_of(s.original)); !r) return std::unexpected(r.error());
    ++restored;
  }
  return restored;
}

bool slot_holds(pid_t pid, const SlotRecord& s, uint64_t value) {
  return value_of(read_target(pid, s.addr, 8)) == value;
}

bool any_slot_repointed(const Injection& in) {
  return std::any_of(in.slots_patched.begin(), in.slots_patched.end(),
                     [&](const SlotRecord& s) { return slot_holds(in.pid, s, s.replacement); });
}

}  // namespace dyni::inject
