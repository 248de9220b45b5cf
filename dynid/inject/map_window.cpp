// Mapping the cache in one stop window, and collapsing it again after a
// fork split its huge pages (map_window.h).
#include "dynid/inject/map_window.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include <fmt/format.h>

#include "dynid/cache_huge_pages.h"
#include "dynid/cache_mapping.h"
#include "dynid/inject/target_checks.h"
#include "dynid/inject/window_retry.h"
#include "dynid/remote_call.h"
#include "dynid/remote_syscall.h"
#include "dynid/world_stop.h"

namespace dyni::inject {

Result<Mapped> map_in_window(const InjectRequest& req, const Prepared& p, Injection& out) {
  bool no_thread = false;
  return retry_window(
      [&] {
        no_thread = false;
        return map_in_one_window(req, p, out, no_thread);
      },
      [&](const Result<Mapped>&) { return no_thread; });
}

// One window; `no_thread` when no thread could take a call in it, and
// nothing was done.
Result<Mapped> map_in_one_window(const InjectRequest& req, const Prepared& p, Injection& out, bool& no_thread) {
  bool lifted = false;  // the cache faulted in with the target's THP flag lifted
  {
    RaisedPriority priority;
    auto w = stop_world(req.pid);
    if (!w) return std::unexpected(w.error());
    if (auto fit = any_thread_can_take_call(*w); !fit) {
      no_thread = true;
      return std::unexpected(fit.error());
    }
    if (auto same = same_target(req.pid, out.start_time); !same) return std::unexpected(same.error());
    if (auto same = module_where_it_was(req.pid, p.target); !same) return std::unexpected(same.error());
    if (auto slots = slots_unchanged(req.pid, p.target.plt_slots); !slots) return std::unexpected(slots.error());
    auto now = read_proc_stat("/proc", req.pid);
    if (!now) return std::unexpected(now.error());
    if (auto same = same_image(*now, req.image); !same) return std::unexpected(same.error());
    if (req.single_threaded && now->threads != 1)
      return fail(fmt::format("it has {} threads now: its group's parent is injected only while it has one "
                              "(a thread of it could fork while __register_frame holds the unwinder's lock)",
                              now->threads));
    // Under seccomp, every call this injection makes, before the first.
    std::vector<SeccompCall> calls =
        cache_mapping_calls(p.place, p.counters_addr, p.layout.counters_length, req.shared_counters);
    const bool lift = req.lift_thp && p.place.huge;
    if (lift) std::ranges::move(huge_page_calls(p.place.addr, p.place.length), std::back_inserter(calls));
    if (p.register_frame) calls.push_back(stub_sigreturn(p.place.addr + p.layout.stub_offset));  // __register_frame's way back
    if (auto allowed = seccomp_allows_all(*w, p.sites, std::move(calls)); !allowed)
      return std::unexpected(allowed.error());
    auto cache = map_cache(*w, p.sites, p.place);
    if (!cache) return std::unexpected(cache.error());
    out.cache = *cache;
    if (lift) {
      HugeOutcome faulted = fault_in_huge(*w, p.sites, out.cache);
      out.cache.huge_note = faulted.note;
      lifted = faulted.lifted;
    } else {
      out.cache.huge_note = req.lift_thp ? fmt::format("small pages: a small cache ({} KiB)", p.place.length >> 10)
                                         : "not lifted (asked)";
    }
    if (p.layout.counters_length) {
      auto counters = map_counters(*w, p.sites, p.counters_addr, p.layout.counters_length, req.shared_counters);
      if (!counters) {
        out.error = "counters: " + counters.error().message();  // the cache is mapped, nothing reaches it
        return Mapped{};
      }
      out.counters = *counters;
    }
  }
  // Measured now, before anything is written: what a fork could split.
  return Mapped{lifted ? huge_page_bytes(req.pid, out.cache).value_or(0) : 0};
}

void collapse_if_split(const Prepared& p, Injection& out, const Mapped& mapped) {
  if (out.tier != CacheTier::Optimized || mapped.huge_bytes_faulted == 0) return;
  auto huge = huge_page_bytes(out.pid, out.cache);
  if (!huge || *huge >= mapped.huge_bytes_faulted) return;
  RaisedPriority priority;
  const auto start = std::chrono::steady_clock::now();
  auto w = stop_world(out.pid);
  if (!w || !same_target_with_record(out)) return;
  if (auto allowed = seccomp_allows_all(*w, p.sites, huge_page_calls(out.cache.addr, out.cache.length)); !allowed) {
    out.cache.huge_note += "; split while it was written (a fork shared it), not collapsed: " + allowed.error().message();
    return;
  }
  HugeOutcome collapsed = collapse_huge(*w, p.sites, out.cache);
  w->resume();
  out.longest_stop = std::max(out.longest_stop, std::chrono::duration_cast<std::chrono::microseconds>(
                                                    std::chrono::steady_clock::now() - start));
  out.cache.huge_note += "; split while it was written (a fork shared it): " + collapsed.note;
}

}  // namespace dyni::inject
