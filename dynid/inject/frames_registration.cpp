// Registering a cache's frames with the target's unwinder (frames_registration.h).
#include "dynid/inject/frames_registration.h"

#include <map>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "dynid/cache_record.h"
#include "dynid/clean_thread.h"
#include "dynid/inject/patch_entries.h"
#include "dynid/inject/target_checks.h"
#include "dynid/inject/window_retry.h"
#include "dynid/remote_call.h"
#include "dynid/target_memory.h"
#include "dynid/thread_unwind.h"
#include "dynid/world_stop.h"
#include "elf/elf_file.h"

namespace dyni::inject {
namespace {

using namespace std::chrono_literals;

// The file a module is mapped from, as the target sees it: through
// /proc/PID/map_files (a container's own file, or one deleted or replaced on
// disk since it was mapped), never by its path on the host.
std::string mapped_file(pid_t pid, const std::vector<profiler::Mapping>& maps, const std::string& path) {
  for (const auto& m : maps)
    if (m.path == path) return fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end);
  return path;
}

// Registers the blob through a remote call in a clean thread.
Status register_frames(const Injection& in, const profiler::Symbolizer& symbols, std::string_view in_executable,
                       uint64_t blob, const RegisterCall& call) {
  const pid_t pid = in.pid;
  auto w = stop_world(pid);
  if (!w) return std::unexpected(w.error());
  if (call.single_threaded && w->threads().size() != 1)
    return fail(fmt::format("it has {} threads now: its group's parent is injected only while it has one",
                            w->threads().size()));
  const uint64_t stub = call.stub;
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
  // A thread stopped in the copied library's code is as clean as one in the
  // executable's, where that library is still loaded as it was copied: the
  // symbolizer was read before this window (another file may lie there now).
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  auto copied_module_at = [&](uint64_t rip) -> std::string_view {
    const profiler::Mapping* text = mapping_at(*maps, copied_from(rip).value_or(rip));
    return text && still_the_module(in, *text) ? std::string_view(in.module) : std::string_view();
  };
  std::string why;
  for (const auto& [tid, t] : w->threads()) {
    auto stack = reader.unwind(tid);
    if (!stack) continue;
    if (auto clean = clean_for_calls(tid, t, *stack, symbols, in_executable, copied_from, copied_module_at(t.regs.rip));
        !clean) {
      why = clean.error().message();
      continue;
    }
    // Held, no signal to take, room for the frame: else the next thread (a
    // call that fails once armed is not tried again elsewhere).
    if (auto fit = can_take_call(*w, tid, FrameAlignment::FunctionEntry); !fit) {
      why = fit.error().message();
      continue;
    }
    auto r = remote_call(*w, tid, {call.function, {blob}, stub}, call.timeout);
    return r ? ok() : Status(std::unexpected(r.error()));
  }
  return fail("no thread is parked where it can run __register_frame (" + why + ")");
}

}  // namespace

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

Status register_cache_frames(const Injection& out, const profiler::Symbolizer& symbols, std::string_view executable,
                             const RegisterCall& call) {
  return retry_window(
      [&] { return register_frames(out, symbols, executable, out.eh_frame_addr, call); },
      [](const Status& r) { return !r && r.error().message().find("no thread is parked") != std::string::npos; });
}

}  // namespace dyni::inject
