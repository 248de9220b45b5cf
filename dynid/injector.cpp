// Live injection of an executable's hot code: jit, map, write, register, patch.
#include "dynid/injector.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "dynid/cache_huge_pages.h"
#include "dynid/cache_placement.h"
#include "dynid/cache_scan.h"
#include "dynid/clean_thread.h"
#include "dynid/patch_safety.h"
#include "dynid/proc_reader.h"
#include "dynid/remote_call.h"
#include "dynid/target_memory.h"
#include "dynid/thread_unwind.h"
#include "dynid/world_stop.h"
#include "elf/eh_frame.h"
#include "jit/cache_eh_frame.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"
#include "profiler/symbolizer.h"

namespace dyni {
namespace {

using namespace std::chrono_literals;
// A window whose threads do not all stop within this (a thread in
// uninterruptible sleep: fsync, a vfork parent) is given up and tried again
// later: the stopped threads must not wait long.
constexpr auto kStopTimeout = kWindowStopTimeout;
constexpr int kPatchWindows = 5;  // windows a site may wait for, then it is skipped
constexpr int kRegisterAttempts = 10;  // windows in which to look for a thread to run __register_frame

// The executable as the jit and the checks see it.
struct Executable {
  const profiler::Module* module = nullptr;
  std::unique_ptr<elf::ElfFile> file;
  std::unique_ptr<jit::ModuleImage> image;
  std::map<uint64_t, elf::Fde> fdes;  // by first address
  jit::UnwindSources unwind;
  uint64_t lo = 0, hi = 0;            // its mappings, run-time
};

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

// [lowest start, highest end) of the mappings of the file at `path`.
std::pair<uint64_t, uint64_t> module_range(const std::vector<profiler::Mapping>& maps, const std::string& path) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& m : maps)
    if (m.path == path) lo = std::min(lo, m.start), hi = std::max(hi, m.end);
  return {lo, hi};
}

// The jit's plan for the hot functions with the cache at `cache_base` (link-time numbering).
Result<jit::ModulePlan> plan_at(const Executable& exe, const InjectRequest& req, uint64_t cache_base) {
  jit::ModuleInput input{exe.module->functions.get(), exe.image.get(), req.profile, req.hot, cache_base, {}, {}, 0};
  jit::use_unwind_info(input, *exe.file);
  input.counts = req.counts;
  return jit::optimize_module(input, req.options);
}

// The copies that get unwind information (and so may be patched), and the
// .eh_frame blob for them at `blob_addr`. Copies it cannot describe are left
// out, with the reason.
struct Frames {
  std::vector<const jit::CachedFunction*> copies;
  std::vector<uint8_t> blob;
};

Result<Frames> frames_for(const jit::ModulePlan& plan, const Executable& exe, uint64_t blob_addr,
                          std::vector<std::string>& skipped) {
  Frames out;
  for (const jit::CachedFunction& f : plan.cache.functions) {
    auto fde = exe.fdes.find(f.original_entry);
    if (f.unwind.empty() || fde == exe.fdes.end()) {
      skipped.push_back(fmt::format("func_{:x}: no unwind information", f.original_entry));
      continue;
    }
    out.copies.push_back(&f);
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::vector<jit::CopyFrames> copies;
    for (const jit::CachedFunction* f : out.copies) copies.push_back({&f->code, &f->unwind, &exe.fdes.at(f->original_entry)});
    auto blob = jit::write_cache_eh_frame(copies, exe.unwind, blob_addr);
    if (blob) {
      out.blob = std::move(*blob);
      return out;
    }
    // "copy of 0x…: reason": leave that copy out and try again.
    uint64_t bad = 0;
    std::sscanf(blob.error().message().c_str(), "copy of %lx", &bad);
    auto it = std::find_if(out.copies.begin(), out.copies.end(), [&](auto* f) { return f->original_entry == bad; });
    if (it == out.copies.end()) return std::unexpected(blob.error());
    skipped.push_back(fmt::format("func_{:x}: {}", bad, blob.error().message()));
    out.copies.erase(it);
  }
  return fail("too many copies without describable frames");
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

// Every dyni cache's frames a stack of the target may pass through.
std::vector<UnwindTable> frame_tables(const Injection& in) {
  std::vector<UnwindTable> out = in.other_frames;
  if (in.frames.entries) out.push_back(in.frames);
  return out;
}

// Called with every thread held, before anything is written: the process is
// the one dyni prepared for (its start time: not a reused pid) and, once
// there is a cache, still holds it (an exec drops every mapping): `mark`,
// bytes dyni wrote, are still at `at`.
Status same_target(pid_t pid, uint64_t start_time, uint64_t at = 0, std::span<const uint8_t> mark = {}) {
  auto stat = read_proc_stat("/proc", pid);
  if (!stat || stat->start_time != start_time) return fail(fmt::format("process {} is gone or was replaced", pid));
  if (mark.empty()) return ok();
  auto head = read_target(pid, at, mark.size());
  if (!head || !std::equal(mark.begin(), mark.end(), head->begin()))
    return fail(fmt::format("the cache at {:#x} is gone from process {} (exec?)", at, pid));
  return ok();
}

// The process still runs the image the caller profiled: an exec keeps pid
// and start time, and changes where its code and stack are (`image`).
Status same_image(const ProcStat& stat, uint64_t image) {
  if (image && stat.image && stat.image != image)
    return fail(fmt::format("process {} exec'd since it was profiled", stat.pid));
  return ok();
}

// Before there is a cache: an exec keeps the pid and start time, but maps
// the executable afresh (elsewhere, with ASLR).
Status executable_where_it_was(pid_t pid, const Executable& prepared) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  if (module_range(*maps, prepared.module->path) != std::pair{prepared.lo, prepared.hi})
    return fail(fmt::format("process {}'s executable moved since it was read (exec?)", pid));
  return ok();
}

