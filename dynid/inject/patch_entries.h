// Step 5 of an injection, and undo and redo: each entry patch, then each
// call site, is checked live in a stop window (patch_safety.h, I4) and
// written in one write (I2). Undo puts call sites back before entries.
// An entry that holds the jump of the counting cache being replaced is
// re-pointed, in one write too.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "dynid/injector.h"
#include "dynid/patch_safety.h"
#include "dynid/world_stop.h"

namespace dyni::inject {

// What each entry may hold now besides the file's bytes: the jump of the
// cache being replaced (a counting cache's), which the patch re-points.
using Replaced = std::map<uint64_t, std::array<uint8_t, kPatchBytes>>;  // entry → the jump it may hold

// A call to a copied function's start is re-pointed at its copy (a call
// site, or another module's GOT slot, got_slots.h) only while its callee's
// entry holds dyni's jump (in.patched has it, and the live bytes say so):
// else the call would go round whatever holds that entry now, a breakpoint
// or a uprobe.
using EntryJumps = std::map<uint64_t, const PatchRecord*>;  // the entries patched, by address
EntryJumps entry_jumps(const Injection& in);
using Reader = std::function<Result<std::vector<uint8_t>>(uint64_t, std::size_t)>;
// Whether a call to `start` may go to `copy` instead (see the definition).
bool callee_entry_is_ours(uint64_t start, uint64_t copy, const EntryJumps& entries, const Reader& read);

// Every thread's stack held in `w`, as far as it unwinds (a thread in a
// system call also at its `syscall`, where the kernel may restart it).
std::map<pid_t, ThreadStack> window_stacks(const Injection& in, const WorldStop& w);

// Whether `text` still maps the file the copies were made from where it was
// then (injector.h: module_inode, module_load): a library can be unloaded
// and another file, or another load of it, mapped in its place.
bool still_the_module(const Injection& in, const profiler::Mapping& text);

// Patches `pending` in up to `windows` stop windows (sites that must wait
// are tried again, 50 ms apart). What was patched goes to out.patched, what
// was left alone, with why, to out.skipped; the longest window to
// out.longest_window. Fails only when the target is gone or changed.
inline constexpr int kPatchWindows = 5;
Status patch_all(std::vector<PatchRecord> pending, Injection& out, const Replaced& replacing = {},
                 int windows = kPatchWindows);

// Entries first (patch_all), then call sites (jit/call_sites.h) in windows
// of their own, a bounded number each: a call site is written only while
// its callee's entry holds dyni's jump.
Status patch_in_order(const std::vector<PatchRecord>& patches, Injection& out, const Replaced& replacing = {},
                      int windows = kPatchWindows);

}  // namespace dyni::inject
