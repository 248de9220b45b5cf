// Patching entries, in stop windows, and putting them back (patch_entries.h).
#include "dynid/inject/patch_entries.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "dynid/cache_scan.h"
#include "dynid/inject/got_repoint.h"
#include "dynid/inject/target_checks.h"
#include "dynid/inject/target_module.h"
#include "dynid/target_memory.h"
#include "dynid/thread_unwind.h"
#include "dynid/world_stop.h"
#include "jit/call_sites.h"
#include "jit/decoder.h"
#include "jit/entry_pads.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {
namespace {

using namespace std::chrono_literals;
// A window whose threads do not all stop within this (a thread in
// uninterruptible sleep: fsync, a vfork parent) is given up and tried again
// later: the stopped threads must not wait long.
constexpr auto kStopTimeout = kWindowStopTimeout;
// Call sites come in windows of their own, after the entries, so that a
// target with thousands of them never stops long (I3).
constexpr std::size_t kCallSitesPerWindow = 256;

// What each entry must hold now to be patched: the file's bytes, or the
// jump of the cache being replaced, which the patch then re-points in one write.
std::vector<PatchSite> sites_of(const std::vector<PatchRecord>& patches, const Replaced& replacing,
                                const std::function<Result<std::array<uint8_t, kPatchBytes>>(uint64_t)>& live) {
  std::vector<PatchSite> sites;
  for (const PatchRecord& p : patches) {
    auto old = replacing.find(p.addr);
    auto now = old != replacing.end() ? live(p.addr) : fail("");
    sites.push_back({p.addr, now && *now == old->second ? old->second : p.original, changed_bytes(p)});
  }
  return sites;
}

bool call_site_callee_is_ours(const PatchRecord& site, const EntryJumps& entries, const Reader& read) {
  return callee_entry_is_ours(jit::rel32_target(site.addr, site.original), jit::rel32_target(site.addr, site.replacement),
                              entries, read);
}

}  // namespace

// Every held thread's stack, as far as it unwinds.
std::map<pid_t, ThreadStack> window_stacks(const Injection& in, const WorldStop& w) {
  StackReader reader(in.pid, frame_tables(in));
  std::map<pid_t, ThreadStack> stacks;
  for (const auto& [tid, t] : w.threads()) {
    auto s = reader.unwind(tid);
    stacks[tid] = s ? std::move(*s) : ThreadStack{{{t.regs.rip, false}}, false, s.error().message()};
    // In a system call the kernel may move it back onto the `syscall`
    // instruction to restart it: that PC must not be inside an entry either.
    if (static_cast<long>(t.regs.orig_rax) >= 0) stacks[tid].frames.push_back({t.regs.rip - 2, false});
  }
  return stacks;
}