// The same, once the cache's record is written.
Status same_target_with_record(const Injection& in) {
  return same_target(in.pid, in.start_time, in.cache.addr, kRecordMagic);
}

// The hot functions whose code in the target is still the file's: a copy is
// made from the file, so a function changed in memory (a uprobe, a
// breakpoint, another patcher) is left alone, whole. The entry jumps of the
// counting cache being replaced (`replacing`) are dyni's own: under them the
// file's bytes count.
std::vector<uint64_t> unchanged_in_memory(pid_t pid, const Executable& exe, const std::vector<uint64_t>& hot,
                                          const Injection* replacing, std::vector<std::string>& skipped) {
  std::map<uint64_t, const PatchRecord*> ours;
  if (replacing)
    for (const PatchRecord& p : replacing->patched) ours[p.addr] = &p;
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
    if (live && std::equal(live->begin(), live->end(), file_bytes->begin(), file_bytes->end()))
      out.push_back(addr);
    else
      skipped.push_back(fmt::format("func_{:x}: its code in memory differs from the file", addr));
  }
  return out;
}

// Hot functions that hold an rseq critical section are left alone: the
// kernel aborts a preempted section only at its original addresses, so a
// copy would run it unprotected. Sections are found by their descriptors in
// `__rseq_cs` (struct rseq_cs: version, flags, start_ip, post_commit_offset,
// abort_ip), read from the process, where they are relocated. A descriptor
// kept elsewhere is not seen (docs/injection.md).
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

// The plan and frames at `cache_base`, with every copy that gets frames:
// a copy without frames is not only left unpatched but planned out, since
// other copies would call it directly (and a throw through it would end the
// process).
struct PlanWithFrames {
  jit::ModulePlan plan;
  Frames frames;
};

Result<PlanWithFrames> plan_with_frames(const Executable& exe, InjectRequest req, uint64_t cache_base,
                                        uint64_t blob_addr_of_code_end, std::vector<std::string>& skipped) {
  for (int round = 0; round < 4; ++round) {
    auto plan = plan_at(exe, req, cache_base);
    if (!plan) return std::unexpected(plan.error());
    std::vector<std::string> dropped;
    auto frames = frames_for(*plan, exe, blob_addr_of_code_end + align_up(plan->cache.bytes.size(), 64), dropped);
    if (!frames) return std::unexpected(frames.error());
    if (dropped.empty()) return PlanWithFrames{std::move(*plan), std::move(*frames)};
    std::set<uint64_t> without;
    for (const jit::CachedFunction& f : plan->cache.functions) without.insert(f.original_entry);
    for (const jit::CachedFunction* f : frames->copies) without.erase(f->original_entry);
    std::erase_if(req.hot, [&](uint64_t a) { return without.count(a) > 0; });
    skipped.insert(skipped.end(), dropped.begin(), dropped.end());
  }
  return fail("copies kept losing their frames");
}

// The cache's layout: record at 0, return stub just below the code, code on
// a page of its own, then the .eh_frame blob. A counting cache's counters
// follow in a mapping of their own (counters_length, 0 for none).
struct Layout {
  uint64_t code_offset = 0, stub_offset = 0, blob_offset = 0, table_offset = 0, total = 0;
  uint64_t counters_length = 0;
};

Layout layout_for(std::size_t functions, uint64_t code_size, uint64_t blob_size, const jit::CounterLayout& counters) {
  Layout l;
  l.code_offset = align_up(record_size(functions + 64, counters.slots) + 64, 4096);
  l.stub_offset = l.code_offset - 16;
  l.blob_offset = align_up(l.code_offset + code_size, 64);
  l.table_offset = align_up(l.blob_offset + blob_size, 8);
  l.total = l.table_offset + jit::kSearchEntryBytes * functions;
  l.counters_length = counters.slots ? align_up(counters.bytes(), 4096) : 0;
  return l;
}

