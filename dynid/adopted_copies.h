// The copies of a cache dynid adopts, for perf, gdb and dyni -addr2orig
// (issue 23 items 1-3), when it did not make them itself: a child forked
// from a dynimized process holds its parent's cache, and has no perf map,
// origins file or symbol file of its own. They are rebuilt from the target's
// memory: each copy's range is an FDE of the cache's .eh_frame (the jit
// writes one a copy), and its function is the original whose entry is
// patched to jump into that range, named by the target's symbols. No
// line table: -addr2orig then names the function and the offset in the copy.
//
// What it reads is the target's (I9): a patch that is not a jmp rel32, or
// that lands in no FDE, names nothing; the .eh_frame is parsed by the
// fuzzed parser.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/cache_record.h"
#include "dynid/injector.h"

namespace dyni {

// `record`'s copies in process `pid`, and the cache's .eh_frame as read.
struct AdoptedCopies {
  std::vector<CopyRange> copies;
  std::vector<uint8_t> eh_frame;
};
Result<AdoptedCopies> adopted_copies(pid_t pid, const CacheRecord& record);

// `record`'s copies of tier `tier` ("optimized", "counting") as the origins
// file at `path` names them, without their line tables: what the dynid
// that made the cache wrote (dynid's own file: root's, 0600), read when a
// restarted dynid adopts that process. Empty when the file does not say.
std::vector<CopyRange> copies_from_origins(const std::string& path, const CacheRecord& record,
                                           const std::string& tier);


}  // namespace dyni