namespace {

// Whether the pad that short entry `entry` jumps to holds this cache's jmp
// now, in this window: it was written in an earlier one (or found there by
// a redo), and a library unloaded and loaded again at the same place since
// would hold padding there again, which a short jump would run into the
// next function.
bool pad_is_ours(const PatchRecord& entry, const Injection& in, const Reader& read) {
  const uint64_t pad = short_entry_pad(entry);
  for (const PatchRecord& p : in.patched)
    if (p.kind == PatchKind::Pad && p.addr == pad) {
      auto live = read(pad, kPatchBytes);
      return live && live->size() == kPatchBytes && std::equal(live->begin(), live->end(), p.replacement.begin());
    }
  return false;
}

// One stop window: the sites that are safe now are written, one write each.
// A window whose threads did not all stop in time is missed: every site waits.
Result<std::vector<SiteCheck>> patch_window(const Injection& in, const std::vector<PatchRecord>& patches,
                                            const Replaced& replacing, WindowTiming& timing) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t); };
  const pid_t pid = in.pid;
  WindowTiming now;
  RaisedPriority priority;  // outlives the WorldStop below
  auto t0 = Clock::now();
  auto w = WorldStop::stop(pid, kStopTimeout);
  if (!w) return std::vector<SiteCheck>(patches.size(), {SiteVerdict::Wait, "no window: " + w.error().message()});
  now.stop = since(t0);
  now.threads = w->threads().size();
  if (auto same = same_target_with_record(in); !same) return std::unexpected(same.error());
  auto maps = profiler::read_maps(pid);  // held: no thread can map or unmap meanwhile
  if (!maps) return std::unexpected(maps.error());
  if (auto slots = slots_unchanged(pid, in.bypassed_slots); !slots) return std::unexpected(slots.error());
  auto t1 = Clock::now();
  const std::map<pid_t, ThreadStack> stacks = window_stacks(in, *w);
  now.unwind = since(t1);
  auto t2 = Clock::now();
  WindowMemory memory(pid);
  auto live = [&](uint64_t addr) -> Result<std::array<uint8_t, kPatchBytes>> {
    auto bytes = memory.read(addr, kPatchBytes);
    if (!bytes) return std::unexpected(bytes.error());
    std::array<uint8_t, kPatchBytes> a{};
    std::copy(bytes->begin(), bytes->end(), a.begin());
    return a;
  };
  std::vector<PatchSite> sites = sites_of(patches, replacing, live);
  std::vector<SiteCheck> checks = check_patch_sites(sites, stacks, live);
  const EntryJumps entries = entry_jumps(in);
  const Reader read = [&](uint64_t addr, std::size_t n) { return memory.read(addr, n); };
  for (std::size_t i = 0; i < patches.size(); ++i)
    if (patches[i].kind == PatchKind::CallSite && checks[i].verdict == SiteVerdict::Patch &&
        !call_site_callee_is_ours(patches[i], entries, read))
      checks[i] = {SiteVerdict::LeaveAlone, "its callee's entry does not hold dyni's jump"};
    else if (is_short_entry(patches[i]) && checks[i].verdict == SiteVerdict::Patch && !pad_is_ours(patches[i], in, read))
      checks[i] = {SiteVerdict::LeaveAlone, "its pad does not hold dyni's jump now"};
  now.check = since(t2);
  auto t3 = Clock::now();
  for (std::size_t i = 0; i < patches.size(); ++i) {
    if (checks[i].verdict != SiteVerdict::Patch) continue;
    const profiler::Mapping* text = mapping_at(*maps, patches[i].addr);
    // I2: one write. A write across a page boundary is two copies in the
    // kernel, which a dying dynid could tear: such entries are left alone.
    if (!text || !text->executable || patches[i].addr % 4096 > 4096 - kPatchBytes) {
      checks[i] = {SiteVerdict::LeaveAlone, "entry bytes cross a page boundary or lie outside the module's code"};
      continue;
    }
    if (!still_the_module(in, *text)) {
      checks[i] = {SiteVerdict::LeaveAlone, "the code there is no longer the module's that was copied (unloaded?)"};
      continue;
    }
    if (auto r = memory.write_in_mapping(*text, patches[i].addr, std::span(patches[i].replacement).first(changed_bytes(patches[i])));
        !r)
      checks[i] = {SiteVerdict::LeaveAlone, r.error().message()};
    else
      ++now.writes;
  }
  now.write = since(t3);
  auto t4 = Clock::now();
  w->resume();
  now.release = since(t4);
  now.total = since(t0);
  if (now.total > timing.total) timing = now;
  return checks;
}

}  // namespace

EntryJumps entry_jumps(const Injection& in) {
  EntryJumps out;
  for (const PatchRecord& p : in.patched)
    if (p.kind == PatchKind::Entry) out[p.addr] = &p;
  return out;
}

