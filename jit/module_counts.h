// Exact counts of one module, from the counters of a counting cache
// (counting.h): per function, how often each block ran and each counted
// conditional branch fell through, by offset from the function's start. The
// jit lays a cache out by them (pipeline.h, ModuleInput::counts); `dyni-inject`
// saves them to a counts file and `dyni-scan --counts` reads one back.
// Addresses are the module's link-time addresses.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "jit/code_cache.h"
#include "jit/counting.h"

namespace dyni::jit {

struct ModuleCounts {
  std::string module;         // path
  std::string build_id;       // the module's GNU build-id: counts of another build are not used
  double seconds = 0;         // how long the counters ran
  std::map<uint64_t, SiteCounts> functions;  // by link-time start address

  uint64_t entries(uint64_t function) const;  // how often `function`'s entry block ran (0: not counted)

  nlohmann::json to_json() const;
  // Checks what it reads: a counts file is input like any other.
  static Result<ModuleCounts> from_json(const nlohmann::json& j);
};

// What the counters of counting cache `cache` say: `words`, its counters'
// mapping as read from the target (stripes summed: CounterLayout::sums);
// value sites' targets less `bias`, the module's load bias.
ModuleCounts read_counts(const CodeCache& cache, std::span<const uint64_t> words, uint64_t bias = 0);

}  // namespace dyni::jit
