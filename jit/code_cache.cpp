// Packing hot functions into one cache: addresses first (sizes are known
// before addresses), then redirects, then bytes, checks and patches.
#include "jit/code_cache.h"

#include <fmt/format.h>

#include "jit/verifier.h"

namespace dyni::jit {
namespace {

constexpr int64_t kReach = INT32_MAX - (64ll << 20);  // keep a margin for the cache's own size

bool reachable(uint64_t from, uint64_t to) {
  int64_t d = static_cast<int64_t>(to - from);
  return d > -kReach && d < kReach;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string describe(const FunctionCfg& cfg, const std::string& why) {
  return fmt::format("{:#x}: {}", cfg.start, why);
}

}  // namespace

std::vector<TranslationEntry> CodeCache::translation() const {
  std::vector<TranslationEntry> all;
  for (const CachedFunction& f : functions) all.insert(all.end(), f.code.translation.begin(), f.code.translation.end());
  return all;
}

Result<CodeCache> build_code_cache(const std::vector<HotCode>& functions, uint64_t base, const Redirects& plt,
                                   bool verify) {
  CodeCache cache;
  cache.base = base;
  std::vector<const HotCode*> kept;
  std::vector<uint64_t> entries;
  uint64_t at = base;
  for (const HotCode& f : functions) {
    at = align_up(at, kFunctionAlignment);
    kept.push_back(&f);
    entries.push_back(at);
    cache.redirects.to[f.cfg->start] = at;
    at += emitted_size(*f.cfg, f.layout);
  }
  for (const auto& [stub, callee] : plt.to) {
    auto copy = cache.redirects.to.find(callee);
    uint64_t to = copy != cache.redirects.to.end() ? copy->second : callee;
    if (reachable(base, to) && reachable(at, to)) cache.redirects.to.emplace(stub, to);
  }
  cache.bytes.assign(at - base, kPadding);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const FunctionCfg& cfg = *kept[i]->cfg;
    auto code = emit_function(cfg, kept[i]->layout, entries[i], cache.redirects);
    if (!code) return fail(describe(cfg, code.error().message()));
    if (verify)
      if (auto checked = jit::verify(cfg, *code, cache.redirects); !checked)
        return fail(describe(cfg, checked.error().message()));
    std::copy(code->bytes.begin(), code->bytes.end(), cache.bytes.begin() + (entries[i] - base));
    auto patch = kept[i]->shares_entry_bytes ? fail(fmt::format("another entry point in the entry bytes at {:#x}", cfg.start))
                                             : plan_patch(cfg, entries[i]);
    cache.functions.push_back({cfg.start, std::move(*code), patch ? std::move(*patch) : FunctionPatch{cfg.start, {}},
                               patch ? "" : patch.error().message(), {}});
  }
  return cache;
}

}  // namespace dyni::jit