// The callee's entry patch lies after the instructions it keeps, in the
// one it patches: at its start, or after its REX prefix (jit/patch_plan.h).
// Its jmp lands in the callee's copy as far in as the kept instructions'
// copies reach, and the bytes before the patch are still those the copy
// begins with (the file's instructions: no int3, no hook written over them
// since), then at most a REX prefix (not a probe's int3). An endbr64's jmp
// lands on the copy's start, which runs the endbr64 again. So the patch
// found is the callee's own, and the call goes round nothing that its
// callee's entry runs now. A kept instruction whose copy differs
// (rip-relative) fails the comparison: its callers keep going through the entry.
bool callee_entry_is_ours(uint64_t start, uint64_t copy, const EntryJumps& entries, const Reader& read) {
  auto it = entries.lower_bound(start);
  if (it == entries.end() || it->first - start > jit::kMaxEntryPatchOffset) return false;
  const PatchRecord& entry = *it->second;
  auto jump = read(entry.addr, changed_bytes(entry));
  if (!jump || jump->size() != changed_bytes(entry) || !std::equal(jump->begin(), jump->end(), entry.replacement.begin()))
    return false;
  uint64_t landing = jit::rel32_target(entry.addr, entry.replacement);
  if (is_short_entry(entry)) {  // through its pad, which nothing but dyni writes (padding)
    const uint64_t at = short_entry_pad(entry);
    auto pad = read(at, kPatchBytes);
    if (!pad || pad->size() != kPatchBytes || (*pad)[0] != jit::kJmpRel32Opcode) return false;
    landing = jit::rel32_target(at, std::span<const uint8_t, kPatchBytes>(pad->data(), kPatchBytes));
  }
  const uint64_t before_patch = entry.addr - start;
  if (landing < copy || landing - copy > before_patch) return false;
  const uint64_t kept = landing - copy;
  if (before_patch == 0) return true;
  auto before = read(start, before_patch);
  if (!before) return false;
  static constexpr std::array<uint8_t, 4> kEndbr64{0xf3, 0x0f, 0x1e, 0xfa};
  if (kept == 0 && before_patch == kEndbr64.size()) return std::equal(before->begin(), before->end(), kEndbr64.begin());
  const bool rex = before_patch == kept + 1 && ((*before)[kept] & 0xf0) == 0x40;
  if (before_patch != kept && !rex) return false;
  if (kept == 0) return true;
  auto copied = read(copy, kept);
  return copied && std::equal(copied->begin(), copied->end(), before->begin());
}

bool still_the_module(const Injection& in, const profiler::Mapping& text) {
  if (in.module_inode && (!text.file_backed() || text.inode != in.module_inode)) return false;
  if (in.module_dev && text.dev != in.module_dev) return false;  // the same inode on another filesystem
  return !in.module_load || text.start - text.offset == in.module_load;
}

// Up to `windows` windows: sites that must wait are tried again.
Status patch_all(std::vector<PatchRecord> pending, Injection& out, const Replaced& replacing, int windows) {
  for (int window = 0; window < windows && !pending.empty(); ++window) {
    auto checks = patch_window(out, pending, replacing, out.longest_window);
    ++out.patch_windows;
    out.longest_stop = std::max(out.longest_stop, out.longest_window.total);
    if (!checks) return std::unexpected(checks.error());
    std::vector<PatchRecord> again;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const SiteCheck& c = (*checks)[i];
      if (c.verdict == SiteVerdict::Patch) out.patched.push_back(pending[i]);
      if (c.verdict == SiteVerdict::LeaveAlone) out.skipped.push_back(fmt::format("{:#x}: {}", pending[i].addr, c.reason));
      if (c.verdict == SiteVerdict::Wait) {
        if (window + 1 == windows) out.skipped.push_back(fmt::format("{:#x}: {}", pending[i].addr, c.reason));
        again.push_back(pending[i]);
      }
    }
    pending = std::move(again);
    if (!pending.empty()) std::this_thread::sleep_for(50ms);
  }
  return ok();
}

