// Step 2 of an injection: the cache is mapped in one short stop window
// (cache_mapping.h), on a huge page where it can be (cache_huge_pages.h),
// with a counting cache's counters beside it. Nothing reaches it yet (I2).
#pragma once

#include <cstdint>

#include "common/result.h"
#include "dynid/inject/prepare.h"
#include "dynid/injector.h"

namespace dyni::inject {

// What a fork could later split: the cache's huge-page bytes right after
// the window, where its THP flag was lifted for it (0: none).
struct Mapped {
  uint64_t huge_bytes_faulted = 0;
};

// Maps out.cache (and out.counters) at p.place. Fails, with nothing mapped
// or with out.error set and the cache mapped, when the target is not the
// one prepared for (reused pid, exec, moved executable).
// When no thread can take a call in the window (all asleep where a call
// cannot be run), nothing is done and the window is tried again
// (window_retry.h).
Result<Mapped> map_in_window(const InjectRequest& req, const Prepared& p, Injection& out);
Result<Mapped> map_in_one_window(const InjectRequest& req, const Prepared& p, Injection& out, bool& no_thread);

// An optimized cache whose huge pages a fork split while it was written is
// collapsed back in one more short window. Small pages run the same code:
// nothing here fails the injection.
void collapse_if_split(const Prepared& p, Injection& out, const Mapped& mapped);

}  // namespace dyni::inject