// The file a module is mapped from, as the target sees it: through
// /proc/PID/map_files (a container's own file, or one deleted or replaced on
// disk since it was mapped), never by its path on the host.
std::string mapped_file(pid_t pid, const std::vector<profiler::Mapping>& maps, const std::string& path) {
  for (const auto& m : maps)
    if (m.path == path) return fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end);
  return path;
}

// The run-time address of __register_frame in the libgcc that serves the
// target's throws; 0 when the process has no unwinder loaded (checked
// below); fails when its unwinder is one dyni cannot give the frames to.
Result<uint64_t> register_frame_function(pid_t pid, const std::vector<profiler::Mapping>& maps,
                                         const profiler::Symbolizer& symbols) {
  uint64_t found = 0;
  for (const profiler::Module& m : symbols.modules()) {
    auto file = elf::ElfFile::open(mapped_file(pid, maps, m.path));
    if (!file) return fail(fmt::format("cannot read {} to check its unwinder", m.path));
    auto names = file->function_symbols();
    if (!names) return std::unexpected(names.error());
    bool unwinder = false;
    uint64_t reg = 0;
    for (const elf::Symbol& s : *names) {
      unwinder |= s.name == "_Unwind_Find_FDE" || s.name == "_Unwind_RaiseException";
      if (s.name == "__register_frame") reg = s.addr + m.bias;
    }
    if (!unwinder) continue;
    std::string base = m.path.substr(m.path.rfind('/') + 1);
    if (!base.starts_with("libgcc_s.so") || !reg)
      return fail(fmt::format("the target's unwinder is in {}, not libgcc_s: its frames cannot be registered", base));
    found = reg;
  }
  return found;  // 0: no unwinder is loaded at all
}

// Registers the blob through a remote call in a clean thread.
Status register_frames(const Injection& in, const profiler::Symbolizer& symbols, std::string_view in_executable,
                       uint64_t register_frame, uint64_t blob, uint64_t stub, std::chrono::milliseconds timeout) {
  const pid_t pid = in.pid;
  auto w = stop_world(pid);
  if (!w) return std::unexpected(w.error());
  // The record is not written yet: the return stub marks the cache.
  if (auto same = same_target(pid, in.start_time, stub, kReturnStub); !same) return same;
  StackReader reader(pid, frame_tables(in));
  std::map<uint64_t, const CopyRange*> copies;  // by cache address: a thread in a copy is in its function
  for (const std::vector<CopyRange>* v : {&in.copies, &in.other_copies})
    for (const CopyRange& c : *v) copies[c.cache_addr] = &c;
  CopiedFrom copied_from = [&](uint64_t pc) -> std::optional<uint64_t> {
    auto it = copies.upper_bound(pc);
    if (it == copies.begin()) return std::nullopt;
    --it;
    if (pc >= it->first + it->second->size) return std::nullopt;
    return it->second->original_entry;
  };
  std::string why;
  for (const auto& [tid, t] : w->threads()) {
    auto stack = reader.unwind(tid);
    if (!stack) continue;
    if (auto clean = clean_for_calls(tid, t, *stack, symbols, in_executable, copied_from); !clean) {
      why = clean.error().message();
      continue;
    }
    auto r = remote_call(*w, tid, {register_frame, {blob}, stub}, timeout);
    return r ? ok() : Status(std::unexpected(r.error()));
  }
  return fail("no thread is parked where it can run __register_frame (" + why + ")");
}

// What each entry must hold now to be patched: the file's bytes, or the
// jump of the cache being replaced (`replacing`, a counting cache's), which
// the patch then re-points in one write.
using Replaced = std::map<uint64_t, std::array<uint8_t, kPatchBytes>>;  // entry → the jump it may hold