Status patch_in_order(const std::vector<PatchRecord>& patches, Injection& out, const Replaced& replacing,
                      int windows) {
  std::vector<PatchRecord> pads, entries, sites;
  for (const PatchRecord& p : patches)
    (p.kind == PatchKind::Pad ? pads : p.kind == PatchKind::Entry ? entries : sites).push_back(p);
  // Pads in windows of their own first: a short jump is written only to a
  // pad that holds its jmp (a dynid killed between them leaves a pad that
  // nothing reaches).
  if (!pads.empty())
    if (auto r = patch_all(std::move(pads), out, replacing, windows); !r) return r;
  std::set<uint64_t> pads_in;
  for (const PatchRecord& p : out.patched)
    if (p.kind == PatchKind::Pad) pads_in.insert(p.addr);
  std::erase_if(entries, [&](const PatchRecord& p) {
    if (!is_short_entry(p) || pads_in.count(short_entry_pad(p))) return false;
    out.skipped.push_back(fmt::format("{:#x}: its pad at {:#x} was not written", p.addr, short_entry_pad(p)));
    return true;
  });
  if (auto r = patch_all(std::move(entries), out, replacing, windows); !r) return r;
  for (std::size_t at = 0; at < sites.size(); at += kCallSitesPerWindow) {
    auto from = sites.begin() + static_cast<std::ptrdiff_t>(at);
    std::vector<PatchRecord> chunk(from, from + static_cast<std::ptrdiff_t>(std::min(kCallSitesPerWindow, sites.size() - at)));
    if (auto r = patch_all(std::move(chunk), out, {}, windows); !r) return r;
  }
  return ok();
}

}  // namespace dyni::inject

