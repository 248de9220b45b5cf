// Small assembled modules run through the jit and executed: the functions of
// an assembly text placed in executable memory (their "original" code), a
// code cache for them built right after it, the entry patches applied or
// taken back; calls run in a forked child under a time limit, so a copy that
// hangs or crashes is a test result, not the end of the test run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jit/block_layout.h"
#include "jit/cfg.h"
#include "jit/code_cache.h"
#include "jit/module_image.h"

namespace dyni::test {

enum class Outcome { Returned, Crashed, Hung };

struct Run {
  Outcome outcome = Outcome::Crashed;
  int signal = 0;             // what ended the child, when it did not return
  std::vector<long> results;  // one per input, when Returned
};

using Inputs = std::vector<std::pair<long, long>>;

// Calls `fn(a, b)` (a `long (*)(long, long)`) for every input, in a child
// process killed after `seconds`.
Run run_isolated(uint64_t fn, const Inputs& inputs, unsigned seconds = 2);

std::string describe(const Run& run);

class AsmModule {
 public:
  static constexpr std::size_t kArea = 1 << 16;  // the original code, then the cache, then counters

  // `names`: the functions of `text`, in address order; each ends where the
  // next begins, the last at the label `end`. Fails the test on a bad text.
  static std::unique_ptr<AsmModule> load(const std::string& text, const std::vector<std::string>& names);
  ~AsmModule();

  uint64_t addr(const std::string& name) const;
  const jit::FunctionCfg& cfg(const std::string& name) const { return *cfgs_.at(name); }
  uint64_t cache_base() const { return original_ + kArea; }
  // A counting cache's counters: shared with the children that run_isolated
  // forks, so what a copy counts there is read here.
  uint64_t counters_base() const { return original_ + 2 * kArea; }
  std::span<uint64_t> counters() const { return {reinterpret_cast<uint64_t*>(counters_base()), kArea / 8}; }

  // Builds the cache of `hot` (in this order) with `layout_of` each, writes it
  // after the original code and applies its entry patches. With
  // options.counting, the counters go in counters(), zeroed. `promotions`:
  // indirect calls to promote (promotion.h), for every function.
  jit::CodeCache build(const std::vector<std::string>& hot,
                       const std::function<jit::BlockLayout(const jit::FunctionCfg&)>& layout_of,
                       jit::CacheOptions options = {}, const jit::Promotions& promotions = {});
  void unpatch();  // the original bytes back under every entry patch
  // Writes `bytes` at `addr` in the original code or the cache (as dynid
  // writes a live cache), and flushes the instruction cache.
  void write(uint64_t addr, std::span<const uint8_t> bytes);

  // The copy in `cache` of the function at `original`, or 0.
  static uint64_t copy_of(const jit::CodeCache& cache, uint64_t original);

 private:
  uint8_t* area_ = nullptr;
  uint64_t original_ = 0;
  std::vector<uint8_t> bytes_;
  jit::ModuleImage image_;
  std::map<std::string, uint64_t> addr_;
  std::map<std::string, std::unique_ptr<jit::FunctionCfg>> cfgs_;
  std::vector<jit::EntryPatch> applied_;
};

}  // namespace dyni::test
