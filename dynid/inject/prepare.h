// Step 1 of an injection: everything decided before the target is touched.
// The module is read (inject/target_module.h), the hot functions that may be copied are chosen,
// the jit plans them first at a provisional address (for the size), then at
// the cache's real place (cache_placement.h), with the frames of every copy
// (a copy without frames is planned out), and the cache's record is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "dynid/cache_placement.h"
#include "dynid/cache_record.h"
#include "dynid/inject/target_module.h"
#include "dynid/injector.h"
#include "dynid/remote_syscall.h"
#include "dynid/thread_unwind.h"
#include "jit/pipeline.h"
#include "profiler/symbolizer.h"

namespace dyni::inject {

// The copies that get unwind information (and so may be patched), and the
// .eh_frame blob for them at `blob_addr`. Copies it cannot describe are left
// out, with the reason.
struct Frames {
  std::vector<const jit::CachedFunction*> copies;
  std::vector<uint8_t> blob;
};

// The plan and frames at `cache_base`, with every copy that gets frames:
// a copy without frames is not only left unpatched but planned out, since
// other copies would call it directly (and a throw through it would end the
// process).
struct PlanWithFrames {
  jit::ModulePlan plan;
  Frames frames;
};

// The cache's layout: record at 0, return stub just below the code, code on
// a page of its own, then the .eh_frame blob. A counting cache's counters
// follow in a mapping of their own (counters_length, 0 for none).
struct Layout {
  uint64_t code_offset = 0, stub_offset = 0, blob_offset = 0, table_offset = 0, total = 0;
  uint64_t counters_length = 0;
};

// Everything decided before the target is touched.
struct Prepared {
  std::unique_ptr<profiler::Symbolizer> symbols;
  TargetModule target;  // the module whose hot functions are copied
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

Result<Prepared> prepare(InjectRequest req, std::vector<std::string>& skipped);

// The prepared copies' run-time ranges (perf maps, status).
std::vector<CopyRange> copy_ranges(const Prepared& p);

}  // namespace dyni::inject
