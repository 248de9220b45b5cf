// The profile of one module as the jit consumes it (the profiler produces it,
// profiler/profile.h; `dyni-record` saves it, `dyni-scan --profile` reads it):
// per function, samples and a per-offset histogram; caller→callee weights.
// Addresses are the module's link-time addresses.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "jit/function_order.h"

namespace dyni::jit {

struct FunctionSamples {
  uint64_t samples = 0;
  std::map<uint64_t, uint64_t> by_offset;  // offset from the function's start → samples
  // LBR (hosts with a PMU), offsets from the function's start:
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> branches;  // taken branch (from, to) → count
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> traces;    // straight-line run (start, end) → count
};

struct ModuleProfile {
  std::string module;      // path
  uint64_t total_samples = 0;  // in the module
  std::map<uint64_t, FunctionSamples> functions;  // by link-time start address
  std::vector<CallEdge> calls;                    // caller and callee by start address

  // The smallest set of hottest functions covering `fraction` of the module's samples.
  std::vector<uint64_t> hot_set(double fraction) const;

  nlohmann::json to_json() const;
  // Checks what it reads: a profile file is input like any other.
  static Result<ModuleProfile> from_json(const nlohmann::json& j);
};

}  // namespace dyni::jit
