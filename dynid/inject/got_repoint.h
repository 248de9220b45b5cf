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
// back only where the slot still holds the copy's address. Every write, at
// injection, undo or redo, is to an address proven a JUMP_SLOT slot of the
// file mapped there now (prove_slots).
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

// Every JUMP_SLOT slot of the modules `holders` (paths as the target maps
// them) whose live value lies in [lo, hi), read from each holder's file
// (its relocations, where its code mapping loads it now) and the target's
// memory. A holder not loaded is passed over. What is read here only
// proposes: each slot is proven (prove_slots) and checked in the window.
Result<std::vector<SlotCandidate>> slot_candidates(pid_t pid, const std::vector<std::string>& holders, uint64_t lo,
                                                   uint64_t hi);

// The candidates whose value is the start of a copy whose entry is patched:
// each re-pointed at its copy's start (run-time, `copies` as copy_ranges gives).
std::vector<SlotRecord> plan_slots(const std::vector<SlotCandidate>& candidates, const std::vector<CopyRange>& copies);

// A slot proven to be a JUMP_SLOT slot (a record's is untrusted, I9, and a
// holder may have been unloaded and something else mapped there): its
// address is the r_offset of an R_X86_64_JUMP_SLOT relocation of the file
// mapped there, as that mapping loads it, in a private data mapping of a
// file (not shared memory, not code; one replaced on disk since is read
// through /proc/PID/map_files all the same). Proven outside any stop
// window (a file is read); a window then checks that `mapping` is still
// what /proc/PID/maps has there.
struct ProvenSlot {
  SlotRecord slot;
  profiler::Mapping mapping;
};
std::vector<ProvenSlot> prove_slots(pid_t pid, const std::vector<SlotRecord>& slots);

// Re-points `slots` in one stop window (after the entries are patched): each
// proven one that still holds its original value and whose function's entry
// holds dyni's jump. What was written goes to out.slots_patched, what was
// left alone to out.skipped. Fails only when the target is gone or changed.
Status repoint_slots(const std::vector<SlotRecord>& slots, Injection& out);

// Inside undo's stop window (`maps` read in it), before any entry: each of
// `proven` that still holds its copy's address gets the value ld.so bound
// back. A slot that cannot be written is said and left: it never keeps the
// entries from being put back (its copy stays mapped, I8). How many were
// written back.
std::size_t restore_slots(pid_t pid, const std::vector<ProvenSlot>& proven, const std::vector<profiler::Mapping>& maps);

// Whether slot `s` holds `value` now (read outside any window).
bool slot_holds(pid_t pid, const SlotRecord& s, uint64_t value);

// Whether any of in.slots holds its copy's address now (undo needs a
// window for it).
bool any_slot_repointed(const Injection& in);

}  // namespace dyni::inject
