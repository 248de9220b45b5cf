// A counting cache's counters: read, and every site turned off in place
// (injector.h: read_counts, counters_off; docs/counting.md).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "dynid/cache_mapping.h"
#include "dynid/injector.h"
#include "dynid/inject/target_checks.h"
#include "dynid/target_memory.h"
#include "dynid/world_stop.h"
#include "jit/counting.h"
#include "profiler/symbolizer.h"

namespace dyni {
namespace {

using inject::same_target_with_record;

constexpr std::size_t kOffPagesPerWindow = 32;
constexpr std::size_t kCounterLookahead = jit::kCounterStartBytes;

// The sites of `sites` on code page `page` of the held target turned off in
// its bytes (the page, then a few bytes of the next); how many were (a site
// already off, or not counter code, is left as it is). No thread's PC can
// lie between the 2 bytes written: they are inside one instruction, and a
// PC at the site's start runs the jmp.
std::size_t turn_off_on_page(std::vector<uint8_t>& page_bytes, uint64_t page,
                             const std::vector<const CounterSiteRecord*>& sites) {
  std::size_t n = 0;
  for (const CounterSiteRecord* c : sites) {
    const uint64_t at = c->addr - page;
    std::span<uint8_t> live(page_bytes.data() + at, page_bytes.size() - at);
    if (!jit::is_counter_start(live, c->form)) continue;
    std::array<uint8_t, 2> off = jit::counter_off_bytes(c->form);
    std::copy(off.begin(), off.end(), live.begin());
    ++n;
  }
  return n;
}

// One window over `pages` (page → its sites).
Result<std::size_t> counters_off_window(const Injection& in,
                                        const std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>>& pages) {
  RaisedPriority priority;
  auto w = stop_world(in.pid);
  if (!w) return std::unexpected(w.error());
  if (auto same = same_target_with_record(in); !same) return std::unexpected(same.error());
  auto maps = profiler::read_maps(in.pid);  // held: no thread can map or unmap meanwhile
  if (!maps) return std::unexpected(maps.error());
  const profiler::Mapping* code = mapping_at(*maps, in.cache.addr);
  if (!code || code->start != in.cache.addr || code->end != in.cache.addr + in.cache.length || code->writable ||
      !code->executable || !code->path.empty())
    return fail(fmt::format("the cache at {:#x} is no longer the mapping dyni made", in.cache.addr));
  WindowMemory memory(in.pid);
  std::size_t off = 0;
  for (const auto& [page, sites] : pages) {
    // The page and the first bytes of the next: a site's counter code may
    // begin near the page's end (only its 2 first bytes are written).
    const std::size_t readable = std::min<uint64_t>(4096 + kCounterLookahead, code->end - page);
    auto bytes = memory.read(page, readable);
    if (!bytes) return std::unexpected(bytes.error());
    std::size_t n = turn_off_on_page(*bytes, page, sites);
    if (n == 0) continue;
    bytes->resize(std::min<std::size_t>(bytes->size(), 4096));
    if (auto r = memory.write_in_mapping(*code, page, *bytes); !r) return std::unexpected(r.error());
    off += n;
  }
  w->resume();
  return off;
}

// Whether a site of `pages` still holds its counter code, read without
// stopping the target: only dynid turns sites off, and nothing writes an
// r-x cache, so a site off now stays off (a worker forked after its
// parent's counting ended inherits them off: no stop).
bool any_site_on(const Injection& in,
                 const std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>>& pages) {
  for (const auto& [page, sites] : pages) {
    const uint64_t end = in.cache.addr + in.cache.length;
    auto bytes = read_target(in.pid, page, std::min<uint64_t>(4096 + kCounterLookahead, end - page));
    if (!bytes) return true;  // unknown: the window decides
    for (const CounterSiteRecord* c : sites)
      if (jit::is_counter_start(std::span<const uint8_t>(*bytes).subspan(c->addr - page), c->form)) return true;
  }
  return false;
}

}  // namespace

Result<std::size_t> counters_off(const Injection& in) {
  if (in.tier != CacheTier::Counting) return fail("not a counting cache");
  std::map<uint64_t, std::vector<const CounterSiteRecord*>> by_page;
  for (const CounterSiteRecord& c : in.counter_sites) {
    bool in_code = c.addr >= in.cache.addr && c.addr + 2 <= in.cache.addr + in.cache.length;
    if (in_code && c.addr / 4096 == (c.addr + 1) / 4096) by_page[c.addr & ~uint64_t{4095}].push_back(&c);
  }
  std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>> pages(by_page.begin(), by_page.end());
  std::size_t off = 0;
  for (std::size_t at = 0; at < pages.size(); at += kOffPagesPerWindow) {
    std::vector<std::pair<uint64_t, std::vector<const CounterSiteRecord*>>> chunk(
        pages.begin() + static_cast<std::ptrdiff_t>(at),
        pages.begin() + static_cast<std::ptrdiff_t>(std::min(pages.size(), at + kOffPagesPerWindow)));
    if (!any_site_on(in, chunk)) continue;
    auto n = counters_off_window(in, chunk);
    if (!n) return std::unexpected(n.error());
    off += *n;
  }
  return off;
}

Result<jit::ModuleCounts> read_counts(const Injection& in) {
  if (in.tier != CacheTier::Counting || in.counted.empty()) return fail("not a counting cache made by this dynid");
  auto words = read_counters(in.pid, in.counters);
  if (!words) return std::unexpected(words.error());
  const std::vector<uint64_t> values = in.counter_layout.sums(*words);
  jit::ModuleCounts counts;
  counts.module = in.module, counts.build_id = in.build_id;
  for (const auto& [entry, sites] : in.counted) counts.functions[entry] = jit::site_counts(entry, sites, values, in.module_bias);
  return counts;
}

}  // namespace dyni
