// The record a code cache carries about itself, in the first bytes of its
// mapping (DESIGN.md §3 step 8, issue 11 item 4): what a dynid needs to
// recognise a target that is already dynimized (after `dyni -stop`, a crash,
// or in a forked child) and never patch it twice, and to undo it even when
// /var/lib/dyni was lost: the module's build-id and load bias, where the code
// and the unwind information lie, and every patch with its original bytes.
//
// The target's memory is untrusted (I9): decode_record checks every size,
// count and range against the bytes and the mapping, and a checksum. A
// record that fails is not dyni's; the caller leaves such a mapping alone.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "jit/counting.h"

namespace dyni {

// What a patch rewrites: a copied function's entry (a jmp rel32 into the
// cache, or a short jump `eb rel8` to a pad, its other 3 bytes the file's),
// a direct call site left in the original code (jit/call_sites.h: the same
// call or jmp, its displacement re-pointed at a copy), or a pad (5 bytes of
// padding between functions, jit/entry_pads.h: a jmp rel32 into the cache,
// written before the short jump that reaches it and put back after it).
enum class PatchKind : uint8_t { Entry = 0, CallSite = 1, Pad = 2 };

struct PatchRecord {
  uint64_t addr = 0;                    // run-time address of the 5 bytes
  std::array<uint8_t, 5> original{};    // put back by undo
  std::array<uint8_t, 5> replacement{}; // an entry's jmp rel32, or a call site's new displacement, into the cache
  PatchKind kind = PatchKind::Entry;
};

// How many of `patches` are of `kind`.
std::size_t count_of(const std::vector<PatchRecord>& patches, PatchKind kind);

// Whether entry patch `p` is a short jump to a pad; the pad's address.
bool is_short_entry(const PatchRecord& p);
uint64_t short_entry_pad(const PatchRecord& p);
// How many of `p`'s 5 bytes dyni writes: a short jump's 2 (the other 3 are
// the next instruction's, never written: a uprobe's int3 there stays its
// own), else 5.
inline std::size_t changed_bytes(const PatchRecord& p) { return is_short_entry(p) ? 2 : 5; }

// Each pad among `patches` → the short entry that jumps to it.
std::map<uint64_t, uint64_t> pad_entries(std::span<const PatchRecord> patches);

// Where entry patch `entry` sends its callers: its jmp's target, or through
// a short jump its pad's (found among `patches`); 0 when that pad is not there.
uint64_t entry_jump_target(const PatchRecord& entry, std::span<const PatchRecord> patches);

// A JUMP_SLOT GOT slot of another module of the target (its PLT's: it
// serves calls alone, never an address-of) that held the start of a function
// this cache copies, re-pointed at that copy (issue 22: calls from one
// module's copies to another's hot functions reach its copies). 8 bytes,
// 8-aligned: one write, never across a page. Undo writes `original` back
// only where the slot still holds `replacement` (ld.so writes these slots
// itself under lazy binding; a GOT hook may have since).
struct SlotRecord {
  uint64_t addr = 0;         // run-time address of the slot
  uint64_t original = 0;     // the function's run-time start, as ld.so bound it
  uint64_t replacement = 0;  // its copy's start, in this cache
};

// Counter code in a counting cache (jit/counting.h), as dynid turns it off.
struct CounterSiteRecord {
  uint64_t addr = 0;      // run-time address of its first instruction
  jit::CounterForm form;  // which gives its length
};

// What a cache is for: the optimized code, or the counting copies that
// gather the counts it is built from (a short phase; never patched in again
// once it ended).
enum class CacheTier : uint8_t { Optimized = 0, Counting = 1 };

struct CacheRecord {
  // 2: the search table; 3: the tier, the counters' mapping and the counter
  // sites; 4: a site's form byte holds CounterForm::bits (striped counters),
  // where 3 knew only 0 and 1 (so that a dynid that reads 3 never takes a
  // striped site for a shorter one: it refuses the record); 5: the value
  // bit (value code, counting.h), which 4 refuses; 6: a patch's kind (call
  // sites, which 5 would take for entries); 7: a call site may be re-pointed
  // from a function's start whose entry patch lies after its kept first
  // instruction (jit/patch_plan.h), which 6 refuses; 8: that patch may lie
// up to kMaxEntryPatchOffset bytes in, after several kept instructions,
// where 7 allows kMaxEntryPatchOffsetV7; 9: other modules' GOT slots
// re-pointed at the copies (slots), which 8 would not undo; 10: pads and
// entries' short jumps to them, which 9 would take for a call site's kind
// and refuse. Every older version is
  // still read (2: tier Optimized, no counters; before 6 every patch is an
  // entry; before 7 a call site's original target is an entry patch's address).
  static constexpr uint32_t kVersion = 10;
  static constexpr uint32_t kOldestVersion = 2;
  std::string build_id;  // the module's GNU build-id, lowercase hex
  uint64_t module_bias = 0;
  uint64_t cache_addr = 0, cache_length = 0;  // the whole mapping
  uint64_t code_offset = 0, code_size = 0;    // within the mapping
  uint64_t eh_frame_offset = 0, eh_frame_size = 0;
  // .eh_frame_hdr's binary-search table for the frames (cache_eh_frame.h),
  // which a remote unwinder reads (thread_unwind.h).
  uint64_t search_table_offset = 0, search_table_size = 0;
  std::vector<PatchRecord> patches;
  CacheTier tier = CacheTier::Optimized;
  uint64_t counters_addr = 0, counters_length = 0;  // a counting cache's read-write mapping
  std::vector<CounterSiteRecord> counter_sites;     // in the code, by address
  std::vector<SlotRecord> slots;                    // other modules' GOT slots (version 9)
};

// "DYNICACH": the first 8 bytes of a mapping that holds a record.
constexpr std::array<uint8_t, 8> kRecordMagic = {'D', 'Y', 'N', 'I', 'C', 'A', 'C', 'H'};
constexpr std::size_t kMaxRecordBytes = 4 << 20;

// How many bytes a record takes: its patches, a counting cache's sites, the slots.
std::size_t record_size(std::size_t patches, std::size_t counter_sites, std::size_t slots = 0);

std::vector<uint8_t> encode_record(const CacheRecord& record);

// Decodes the record at the start of `bytes`, read from a mapping at
// `mapping_addr` of `mapping_length` bytes.
Result<CacheRecord> decode_record(std::span<const uint8_t> bytes, uint64_t mapping_addr, uint64_t mapping_length);

}  // namespace dyni