std::vector<PatchSite> sites_of(const std::vector<PatchRecord>& patches, const Replaced& replacing,
                                const std::function<Result<std::array<uint8_t, kPatchBytes>>(uint64_t)>& live) {
  std::vector<PatchSite> sites;
  for (const PatchRecord& p : patches) {
    auto old = replacing.find(p.addr);
    auto now = old != replacing.end() ? live(p.addr) : fail("");
    sites.push_back({p.addr, now && *now == old->second ? old->second : p.original});
  }
  return sites;
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
  auto t1 = Clock::now();
  StackReader reader(pid, frame_tables(in));
  std::map<pid_t, ThreadStack> stacks;
  for (const auto& [tid, t] : w->threads()) {
    auto s = reader.unwind(tid);
    stacks[tid] = s ? std::move(*s) : ThreadStack{{{t.regs.rip, false}}, false, s.error().message()};
    // In a system call the kernel may move it back onto the `syscall`
    // instruction to restart it: that PC must not be inside an entry either.
    if (static_cast<long>(t.regs.orig_rax) >= 0) stacks[tid].frames.push_back({t.regs.rip - 2, false});
  }
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
    if (auto r = memory.write_in_mapping(*text, patches[i].addr, patches[i].replacement); !r)
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

// Up to kPatchWindows windows: sites that must wait are tried again.
Status patch_all(std::vector<PatchRecord> pending, Injection& out, const Replaced& replacing = {}) {
  for (int window = 0; window < kPatchWindows && !pending.empty(); ++window) {
    auto checks = patch_window(out, pending, replacing, out.longest_window);
    out.longest_stop = std::max(out.longest_stop, out.longest_window.total);
    if (!checks) return std::unexpected(checks.error());
    std::vector<PatchRecord> again;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const SiteCheck& c = (*checks)[i];
      if (c.verdict == SiteVerdict::Patch) out.patched.push_back(pending[i]);
      if (c.verdict == SiteVerdict::LeaveAlone) out.skipped.push_back(fmt::format("{:#x}: {}", pending[i].addr, c.reason));
      if (c.verdict == SiteVerdict::Wait) {
        if (window + 1 == kPatchWindows) out.skipped.push_back(fmt::format("{:#x}: {}", pending[i].addr, c.reason));
        again.push_back(pending[i]);
      }
    }
    pending = std::move(again);
    if (!pending.empty()) std::this_thread::sleep_for(50ms);
  }
  return ok();
}

// Everything decided before the target is touched.
struct Prepared {
  std::unique_ptr<profiler::Symbolizer> symbols;
  Executable exe;
  uint64_t register_frame = 0;
  SyscallSites sites;
  CachePlacement place;
  Layout layout;
  PlanWithFrames planned;
  std::vector<uint8_t> search_table;  // for the frames in planned.frames.blob
  CacheRecord record;
  uint64_t counters_addr = 0;  // a counting cache's, run-time (length: layout.counters_length)
  std::vector<UnwindTable> other_frames;  // of the dyni caches the target holds already
};

