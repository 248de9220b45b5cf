// Writing a mapped cache's contents and record (cache_contents.h).
#include "dynid/inject/cache_contents.h"

#include <span>
#include <utility>
#include <vector>

#include "dynid/cache_mapping.h"
#include "dynid/remote_call.h"

namespace dyni::inject {

// The counters' stripe table first, before any site can run; then stub,
// code (as loaded: rebuilt tables' absolute entries get the module's bias),
// frames and their search table.
Status write_contents(const Prepared& p, const Injection& out) {
  const jit::CodeCache& cache = p.planned.plan.cache;
  if (std::vector<uint8_t> table = cache.counter_layout().table(); !table.empty())
    if (auto r = write_counters(out.pid, out.counters, table); !r) return fail("counters: " + r.error().message());
  const std::vector<uint8_t> code = cache.loaded_at(p.target.module->bias);
  for (auto [bytes, offset] : {std::pair{std::span<const uint8_t>(kReturnStub), p.layout.stub_offset},
                               std::pair{std::span<const uint8_t>(code), p.layout.code_offset},
                               std::pair{std::span<const uint8_t>(p.planned.frames.blob), p.layout.blob_offset},
                               std::pair{std::span<const uint8_t>(p.search_table), p.layout.table_offset}})
    if (auto r = write_cache(out.pid, out.cache, bytes, offset); !r) return r;
  return ok();
}

// prepare checked that the record fits below the stub.
Status write_record(const Prepared& p, const Injection& out) {
  return write_cache(out.pid, out.cache, encode_record(p.record), 0);
}

}  // namespace dyni::inject
