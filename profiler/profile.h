// A target's profile as jit/ will consume it: per module and function, sample
// counts and a per-instruction histogram (by offset into the function), plus
// caller→callee weights from callchains. Built from samples by `add`.
//
// Block and edge frequencies are derived from this by the jit's CFG (issue 4);
// with IP sampling only, a block with no samples is *unknown*, not cold.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jit/module_profile.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"

namespace dyni::profiler {

// Identifies a function: (module index, link-time start address).
using FunctionKey = std::pair<int, uint64_t>;

struct FunctionProfile {
  FunctionKey key;
  const elf::Function* function = nullptr;
  uint64_t samples = 0;
  std::map<uint64_t, uint64_t> by_offset;  // offset in function → samples
  // From LBR branch stacks (hosts with a PMU), offsets in the function:
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> branches;  // taken branch (from, to) → count
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> traces;    // straight-line run (start, end) → count
};

struct HotFunction {
  std::string module;  // path
  std::string name;    // demangled
  uint64_t addr = 0;   // link-time
  uint64_t samples = 0;
  double percent = 0;  // of all samples
};

class Profile {
 public:
  explicit Profile(const Symbolizer* symbolizer) : symbolizer_(symbolizer) {}

  void add(const Sample& sample);

  uint64_t total() const { return total_; }
  uint64_t outside_modules() const { return outside_modules_; }  // JIT/anonymous code, vdso
  uint64_t outside_functions() const { return outside_functions_; }
  const std::map<FunctionKey, FunctionProfile>& functions() const { return functions_; }
  const std::map<std::pair<FunctionKey, FunctionKey>, uint64_t>& calls() const { return calls_; }

  // The `n` hottest functions, hottest first.
  std::vector<HotFunction> top(std::size_t n) const;
  // The smallest set of hottest functions that covers `fraction` of samples.
  std::vector<FunctionKey> hot_set(double fraction) const;
  nlohmann::json to_json(std::size_t top_n) const;
  // What the jit needs of module `module` (an index into the symbolizer's modules).
  jit::ModuleProfile module_profile(int module) const;
  // The module with the most samples, or -1.
  int hottest_module() const;

 private:
  const Symbolizer* symbolizer_;
  uint64_t total_ = 0;
  uint64_t outside_modules_ = 0;
  uint64_t outside_functions_ = 0;
  void add_branches(const Sample& sample);
  FunctionProfile& profile_of(const Location& loc);

  std::map<FunctionKey, FunctionProfile> functions_;
  std::map<std::pair<FunctionKey, FunctionKey>, uint64_t> calls_;
};

}  // namespace dyni::profiler