Result<Prepared> prepare(InjectRequest req, std::vector<std::string>& skipped) {
  Prepared p;
  auto symbols = profiler::Symbolizer::for_process(req.pid);
  if (!symbols) return std::unexpected(symbols.error());
  p.symbols = std::make_unique<profiler::Symbolizer>(std::move(*symbols));
  auto exe = read_executable(req.pid, *p.symbols);
  if (!exe) return std::unexpected(exe.error());
  p.exe = std::move(*exe);
  auto maps = profiler::read_maps(req.pid);
  if (!maps) return std::unexpected(maps.error());
  auto register_frame = register_frame_function(req.pid, *maps, *p.symbols);
  if (!register_frame) return std::unexpected(register_frame.error());
  p.register_frame = *register_frame;
  // No unwinder in the process: a C program (python3, php). Nothing can throw
  // through the copies then; glibc loads libgcc_s later only for backtrace()
  // and thread cancellation, which stop at a copy's frame (a shorter
  // backtrace; cancellation still runs the thread's cleanup buffers). A
  // program with exception tables must have its unwinder told.
  if (!p.register_frame && p.exe.file->find_section(".gcc_except_table"))
    return fail("the executable has exception tables but no libgcc_s is loaded to register the cache's frames with");
  auto sites = find_syscall_sites(req.pid);  // also refuses seccomp and shadow stacks
  if (!sites) return std::unexpected(sites.error());
  p.sites = *sites;
  std::tie(p.exe.lo, p.exe.hi) = module_range(*maps, p.exe.module->path);
  // Threads may run in caches already there (a counting cache being
  // replaced, one ended by a new dynid): every stack proof needs their frames.
  for (const CacheRecord& r : find_cache_records(req.pid, *maps)) p.other_frames.push_back(from_record(req.pid, 0, r).frames);
  req.hot = unchanged_in_memory(req.pid, p.exe, req.hot, req.replacing, skipped);
  auto outside_rseq = without_rseq_sections(req.pid, p.exe, req.hot, skipped);
  if (!outside_rseq) return std::unexpected(outside_rseq.error());
  req.hot = std::move(*outside_rseq);
  const uint64_t bias = p.exe.module->bias;
  // The size first (at a provisional address), then the plan at the real
  // place. The draft only sizes the place, so it skips the verifier (a
  // quarter of the jit's time): the plan that is injected is verified, and
  // a copy it rejects only leaves it smaller than the draft.
  std::vector<std::string> ignored;
  InjectRequest sizing = req;
  sizing.options.cache.verify = false;
  auto draft = plan_with_frames(p.exe, sizing, jit::provisional_cache_base(*p.exe.module->functions), 0x10000000, ignored);
  if (!draft) return std::unexpected(draft.error());
  p.layout = layout_for(draft->plan.cache.functions.size(), draft->plan.cache.bytes.size() + 4096,
                        draft->frames.blob.size() + 4096, draft->plan.cache.counter_layout());
  auto place = place_cache(*maps, {p.exe.lo, p.exe.hi, p.layout.total + p.layout.counters_length, 0});
  if (!place) return std::unexpected(place.error());
  p.place = *place;
  // A counting cache's counters at the top of the place, the code below them.
  p.place.length -= p.layout.counters_length;
  p.counters_addr = p.place.addr + p.place.length;
  req.options.cache.counters_base = p.counters_addr - bias;
  auto planned = plan_with_frames(p.exe, req, place->addr + p.layout.code_offset - bias,
                                  place->addr + p.layout.code_offset, skipped);
  if (!planned) return std::unexpected(planned.error());
  p.planned = std::move(*planned);
  const jit::CodeCache& cache = p.planned.plan.cache;
  p.layout.blob_offset = align_up(p.layout.code_offset + cache.bytes.size(), 64);
  p.layout.table_offset = align_up(p.layout.blob_offset + p.planned.frames.blob.size(), 8);
  auto table = jit::eh_frame_search_table(p.planned.frames.blob, place->addr + p.layout.blob_offset,
                                          place->addr + p.layout.table_offset);
  if (!table) return std::unexpected(table.error());
  p.search_table = std::move(*table);
  if (p.layout.table_offset + p.search_table.size() > p.place.length ||
      cache.counter_layout().bytes() > p.layout.counters_length ||
      cache.counter_layout().stripes != draft->plan.cache.counter_layout().stripes)
    return fail("the cache outgrew its place");
  p.record = {p.exe.file->build_id(), bias, p.place.addr, p.place.length, p.layout.code_offset, cache.bytes.size(),
              p.layout.blob_offset, p.planned.frames.blob.size(), p.layout.table_offset, p.search_table.size(), {},
              CacheTier::Optimized, 0, 0, {}};
  if (cache.counter_slots) {
    p.record.tier = CacheTier::Counting;
    p.record.counters_addr = p.counters_addr, p.record.counters_length = p.layout.counters_length;
    for (const jit::CachedFunction& f : cache.functions)
      for (const jit::EmittedCounter& c : f.code.counters) p.record.counter_sites.push_back({c.addr + bias, c.site.form()});
  }
  for (const jit::CachedFunction* f : p.planned.frames.copies) {
    for (const jit::EntryPatch& e : f->patch.entries) p.record.patches.push_back({e.addr + bias, e.original, e.replacement});
    // Its copy still runs when other copies call it; its entry stays as it is.
    if (!f->unpatched.empty())
      skipped.push_back(fmt::format("func_{:x}: entry left unpatched: {}", f->original_entry, f->unpatched));
  }
  const std::size_t record_bytes = encode_record(p.record).size();
  // A record the scan could not read back would make the cache invisible to a new dynid.
  if (record_bytes > kMaxRecordBytes)
    return fail(fmt::format("the cache's record would take {} bytes, more than a new dynid reads ({}): "
                            "too many counter sites", record_bytes, kMaxRecordBytes));
  if (record_bytes > p.layout.stub_offset) return fail("the cache's record outgrew its page");
  return p;
}

// Writes the record into the mapped cache: last, once everything it
// describes is in place (prepare checked that it fits below the stub).
Status write_record(pid_t pid, const Prepared& p, const MappedCache& cache) {
  return write_cache(pid, cache, encode_record(p.record), 0);
}

// Writes stub, code, frames and their search table into the mapped cache.
// The code as loaded: rebuilt tables' absolute entries get the module's bias.
Status write_code(pid_t pid, const Prepared& p, const MappedCache& cache) {
  const std::vector<uint8_t> code = p.planned.plan.cache.loaded_at(p.exe.module->bias);
  for (auto [bytes, offset] : {std::pair{std::span<const uint8_t>(kReturnStub), p.layout.stub_offset},
                               std::pair{std::span<const uint8_t>(code), p.layout.code_offset},
                               std::pair{std::span<const uint8_t>(p.planned.frames.blob), p.layout.blob_offset},
                               std::pair{std::span<const uint8_t>(p.search_table), p.layout.table_offset}})
    if (auto r = write_cache(pid, cache, bytes, offset); !r) return r;
  return ok();
}

// A window may find no thread parked where it can run a call (every thread
// busy, or in malloc): a few more are tried, 100 ms apart.
Status register_frames_retrying(const Injection& out, const Prepared& p, std::chrono::milliseconds timeout) {
  Status r = ok();
  for (int attempt = 0; attempt < kRegisterAttempts; ++attempt) {
    if (attempt) std::this_thread::sleep_for(100ms);
    r = register_frames(out, *p.symbols, p.exe.module->path, p.register_frame, out.eh_frame_addr,
                        p.place.addr + p.layout.stub_offset, timeout);
    if (r || r.error().message().find("no thread is parked") == std::string::npos) return r;
  }
  return r;
}

