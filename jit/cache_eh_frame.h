// .eh_frame for a code cache (I7): what the target's unwinder (libgcc's
// __register_frame, then _Unwind_Find_FDE) reads to step through a copy and
// find its exception handlers.
//
// One FDE per copy, from the copy's unwind rows (unwind_rows.h: each cache
// instruction has its original's frame), under a CIE that carries the
// original's personality routine and, where the original has an LSDA, the
// copy's translated LSDA (lsda.h). Every pointer is absolute
// (DW_EH_PE_absptr) and already a run-time address, so the bytes mean the
// same wherever they are placed; only the LSDAs, which follow the FDEs in
// the same blob, must be at the address the blob was built for. Code and
// data alignment factors are 1, so every offset is written exactly.
// The blob ends with a zero terminator, as __register_frame expects.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "elf/eh_frame.h"
#include "jit/emitter.h"
#include "jit/unwind_rows.h"

namespace dyni::jit {

struct CopyFrames {
  const EmittedCode* code = nullptr;        // the copy (link-time numbering, like the module)
  const std::vector<UnwindRow>* rows = nullptr;
  const elf::Fde* original = nullptr;       // the original's FDE: personality, LSDA, 'S'
  uint64_t entry_patch = 0;                 // where the original's entry patch lies (link-time); 0: none
};

struct UnwindSources {
  std::span<const uint8_t> eh_frame;  // the module's .eh_frame (the rows' expressions point into it)
  std::span<const uint8_t> lsda_section;  // the module's .gcc_except_table
  uint64_t lsda_section_addr = 0;
  uint64_t bias = 0;  // run-time minus link-time address of the module
};

// The blob for `copies`, to be placed at run-time address `blob_addr`.
// Fails naming the copy it cannot describe (the caller drops that copy).
Result<std::vector<uint8_t>> write_cache_eh_frame(std::span<const CopyFrames> copies, const UnwindSources& sources,
                                                  uint64_t blob_addr);

// The binary-search table of .eh_frame_hdr for `blob` (placed at
// `blob_addr`), to be placed at `table_addr`: one pair of int32 per FDE,
// (first code address, FDE address), both relative to `table_addr`, sorted
// by code address (DW_EH_PE_datarel | DW_EH_PE_sdata4). An unwinder that
// reads process memory (libunwind-ptrace, dynid's stack proofs) finds the
// cache's frames through it: kSearchEntryBytes per FDE.
constexpr std::size_t kSearchEntryBytes = 8;
Result<std::vector<uint8_t>> eh_frame_search_table(std::span<const uint8_t> blob, uint64_t blob_addr,
                                                   uint64_t table_addr);

}  // namespace dyni::jit