namespace dyni {

using inject::patch_in_order;
using inject::window_stacks;
using inject::same_target_with_record;

namespace {

// The runs of bytes to write back to undo patch `p` whose live bytes are
// `live`: where they still are dyni's, with the file's. Empty when nothing
// of dyni's is left there. nullopt when bytes neither dyni's nor the file's
// nor an int3 are there (another patcher's, now): not ours any more.
//
// A uprobe attached after injection (uprobe:FUNC+N, at dyni's jmp or
// inside it) holds an int3 over some of its bytes, and one removed since
// has written the FILE's byte back over one: the kernel took that
// instruction from the file, runs it out of line and resumes after it. The
// file's bytes go back around the int3s, so that the probe runs the
// file's code from its next hit, and its removal leaves the file's bytes
// whole. No debugger can own such an int3: the world is stopped through
// ptrace, which a tracer would have refused.
struct Restore {
  std::size_t from = 0, length = 0;
};

// A uprobe's int3 stands at the start of one of the file's instructions;
// one anywhere else, once the file's bytes were back around it, would sit
// inside an instruction and change what it computes: such a patch is not
// restored. The starts within the patch, from its original bytes (a call
// site's is one instruction).
std::array<bool, kPatchBytes> instruction_starts(const PatchRecord& p) {
  std::array<bool, kPatchBytes> starts{};
  if (is_short_entry(p)) return starts;  // its 2 bytes lie inside the instruction after a REX prefix
  starts[0] = true;
  for (std::size_t at = 0; p.kind == PatchKind::Entry && at < kPatchBytes;) {
    auto in = jit::decode_one(std::span(p.original).subspan(at), p.addr + at);
    if (!in) break;  // runs past the 5 bytes: no other start among them
    at += in->length;
    if (at < kPatchBytes) starts[at] = true;
  }
  return starts;
}

// The runs cover every byte but a foreign int3's (writing the file's byte
// where it already is changes nothing), so that without one a patch is put
// back in one write, as it was made (I2: a dynid killed between two writes
// would leave half a jmp). A short jump's: its 2 bytes only, never the next
// instruction's 3 (not dyni's, whatever they hold).
std::optional<std::vector<Restore>> to_restore(std::span<const uint8_t> live, const PatchRecord& p) {
  if (live.size() != kPatchBytes) return std::nullopt;
  const std::array<bool, kPatchBytes> starts = instruction_starts(p);
  bool any_ours = false;
  std::vector<Restore> runs;
  for (std::size_t i = 0; i < changed_bytes(p); ++i) {
    const bool ours = live[i] == p.replacement[i];
    const bool int3 = !ours && live[i] == 0xcc && live[i] != p.original[i];
    if (int3 && !starts[i]) return std::nullopt;
    if (!ours && !int3 && live[i] != p.original[i]) return std::nullopt;
    any_ours |= ours && p.replacement[i] != p.original[i];
    if (int3) continue;
    if (!runs.empty() && runs.back().from + runs.back().length == i) ++runs.back().length;
    else runs.push_back({i, 1});
  }
  if (!any_ours) runs.clear();
  return runs;
}

// Whether a short jump still leads to pad `pad`: its entry (the only one
// whose jump can reach it, entry_pads.h) holds `eb rel8` to it now, this
// cache's not put back or another cache's, the same 2 bytes (a counting
// cache's still live when an optimized one failed). True when the entry is
// not known, or cannot be read.
bool short_jump_leads_to(pid_t pid, const Injection& in, uint64_t pad) {
  auto entry = in.pad_entries.find(pad);
  if (entry == in.pad_entries.end()) return true;
  auto live = read_target(pid, entry->second, 2);
  if (!live || live->size() != 2) return true;
  return (*live)[0] == jit::kJmpRel8Opcode && entry->second + 2 + static_cast<int8_t>((*live)[1]) == pad;
}

// Whether the held window has anything to do at `p`: restore bytes of ours,
// or name bytes that are neither ours nor the file's; true also when they
// cannot be read now.
bool needs_a_window(pid_t pid, const PatchRecord& p) {
  auto live = read_target(pid, p.addr, kPatchBytes);
  if (!live) return true;
  auto runs = to_restore(*live, p);
  return !runs || !runs->empty();
}

}  // namespace

Status undo_patches(const Injection& in, bool one_window, std::vector<uint64_t>* under_int3) {
  const pid_t pid = in.pid;
  // Only dynid writes dyni's jumps: none there now, none there in the window
  // (a worker forked after its parent's counting cache ended: no stop).
  const bool slots = inject::any_slot_repointed(in);
  if (std::none_of(in.patched.begin(), in.patched.end(), [&](const PatchRecord& p) { return needs_a_window(pid, p); }) &&
      !slots)
    return ok();
  // Proven before the stop: a file is read.
  const std::vector<inject::ProvenSlot> proven = slots ? inject::prove_slots(pid, in.slots) : std::vector<inject::ProvenSlot>{};
  RaisedPriority priority;
  auto w = one_window ? WorldStop::stop(pid, kWindowStopTimeout) : stop_world(pid);
  if (!w) return std::unexpected(w.error());
  if (auto same = same_target_with_record(in); !same) return same;
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  // Other modules' GOT slots first, then call sites: none then leads past
  // an entry that holds the file's bytes again.
  inject::restore_slots(pid, proven, *maps);
  // Pads last: no short jump leads to them any more.
  std::vector<const PatchRecord*> order;
  for (PatchKind kind : {PatchKind::CallSite, PatchKind::Entry, PatchKind::Pad})
    for (const PatchRecord& p : in.patched)
      if (p.kind == kind) order.push_back(&p);
  std::vector<uint64_t> probed, foreign, pads_kept;
  std::optional<std::map<pid_t, ThreadStack>> stacks;  // unwound for the first pad to put back
  for (const PatchRecord* patch : order) {
    const PatchRecord& p = *patch;
    // Only where a patch can be (a record read from the target is
    // untrusted): a file's executable code, the 5 bytes within one page.
    const profiler::Mapping* text = mapping_at(*maps, p.addr);
    if (!text || !text->executable || !text->file_backed() || p.addr % 4096 > 4096 - kPatchBytes) continue;
    // A library unloaded and another file, or another load of it, mapped
    // there: not the code the patch went into, whatever its bytes.
    if (!inject::still_the_module(in, *text)) continue;
    auto live = read_target(pid, p.addr, kPatchBytes);
    auto runs = live ? to_restore(*live, p) : std::nullopt;
    if (live && !runs) foreign.push_back(p.addr);
    if (!runs || runs->empty()) continue;  // not ours any more, or the file's already
    if (p.kind == PatchKind::Pad) {
      if (!stacks) stacks = window_stacks(in, *w);
      if (short_jump_leads_to(pid, in, p.addr) || !pad_may_go(p.addr, *stacks)) {
        pads_kept.push_back(p.addr);
        continue;
      }
    }
    for (const Restore& r : *runs)
      if (auto written = write_in_mapping(pid, *text, p.addr + r.from, std::span(p.original).subspan(r.from, r.length));
          !written)
        return written;
    if (!std::equal(live->begin(), live->begin() + static_cast<std::ptrdiff_t>(changed_bytes(p)), p.replacement.begin()))
      probed.push_back(p.addr);
  }
  if (!probed.empty())
    log::warn("pid {}: {} of dyni's patches held a uprobe's int3 or byte (first at {:#x}): the file's bytes are back "
              "around them", pid, probed.size(), probed.front());
  if (!foreign.empty())
    log::warn("pid {}: {} of dyni's patches hold bytes neither dyni's nor the file's nor a uprobe's int3 at an "
              "instruction (first at {:#x}): left as they are", pid, foreign.size(), foreign.front());
  if (!pads_kept.empty())
    log::info("pid {}: {} pads (first at {:#x}) still jump into the cache, which stays mapped: a short jump still "
              "leads there (another cache's, or one not put back), a thread was there, or a stack was not known to "
              "its end; left as they are", pid, pads_kept.size(), pads_kept.front());
  if (under_int3) *under_int3 = std::move(probed);
  return ok();
}

namespace {

// Patches `in`'s entries and call sites again where the live bytes are the
// file's, with the first injection's live checks; those still patched count.
Injection patch_again(const Injection& in, int windows) {
  Injection again;
  again.pid = in.pid, again.start_time = in.start_time, again.cache = in.cache, again.frames = in.frames;
  again.other_frames = in.other_frames;
  again.module_inode = in.module_inode, again.module_load = in.module_load, again.bypassed_slots = in.bypassed_slots;
  again.module_dev = in.module_dev;
  again.slots = in.slots;
  again.pad_entries = in.pad_entries;
  std::vector<PatchRecord> pending;
  for (const PatchRecord& p : in.patched)  // entries and call sites still patched need nothing
    (holds_jump(in.pid, p) ? again.patched : pending).push_back(p);
  if (auto r = patch_in_order(pending, again, {}, windows); !r) again.error = r.error().message();
  // Other modules' GOT slots, after the entries: those that hold the bound
  // function again (those skipped at injection too).
  std::vector<SlotRecord> slots;
  for (const SlotRecord& s : in.slots)
    if (inject::slot_holds(in.pid, s, s.replacement)) again.slots_patched.push_back(s);
    else if (inject::slot_holds(in.pid, s, s.original)) slots.push_back(s);
  if (again.error.empty())
    if (auto r = inject::repoint_slots(slots, again); !r) again.error = r.error().message();
  return again;
}

}  // namespace

Result<Injection> redo_patches(const Injection& in) {
  if (in.tier == CacheTier::Counting) return fail("a counting cache is never patched in again");
  return patch_again(in, inject::kPatchWindows);
}

Result<Injection> resume_counting(const Injection& counting) {
  if (counting.tier != CacheTier::Counting) return fail("not a counting cache");
  return patch_again(counting, 1);
}

}  // namespace dyni