std::vector<CopyRange> copy_ranges(const Prepared& p) {
  std::vector<CopyRange> out;
  const uint64_t bias = p.exe.module->bias;
  for (const jit::CachedFunction& f : p.planned.plan.cache.functions) {
    const elf::Function* fn = p.exe.module->functions->find(f.original_entry);
    out.push_back({f.code.base + bias, f.code.bytes.size(), f.original_entry + bias,
                   fn ? elf::display_name(*fn) : fmt::format("func_{:x}", f.original_entry)});
  }
  return out;
}

}  // namespace

const jit::ModuleProfile* layout_profile(const jit::ModuleProfile& profile) {
  for (const auto& [start, f] : profile.functions)
    if (!f.branches.empty()) return &profile;
  return nullptr;
}

// An optimized cache whose huge pages, faulted in by a lift, a fork split
// while it was written (`faulted`: its huge bytes just after the mmap
// window) is collapsed back in one more short window (cache_huge_pages.h).
// Small pages run the same code: nothing here fails the injection.
void collapse_if_split(const Prepared& p, Injection& out, uint64_t faulted) {
  if (out.tier != CacheTier::Optimized || faulted == 0) return;
  auto huge = huge_page_bytes(out.pid, out.cache);
  if (!huge || *huge >= faulted) return;
  RaisedPriority priority;
  const auto start = std::chrono::steady_clock::now();
  auto w = stop_world(out.pid);
  if (!w || !same_target_with_record(out)) return;
  HugeOutcome collapsed = collapse_huge(*w, p.sites, out.cache);
  w->resume();
  out.longest_stop = std::max(out.longest_stop, std::chrono::duration_cast<std::chrono::microseconds>(
                                                    std::chrono::steady_clock::now() - start));
  out.cache.huge_note += "; split while it was written (a fork shared it): " + collapsed.note;
}

Result<Injection> inject_executable(const InjectRequest& req) {
  Injection out;
  out.pid = req.pid;
  auto stat = read_proc_stat("/proc", req.pid);
  if (!stat) return std::unexpected(stat.error());
  out.start_time = stat->start_time;
  if (auto same = same_image(*stat, req.image); !same) return std::unexpected(same.error());
  auto p = prepare(req, out.skipped);
  if (!p) return std::unexpected(p.error());
  // A plan with nothing to inject maps nothing (a cache stays for the process's life).
  // (nor one whose every entry is left unpatched: nothing would reach it).
  if (p->planned.plan.cache.functions.empty() || p->record.patches.empty())
    return fail(fmt::format("nothing to inject: none of the {} hot functions could be {}{}", req.hot.size(),
                            p->planned.plan.cache.functions.empty() ? "copied" : "entered by a patch",
                            out.skipped.empty() ? "" : " (first reason: " + out.skipped.front() + ")"));
  bool lifted = false;  // the cache faulted in with the target's THP flag lifted
  {  // A short window, for the mmap alone.
    RaisedPriority priority;
    auto w = stop_world(req.pid);
    if (!w) return std::unexpected(w.error());
    if (auto same = same_target(req.pid, out.start_time); !same) return std::unexpected(same.error());
    if (auto same = executable_where_it_was(req.pid, p->exe); !same) return std::unexpected(same.error());
    auto now = read_proc_stat("/proc", req.pid);
    if (!now) return std::unexpected(now.error());
    if (auto same = same_image(*now, req.image); !same) return std::unexpected(same.error());
    auto cache = map_cache(*w, p->sites, p->place);
    if (!cache) return std::unexpected(cache.error());
    out.cache = *cache;
    if (req.lift_thp) {
      HugeOutcome faulted = fault_in_huge(*w, p->sites, out.cache);
      out.cache.huge_note = faulted.note;
      lifted = faulted.lifted;
    } else {
      out.cache.huge_note = "not lifted (asked)";
    }
    if (p->layout.counters_length) {
      auto counters = map_counters(*w, p->sites, p->counters_addr, p->layout.counters_length);
      if (!counters) {
        out.error = "counters: " + counters.error().message();  // the cache is mapped, nothing reaches it
        return out;
      }
      out.counters = *counters;
    }
  }
  // Measured now, before anything is written: what a fork could split.
  const uint64_t faulted = lifted ? huge_page_bytes(req.pid, out.cache).value_or(0) : 0;
  // The stripe table before any site can run (nothing reaches the cache yet).
  if (std::vector<uint8_t> table = p->planned.plan.cache.counter_layout().table(); !table.empty())
    if (auto r = write_counters(req.pid, out.counters, table); !r) {
      out.error = "counters: " + r.error().message();
      return out;
    }
  // From here on the target holds dyni's cache: failures are reported in
  // `out.error`, with what was done, so that it can be undone.
  out.code_addr = p->place.addr + p->layout.code_offset;
  out.code_size = p->planned.plan.cache.bytes.size();
  if (req.counts) out.count_metrics = jit::count_metrics(p->planned.plan, *req.counts);
  out.tier = p->record.tier;
  out.counter_sites = p->record.counter_sites;
  out.counter_layout = p->planned.plan.cache.counter_layout();
  out.build_id = p->record.build_id, out.module = p->exe.module->path, out.module_bias = p->exe.module->bias;
  for (const jit::CachedFunction& f : p->planned.plan.cache.functions)
    if (!f.counters.empty()) out.counted[f.original_entry] = f.counters;
  out.eh_frame_addr = p->place.addr + p->layout.blob_offset;
  out.copies = copy_ranges(*p);
  for (const jit::CachedFunction& f : p->planned.plan.cache.functions) out.promoted_calls += f.code.promoted.size();
  out.frames = {out.code_addr, out.code_addr + out.code_size, p->place.addr + p->layout.table_offset,
                p->search_table.size() / jit::kSearchEntryBytes};
  out.other_frames = p->other_frames;
  if (req.replacing) {
    out.other_copies = req.replacing->other_copies;
    out.other_copies.insert(out.other_copies.end(), req.replacing->copies.begin(), req.replacing->copies.end());
  }
  if (auto r = write_code(req.pid, *p, out.cache); !r) {
    out.error = r.error().message();
    return out;
  }
  // Unwind information first: no copy runs before it is registered.
  if (!p->register_frame) {
    out.frames_registered = "no: no unwinder is loaded in the target";
  } else if (auto r = register_frames_retrying(out, *p, req.call_timeout); !r) {
    out.error = r.error().message();
    return out;
  } else {
    out.frames_registered = "yes: __register_frame of libgcc_s";
  }
  // The record last, before any patch: a cache with a record is complete and
  // its frames registered, so a new dynid (or a forked child's) may redo it.
  if (auto r = write_record(req.pid, *p, out.cache); !r) {
    out.error = r.error().message();
    return out;
  }
  collapse_if_split(*p, out, faulted);
  Replaced replacing;
  if (req.replacing)
    for (const PatchRecord& old : req.replacing->patched) replacing[old.addr] = old.replacement;
  if (auto r = patch_all(p->record.patches, out, replacing); !r) out.error = r.error().message();
  return out;
}

