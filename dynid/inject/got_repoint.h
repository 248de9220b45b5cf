// The last step of a further module's injection (all_hot_modules, issue 22
// item 2): calls from the target's other copied modules to this module's
// hot functions reach its copies, not its original entries. Such a call
// goes through the caller's PLT, whose stub jumps through a JUMP_SLOT GOT
// slot; that slot, where ld.so bound it to the start of a function this
// cache copies, is re-pointed at the copy.
//
// Only JUMP_SLOT slots: they serve the PLT's calls alone. A GLOB_DAT slot
// also gives the function's address to code that compares or stores it
// (pointer identity), and is never touched. Each slot is one 8-byte write
// through /proc/PID/mem in a stop window, RELRO or not (no mprotect), and
// only where it still holds the value ld.so bound and the function's entry
// holds dyni's jump (as a re-pointed call site's callee must, patch_entries.h:
// else the call would go round whatever holds that entry now, a uprobe).
// An unbound slot (lazy binding) holds an address in its own PLT, never a
// function's start here: it is left to ld.so. Undo writes the bound value
// back only where the slot still holds the copy's address.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "dynid/injector.h"
#include "profiler/process_maps.h"

namespace dyni::inject {

// A slot that may be re-pointed: a holder's JUMP_SLOT slot whose live value
// lay in the copied module's mappings when it was read (run-time).
struct SlotCandidate {
  uint64_t addr = 0, value = 0;
};

// Every JUMP_SLOT slot of `holders` whose live value lies in [lo, hi), read
// from each holder's file (its relocations) and the target's memory. A
// holder no longer loaded as it was is passed over.
Result<std::vector<SlotCandidate>> slot_candidates(pid_t pid, const std::vector<SlotHolder>& holders, uint64_t lo,
                                                   uint64_t hi);

// The candidates whose value is the start of a copy whose entry is patched:
// each re-pointed at its copy's start (run-time, `copies` as copy_ranges gives).
std::vector<SlotRecord> plan_slots(const std::vector<SlotCandidate>& candidates, const std::vector<CopyRange>& copies);

// Re-points `slots` in one stop window (after the entries are patched): each
// that still holds its original value, in a data mapping of a holder's file
// (out.slot_files), whose function's entry holds dyni's jump. What was
// written goes to out.slots_patched, what was left alone to out.skipped.
// Fails only when the target is gone or changed.
Status repoint_slots(const std::vector<SlotRecord>& slots, Injection& out);

// Inside undo's stop window, before any entry: each slot of in.slots_patched
// that still holds its copy's address gets the value ld.so bound back, where
// it lies in a file's data mapping. How many were written back.
Result<std::size_t> restore_slots(const Injection& in, const std::vector<profiler::Mapping>& maps);

// Whether slot `s` holds `value` now (read outside any window).
bool slot_holds(pid_t pid, const SlotRecord& s, uint64_t value);

// Whether any slot of in.slots_patched holds its copy's address now (undo
// needs a window for it).
bool any_slot_repointed(const Injection& in);

}  // namespace dyni::inject
