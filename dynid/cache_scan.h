// Finding the dyni caches a target already holds (issue 11 item 4): one made
// by an earlier dynid (after dyni -stop or a crash), or inherited from a
// parent it was forked from, which keeps the parent's cache and patches. Each
// is recognised by the record at its start (cache_record.h), so a target is
// never injected twice and can be undone from its own memory alone.
//
// Reads the target's memory only; what it reads is untrusted (I9): a mapping
// whose record does not decode is not adopted. One that starts with dyni's
// magic and a record version this dynid does not read (a newer dynid's,
// after a package downgrade) is reported, so that the target is left alone
// rather than given a second cache beside one whose patches may be live.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "profiler/process_maps.h"

namespace dyni {

// Records of every anonymous, private, read-execute mapping that starts with
// a valid one.
std::vector<CacheRecord> find_cache_records(pid_t pid, const std::vector<profiler::Mapping>& maps);

// Why each mapping that starts with dyni's magic has a record this dynid
// cannot read ("a dyni cache at 0x7f... has a record of version 7, which this
// dynid cannot read (it reads 2 to 6)"); empty when there is none.
std::vector<std::string> unreadable_cache_records(pid_t pid, const std::vector<profiler::Mapping>& maps);

// Whether the entry holds dyni's jump (the patch is live).
bool holds_jump(pid_t pid, const PatchRecord& patch);
// How many of the patches are live: a reading of a running target's memory,
// each page read once.
std::size_t live_patches(pid_t pid, const std::vector<PatchRecord>& patches);

// The module a record was made for, where the target maps it now: the
// executable when the build-ids agree (an exec replaces the cache with it),
// else the library of the record's build-id whose code mapping has the
// record's bias. A library unloaded, or loaded elsewhere, or another build in
// its place, is none: its cache is not adopted (its patches point nowhere
// the record knows).
struct RecordModule {
  std::string path;  // as the maps name it
  bool executable = false;
  uint64_t inode = 0, load = 0;  // a library's (Injection::module_inode, module_load); 0 for the executable
  uint64_t dev = 0;              // with the inode (Injection::module_dev)
};
std::optional<RecordModule> module_of_record(pid_t pid, const std::vector<profiler::Mapping>& maps,
                                             const CacheRecord& record, const std::string& exe_path,
                                             const std::string& exe_build_id);

}  // namespace dyni