Status undo_patches(const Injection& in) {
  const pid_t pid = in.pid;
  RaisedPriority priority;
  auto w = stop_world(pid);
  if (!w) return std::unexpected(w.error());
  if (auto same = same_target_with_record(in); !same) return same;
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  for (const PatchRecord& p : in.patched) {
    if (!holds_jump(pid, p)) continue;  // not ours any more
    // Only where a patch can be (a record read from the target is
    // untrusted): a file's executable code, the 5 bytes within one page.
    const profiler::Mapping* text = mapping_at(*maps, p.addr);
    if (!text || !text->executable || !text->file_backed() || p.addr % 4096 > 4096 - kPatchBytes) continue;
    if (auto r = write_in_mapping(pid, *text, p.addr, p.original); !r) return r;
  }
  return ok();
}

Result<Injection> redo_patches(const Injection& in) {
  if (in.tier == CacheTier::Counting) return fail("a counting cache is never patched in again");
  Injection again;
  again.pid = in.pid, again.start_time = in.start_time, again.cache = in.cache, again.frames = in.frames;
  again.other_frames = in.other_frames;
  std::vector<PatchRecord> pending;
  for (const PatchRecord& p : in.patched)  // entries still patched need nothing
    (holds_jump(in.pid, p) ? again.patched : pending).push_back(p);
  if (auto r = patch_all(pending, again); !r) again.error = r.error().message();
  return again;
}

namespace {

constexpr std::size_t kOffPagesPerWindow = 32;
constexpr std::size_t kCounterLookahead = jit::kCounterStartBytes;

// The sites of `sites` on code page `page` of the held target turned off in
// its bytes (the page, then a few bytes of the next); how many were (a site
// already off, or not counter code, is left as it is). No thread's PC can
// lie between the 2 bytes written: they are inside one instruction, and a
// PC at the site's start runs the jmp.
std::size_t turn_off_on_page(std::vector<uint8_t>& page_bytes, uint64_t page,
                             const std::vector<const CounterSiteRecord*>& sites) {
  std::size_t n = 0;
  for (const CounterSiteRecord* c : sites) {
    const uint64_t at = c->addr - page;
    std::span<uint8_t> live(page_bytes.data() + at, page_bytes.size() - at);
    if (!jit::is_counter_start(live, c->form)) continue;
    std::array<uint8_t, 2> off = jit::counter_off_bytes(c->form);
    std::copy(off.begin(), off.end(), live.begin());
    ++n;
  }
  return n;
}

// One window over `pages` (page → its sites).
Result<std::size_t> counters_off_window(const Injection& in,
                                        const std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>>& pages) {
  RaisedPriority priority;
  auto w = stop_world(in.pid);
  if (!w) return std::unexpected(w.error());
  if (auto same = same_target_with_record(in); !same) return std::unexpected(same.error());
  auto maps = profiler::read_maps(in.pid);  // held: no thread can map or unmap meanwhile
  if (!maps) return std::unexpected(maps.error());
  const profiler::Mapping* code = mapping_at(*maps, in.cache.addr);
  if (!code || code->start != in.cache.addr || code->end != in.cache.addr + in.cache.length || code->writable ||
      !code->executable || !code->path.empty())
    return fail(fmt::format("the cache at {:#x} is no longer the mapping dyni made", in.cache.addr));
  WindowMemory memory(in.pid);
  std::size_t off = 0;
  for (const auto& [page, sites] : pages) {
    // The page and the first bytes of the next: a site's counter code may
    // begin near the page's end (only its 2 first bytes are written).
    const std::size_t readable = std::min<uint64_t>(4096 + kCounterLookahead, code->end - page);
    auto bytes = memory.read(page, readable);
    if (!bytes) return std::unexpected(bytes.error());
    std::size_t n = turn_off_on_page(*bytes, page, sites);
    if (n == 0) continue;
    bytes->resize(std::min<std::size_t>(bytes->size(), 4096));
    if (auto r = memory.write_in_mapping(*code, page, *bytes); !r) return std::unexpected(r.error());
    off += n;
  }
  w->resume();
  return off;
}

}  // namespace

Result<std::size_t> counters_off(const Injection& in) {
  if (in.tier != CacheTier::Counting) return fail("not a counting cache");
  std::map<uint64_t, std::vector<const CounterSiteRecord*>> by_page;
  for (const CounterSiteRecord& c : in.counter_sites) {
    bool in_code = c.addr >= in.cache.addr && c.addr + 2 <= in.cache.addr + in.cache.length;
    if (in_code && c.addr / 4096 == (c.addr + 1) / 4096) by_page[c.addr & ~uint64_t{4095}].push_back(&c);
  }
  std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>> pages(by_page.begin(), by_page.end());
  std::size_t off = 0;
  for (std::size_t at = 0; at < pages.size(); at += kOffPagesPerWindow) {
    std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>> chunk(
        pages.begin() + static_cast<std::ptrdiff_t>(at),
        pages.begin() + static_cast<std::ptrdiff_t>(std::min(pages.size(), at + kOffPagesPerWindow)));
    auto n = counters_off_window(in, chunk);
    if (!n) return std::unexpected(n.error());
    off += *n;
  }
  return off;
}

std::map<std::string, std::size_t> skipped_by_kind(const std::vector<std::string>& skipped) {
  std::map<std::string, std::size_t> out;
  for (const std::string& s : skipped) {
    auto colon = s.find(": ");
    std::string kind = colon == std::string::npos ? s : s.substr(colon + 2);
    auto at = kind.find(" at 0x");
    out[at == std::string::npos ? kind : kind.substr(0, at)]++;
  }
  return out;
}

Result<jit::ModuleCounts> read_counts(const Injection& in) {
  if (in.tier != CacheTier::Counting || in.counted.empty()) return fail("not a counting cache made by this dynid");
  auto words = read_counters(in.pid, in.counters);
  if (!words) return std::unexpected(words.error());
  const std::vector<uint64_t> values = in.counter_layout.sums(*words);
  jit::ModuleCounts counts;
  counts.module = in.module, counts.build_id = in.build_id;
  for (const auto& [entry, sites] : in.counted) counts.functions[entry] = jit::site_counts(entry, sites, values, in.module_bias);
  return counts;
}

Injection from_record(pid_t pid, uint64_t start_time, const CacheRecord& record) {
  Injection in;
  in.pid = pid, in.start_time = start_time;
  in.tier = record.tier;
  in.cache = {record.cache_addr, record.cache_length, 0, false, {}};
  in.counters = {record.counters_addr, record.counters_length, 0, false, {}};
  in.counter_sites = record.counter_sites;
  in.build_id = record.build_id;
  in.code_addr = record.cache_addr + record.code_offset;
  in.code_size = record.code_size;
  in.eh_frame_addr = record.cache_addr + record.eh_frame_offset;
  in.frames = {in.code_addr, in.code_addr + in.code_size, record.cache_addr + record.search_table_offset,
               record.search_table_size / jit::kSearchEntryBytes};
  in.patched = record.patches;
  return in;
}

}  // namespace dyni
