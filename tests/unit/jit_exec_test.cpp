// The whole jit on real compiled functions of this binary, executed: a code
// cache is built (layout, relocation, redirected calls, verifier on) into an
// mmap'd buffer near the binary, and every copy must compute what its
// original computes, for many inputs and many layouts — original order,
// random orders, random blocks left in the original code, and layouts from
// random profiles.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <random>

#include "common/cpu_features.h"
#include "jit/block_layout.h"
#include "jit/code_cache.h"
#include "jit/counting.h"
#include "jit/decoder.h"
#include "jit/pipeline.h"
#include "jit/verifier.h"
#include "tests/unit/this_binary.h"

extern "C" {
int jit_switch(int, int);
long jit_loop(const int*, int);
long jit_fib(int);
long jit_varargs(int, ...);
int jit_setjmp(int);
long jit_tail_a(long);
int jit_computed_goto(const unsigned char*, int);
long jit_switch_loop(const unsigned char*, int);
}

namespace dyni::jit {
namespace {

constexpr std::size_t kBufferSize = 1 << 20;

enum class Mode { Original, Shuffled, ShuffledLeavingBlocks, RandomProfile };

class CacheInProcess : public ThisBinary {
 protected:
  void SetUp() override {
    ThisBinary::SetUp();
    if (HasFatalFailure()) return;
    bias = reinterpret_cast<uint64_t>(&jit_loop) - named("jit_loop")->addr;
    uint64_t hint = (reinterpret_cast<uint64_t>(&jit_loop) + (64 << 20)) & ~0xfffull;
    for (int i = 0; i < 64 && buffer == MAP_FAILED; ++i, hint += 1 << 20)
      buffer = mmap(reinterpret_cast<void*>(hint), kBufferSize, PROT_READ | PROT_WRITE | PROT_EXEC,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_NE(buffer, MAP_FAILED);
  }
  void TearDown() override {
    if (buffer != MAP_FAILED) munmap(buffer, kBufferSize);
  }

  BlockLayout layout_for(const FunctionCfg& cfg, Mode mode, uint64_t seed) {
    switch (mode) {
      case Mode::Original: return original_layout(cfg);
      case Mode::Shuffled: return shuffled_layout(cfg, seed, false);
      case Mode::ShuffledLeavingBlocks: return shuffled_layout(cfg, seed, true);
      case Mode::RandomProfile: break;
    }
    std::mt19937_64 rng(seed);
    std::vector<BlockCount> counts(cfg.blocks.size());
    for (BlockCount& c : counts) c.samples = rng() % 3 == 0 ? 0 : rng() % 500;
    LayoutOptions options;
    options.cold = ColdBlocks::LeaveInOriginal;
    options.cold_fraction = 1.0;  // leave every unsampled, flowless block behind
    return layout_blocks(cfg, counts, options);
  }

  // Builds a cache of `names` into the buffer; returns the cache. A counting
  // cache's counters go in the buffer's second half, zeroed.
  CodeCache build(const std::vector<std::string>& names, Mode mode, uint64_t seed, CacheOptions options = {}) {
    cfgs.clear();
    std::vector<HotCode> hot;
    for (const std::string& name : names) {
      const elf::Function* fn = named(name);
      EXPECT_NE(fn, nullptr) << name;
      auto cfg = build_cfg(*fn, *image);
      EXPECT_TRUE(cfg) << name << ": " << cfg.error().message();
      cfgs[name] = std::make_unique<FunctionCfg>(std::move(*cfg));
    }
    for (const std::string& name : names) hot.push_back({cfgs[name].get(), layout_for(*cfgs[name], mode, seed)});
    // PC-relative code is the same at any bias: emit in link-time numbering.
    if (options.counting) options.counters_base = reinterpret_cast<uint64_t>(counters()) - bias;
    std::memset(counters(), 0, kBufferSize / 2);
    auto cache = build_code_cache(hot, reinterpret_cast<uint64_t>(buffer) - bias, {}, options);
    EXPECT_TRUE(cache) << cache.error().message();
    for (const CacheRejection& r : cache->rejected) ADD_FAILURE() << std::hex << r.function << ": " << r.reason;
    EXPECT_LE(cache->bytes.size(), kBufferSize / 2);
    std::vector<uint8_t> loaded = cache->loaded_at(bias);
    std::memcpy(buffer, loaded.data(), loaded.size());
    std::vector<uint8_t> table = cache->counter_layout().table();  // striped counters: as dynid writes it
    EXPECT_LE(cache->counter_layout().bytes(), kBufferSize / 2);
    std::memcpy(counters(), table.data(), table.size());
    __builtin___clear_cache(static_cast<char*>(buffer), static_cast<char*>(buffer) + cache->bytes.size());
    return std::move(*cache);
  }


 public:
  template <typename Fn>
  Fn copy(const CodeCache& cache, const std::string& name) {
    for (const CachedFunction& f : cache.functions)
      if (f.original_entry == named(name)->addr) return reinterpret_cast<Fn>(f.code.base + bias);
    ADD_FAILURE() << name << " is not in the cache";
    return nullptr;
  }

 protected:
  void expect_counts_add_up(uint32_t stripes);
  void expect_same_counts(const std::map<uint64_t, FunctionCounts>& every_site,
                          const std::map<uint64_t, FunctionCounts>& fewest_sites);
  uint64_t* counters() { return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(buffer) + kBufferSize / 2); }

  uint64_t bias = 0;
  void* buffer = MAP_FAILED;
  std::map<std::string, std::unique_ptr<FunctionCfg>> cfgs;
};

const std::vector<std::string> kShapes = {"jit_loop", "jit_switch", "jit_fib", "jit_varargs",
                                          "jit_setjmp", "jit_bail", "jit_tail_a", "jit_tail_b"};

void expect_same_results(const CodeCache& cache, CacheInProcess& t, const std::string& what) {
  auto loop = t.copy<long (*)(const int*, int)>(cache, "jit_loop");
  auto sw = t.copy<int (*)(int, int)>(cache, "jit_switch");
  auto fib = t.copy<long (*)(int)>(cache, "jit_fib");
  auto va = t.copy<long (*)(int, ...)>(cache, "jit_varargs");
  auto sj = t.copy<int (*)(int)>(cache, "jit_setjmp");
  auto tail = t.copy<long (*)(long)>(cache, "jit_tail_a");
  ASSERT_TRUE(loop && sw && fib && va && sj && tail);
  std::mt19937 rng(11);
  std::vector<int> v(300);
  for (int& x : v) x = static_cast<int>(rng() % 2001) - 1000;
  for (int n : {0, 1, 2, 3, 4, 5, 17, 100, 299, 300}) EXPECT_EQ(loop(v.data(), n), jit_loop(v.data(), n)) << what;
  for (int x = -3; x < 12; ++x)
    for (int y : {-1000, -7, 0, 1, 13, 99999}) EXPECT_EQ(sw(x, y), jit_switch(x, y)) << what;
  for (int n : {0, 1, 2, 10, 20}) EXPECT_EQ(fib(n), jit_fib(n)) << what;
  EXPECT_EQ(va(0), jit_varargs(0)) << what;
  EXPECT_EQ(va(3, 1, -2, 3), jit_varargs(3, 1, -2, 3)) << what;
  EXPECT_EQ(va(7, 9, 8, 7, 6, 5, 4, 3), jit_varargs(7, 9, 8, 7, 6, 5, 4, 3)) << what;
  for (int x : {-25, -13, -9, -1, 0, 1, 42}) EXPECT_EQ(sj(x), jit_setjmp(x)) << what << " x=" << x;
  for (long x : {-5L, -4L, 0L, 1L, 2L, 1000001L}) EXPECT_EQ(tail(x), jit_tail_a(x)) << what;
}

TEST_F(CacheInProcess, EveryShapeComputesTheSameUnderEveryLayout) {
  for (Mode mode : {Mode::Original, Mode::Shuffled, Mode::ShuffledLeavingBlocks, Mode::RandomProfile}) {
    for (uint64_t seed = 1; seed <= (mode == Mode::Original ? 1u : 12u); ++seed) {
      CodeCache cache = build(kShapes, mode, seed);
      expect_same_results(cache, *this, "mode " + std::to_string(static_cast<int>(mode)) + " seed " +
                                            std::to_string(seed));
      if (HasFailure()) return;
    }
  }
}

// Counting copies of real compiled code compute the same, and what they
// count adds up: every edge into a block sums to its count, and so does
// every edge out of a block that ends in a branch or falls through (but for
// setjmp's two returns).
TEST_F(CacheInProcess, CountingCopiesComputeTheSameAndTheirCountsAddUp) {
  for (uint32_t stripes : cpu_has_rdpid() ? std::vector<uint32_t>{0, 2} : std::vector<uint32_t>{0})
    expect_counts_add_up(stripes);
}

// The fewest counters tell exactly what a counter at every block tells,
// block by block and edge by edge, on real compiled code (setjmp's two
// returns and longjmp out of jit_bail break flow conservation: left out).
// The near-linear search keeps no more sites than the one that propagates
// once per site tried.
TEST_F(CacheInProcess, FewestCountersTellWhatEveryCounterTells) {
  const CounterSet sets[3] = {CounterSet::Every, CounterSet::Fewest, CounterSet::FewestByPropagation};
  std::map<uint64_t, FunctionCounts> counted[3];
  std::size_t sites[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    CacheOptions options;
    options.counting = true;
    options.counter_set = sets[k];
    CodeCache cache = build(kShapes, Mode::Original, 0, options);
    ASSERT_EQ(cache.functions.size(), kShapes.size());
    expect_same_results(cache, *this, k == 0 ? "every" : k == 1 ? "fewest" : "fewest by propagation");
    std::vector<uint64_t> values = cache.counter_layout().sums({counters(), cache.counter_layout().bytes() / 8});
    for (const CachedFunction& f : cache.functions) {
      const FunctionCfg& cfg = *std::find_if(cfgs.begin(), cfgs.end(), [&](const auto& c) {
                                  return c.second->start == f.original_entry;
                                })->second;
      counted[k][f.original_entry] = counts_from(cfg, site_counts(cfg.start, f.counters, values));
      sites[k] += f.counters.size();
    }
  }
  EXPECT_LT(sites[1], sites[0]) << "fewest " << sites[1] << " of " << sites[0];  // 42 of 56 (gcc -O2)
  EXPECT_LE(sites[1], sites[2]) << "the near-linear search kept more sites than propagation";
  for (int k = 1; k < 3; ++k) {
    SCOPED_TRACE(k == 1 ? "fewest" : "fewest by propagation");
    expect_same_counts(counted[0], counted[k]);
  }
}

// Block and edge counts of `every` and `fewest` agree, function by function.
void CacheInProcess::expect_same_counts(const std::map<uint64_t, FunctionCounts>& every_site,
                                        const std::map<uint64_t, FunctionCounts>& fewest_sites) {
  for (const auto& [entry, every] : every_site) {
    if (entry == named("jit_setjmp")->addr || entry == named("jit_bail")->addr) continue;
    const FunctionCounts& fewest = fewest_sites.at(entry);
    EXPECT_EQ(fewest.blocks, every.blocks) << std::hex << entry;
    ASSERT_EQ(fewest.edges.size(), every.edges.size());
    for (std::size_t e = 0; e < every.edges.size(); ++e)
      EXPECT_EQ(fewest.edges[e].weight, every.edges[e].weight) << std::hex << entry << " edge " << every.edges[e].from
                                                               << " -> " << every.edges[e].to;
  }
}

void CacheInProcess::expect_counts_add_up(uint32_t stripes) {
  SCOPED_TRACE(stripes ? "striped" : "shared");
  CacheOptions options;
  options.counting = true;
  options.counter_stripes = stripes;
  CodeCache cache = build(kShapes, Mode::Original, 0, options);
  ASSERT_EQ(cache.functions.size(), kShapes.size());
  ASSERT_GT(cache.counter_slots, 0u);
  expect_same_results(cache, *this, "counting");
  std::vector<uint64_t> values = cache.counter_layout().sums({counters(), cache.counter_layout().bytes() / 8});
  for (const CachedFunction& f : cache.functions) {
    const FunctionCfg& cfg = *std::find_if(cfgs.begin(), cfgs.end(), [&](const auto& c) {
                                return c.second->start == f.original_entry;
                              })->second;
    FunctionCounts counts = counts_from(cfg, site_counts(cfg.start, f.counters, values));
    // setjmp returns twice into a block counted once; longjmp leaves jit_bail mid-block.
    if (f.original_entry == named("jit_setjmp")->addr || f.original_entry == named("jit_bail")->addr) continue;
    if (f.original_entry == named("jit_loop")->addr) {
      EXPECT_EQ(counts.blocks[0], 10u) << "one per call";
    }
    if (f.original_entry == named("jit_switch")->addr) {
      EXPECT_EQ(counts.blocks[0], 90u) << "one per call";
    }
    std::vector<double> in(cfg.blocks.size(), 0), out(cfg.blocks.size(), 0);
    std::vector<bool> from_table(cfg.blocks.size(), false);
    for (const EdgeCount& e : counts.edges) in[e.to] += e.weight, out[e.from] += e.weight;
    for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
      const Block& b = cfg.blocks[k];
      const Instruction& last = cfg.instructions[b.first + b.count - 1];
      if (last.flow == Flow::IndirectBranch)
        for (uint64_t s : b.successors) from_table[cfg.block_at(s) - cfg.blocks.data()] = true;
    }
    for (std::size_t k = 1; k < cfg.blocks.size(); ++k)
      if (!from_table[k] && in[k] > 0) {
        EXPECT_EQ(in[k], counts.blocks[k]) << std::hex << cfg.blocks[k].start;
      }
    for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
      const Block& b = cfg.blocks[k];
      const Flow last = cfg.instructions[b.first + b.count - 1].flow;
      if (!b.exits && last != Flow::IndirectBranch) {
        EXPECT_EQ(out[k], counts.blocks[k]) << std::hex << b.start;
      }
    }
  }
}

// A direct branch in `f`'s copy to `to` (an original address, or a cache address).
bool branches_to(const CachedFunction& f, uint64_t to) {
  for (std::size_t k = 0; k < f.code.translation.size(); ++k) {
    uint64_t at = f.code.translation[k].new_addr;
    auto in = decode_one(std::span(f.code.bytes).subspan(at - f.code.base), at);
    if (in && in->has_target && in->target == to) return true;
  }
  return false;
}

TEST_F(CacheInProcess, CallsBetweenHotFunctionsGoStraightToTheCopies) {
  CodeCache cache = build({"jit_fib", "jit_tail_a", "jit_tail_b"}, Mode::Original, 0);
  std::map<uint64_t, const CachedFunction*> by_entry;
  for (const CachedFunction& f : cache.functions) by_entry[f.original_entry] = &f;
  const CachedFunction& fib = *by_entry.at(named("jit_fib")->addr);
  const CachedFunction& tail_a = *by_entry.at(named("jit_tail_a")->addr);
  const CachedFunction& tail_b = *by_entry.at(named("jit_tail_b")->addr);
  EXPECT_TRUE(branches_to(fib, fib.code.base)) << "recursion should call the copy";
  EXPECT_FALSE(branches_to(fib, named("jit_fib")->addr)) << "recursion still calls the original";
  EXPECT_TRUE(branches_to(tail_a, tail_b.code.base)) << "tail call should jump to the copy";
  EXPECT_FALSE(branches_to(tail_a, named("jit_tail_b")->addr));
  for (const CachedFunction& f : cache.functions) {
    ASSERT_EQ(f.patch.entries.size(), 1u);
    const EntryPatch& p = f.patch.entries[0];
    EXPECT_EQ(p.replacement[0], 0xe9);  // jmp rel32 to the copy
    int32_t rel;
    std::memcpy(&rel, p.replacement.data() + 1, 4);
    // After the kept instructions, landing after their copies, which are as long here (no rip-relative one).
    const FunctionCfg* cfg = nullptr;
    for (const auto& [name, c] : cfgs)
      if (c->start == f.original_entry) cfg = c.get();
    ASSERT_TRUE(cfg);
    auto spot = entry_spot(*cfg);
    ASSERT_TRUE(spot);
    EXPECT_EQ(p.addr, spot->addr);
    const uint64_t kept_bytes = spot->kept ? spot->at - f.original_entry : 0;  // an endbr64 alone is run again
    EXPECT_EQ(p.addr + 5 + static_cast<int64_t>(rel), f.code.base + kept_bytes) << std::hex << p.addr;
    EXPECT_EQ(0, std::memcmp(f.code.bytes.data(), reinterpret_cast<const void*>(f.original_entry + bias), kept_bytes));
    EXPECT_EQ(0, std::memcmp(p.original.data(), reinterpret_cast<const void*>(p.addr + bias), 5));
  }
}

// A copied switch dispatches through a table of its own to the copies of its
// cases, not back to the original code; the original table is untouched.
TEST_F(CacheInProcess, ASwitchCopyDispatchesThroughItsRebuiltTable) {
  const elf::Function* fn = named("jit_switch");
  ASSERT_NE(fn, nullptr);
  CodeCache cache = build({"jit_switch"}, Mode::Original, 0);
  ASSERT_EQ(cache.functions.size(), 1u);
  const EmittedCode& code = cache.functions[0].code;
  ASSERT_EQ(cfgs["jit_switch"]->tables.size(), 1u);
  const JumpTable& original = cfgs["jit_switch"]->tables[0];
  ASSERT_TRUE(original.rebuildable) << "jit_switch's table is in the usual guarded form";
  ASSERT_EQ(code.tables.size(), 1u);
  const RebuiltTable& t = code.tables[0];
  EXPECT_EQ(t.original, original.table_addr);
  EXPECT_GE(t.addr, code.base + code.code_size);
  ASSERT_EQ(t.targets.size(), original.targets.size());
  for (uint64_t target : t.targets)
    EXPECT_TRUE(target >= code.base && target < code.base + code.code_size) << "an entry still leaves the cache";
  // The table in the running binary still holds what the file says.
  for (std::size_t k = 0; k < original.targets.size(); ++k) {
    int32_t entry;
    std::memcpy(&entry, reinterpret_cast<const void*>(original.table_addr + bias + 4 * k), 4);
    EXPECT_EQ(original.table_addr + static_cast<int64_t>(entry), original.targets[k]);
  }
  auto sw = copy<int (*)(int, int)>(cache, "jit_switch");
  for (int x = -3; x < 12; ++x)
    for (int y : {-1000, -7, 0, 1, 13, 99999}) EXPECT_EQ(sw(x, y), jit_switch(x, y)) << x << " " << y;
  // The verifier checks every entry and the load: each mutation is caught.
  ASSERT_TRUE(verify(*cfgs["jit_switch"], code, cache.redirects));
  EmittedCode entry = code;
  entry.bytes[t.addr - code.base + 4] ^= 0x10;
  auto bad_entry = verify(*cfgs["jit_switch"], entry, cache.redirects);
  ASSERT_FALSE(bad_entry);
  EXPECT_NE(bad_entry.error().message().find("misses its image"), std::string::npos) << bad_entry.error().message();
  EmittedCode load = code;
  load.tables[0].addr += 4;  // the load's displacement no longer matches
  auto bad_load = verify(*cfgs["jit_switch"], load, cache.redirects);
  ASSERT_FALSE(bad_load);
  EXPECT_NE(bad_load.error().message().find("does not read the rebuilt table"), std::string::npos)
      << bad_load.error().message();
}

// Bytecode programs for the loops below: every opcode, in many orders.
std::vector<std::vector<unsigned char>> programs() {
  std::vector<std::vector<unsigned char>> out;
  unsigned state = 12345;
  for (int p = 0; p < 40; ++p) {
    std::vector<unsigned char> ops(p * 3);
    for (unsigned char& op : ops) op = static_cast<unsigned char>((state = state * 1103515245 + 12345) >> 16);
    out.push_back(std::move(ops));
  }
  return out;
}

// Every table of `name` is rebuilt and every entry of the copy's tables
// stays in the cache (their targets were all copied).
void expect_tables_rebuilt(const FunctionCfg& cfg, const EmittedCode& code, unsigned entry_size) {
  ASSERT_FALSE(cfg.tables.empty());
  for (const JumpTable& t : cfg.tables) {
    EXPECT_TRUE(t.proven && t.rebuildable) << std::hex << t.jump_addr;
    EXPECT_EQ(t.entry_size, entry_size);
  }
  ASSERT_EQ(code.tables.size(), cfg.tables.size());
  for (const RebuiltTable& t : code.tables)
    for (uint64_t target : t.targets)
      EXPECT_TRUE(target >= code.base && target < code.base + code.code_size) << "an entry still leaves the cache";
}

TEST_F(CacheInProcess, ASwitchLoopCopyStaysInTheCache) {
  for (Mode mode : {Mode::Original, Mode::Shuffled}) {
    CodeCache cache = build({"jit_switch_loop"}, mode, 7);
    ASSERT_EQ(cache.functions.size(), 1u);
    expect_tables_rebuilt(*cfgs["jit_switch_loop"], cache.functions[0].code, 4);
    auto loop = copy<long (*)(const unsigned char*, int)>(cache, "jit_switch_loop");
    for (const auto& ops : programs())
      EXPECT_EQ(loop(ops.data(), static_cast<int>(ops.size())), jit_switch_loop(ops.data(), static_cast<int>(ops.size())));
  }
}

// A PIE's computed goto: the table is in .data.rel.ro, its entries filled
// by the loader (R_X86_64_RELATIVE). The rebuilt table's entries are
// absolute: written with this process's bias added (CodeCache::loaded_at).
TEST_F(CacheInProcess, AComputedGotoLoopCopyDispatchesThroughItsRelocatedTable) {
  for (Mode mode : {Mode::Original, Mode::Shuffled}) {
    CodeCache cache = build({"jit_computed_goto"}, mode, 3);
    ASSERT_EQ(cache.functions.size(), 1u);
    const EmittedCode& code = cache.functions[0].code;
    expect_tables_rebuilt(*cfgs["jit_computed_goto"], code, 8);
    // Every dispatch reads the one table (labels[4]): one rebuilt table serves them all.
    ASSERT_GE(code.tables.size(), 2u);
    for (const RebuiltTable& t : code.tables) EXPECT_EQ(t.addr, code.tables[0].addr);
    EXPECT_EQ(code.absolute_slots.size(), 4u);
    auto run = copy<int (*)(const unsigned char*, int)>(cache, "jit_computed_goto");
    for (const auto& ops : programs())
      EXPECT_EQ(run(ops.data(), static_cast<int>(ops.size())), jit_computed_goto(ops.data(), static_cast<int>(ops.size())));
    // An absolute entry the injector would not relocate is caught.
    EmittedCode unlisted = code;
    unlisted.absolute_slots.pop_back();
    auto bad = verify(*cfgs["jit_computed_goto"], unlisted, cache.redirects);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message().find("misses its image"), std::string::npos) << bad.error().message();
    // A slot the injector would relocate that is no table entry (here: code) is caught.
    EmittedCode stray = code;
    stray.absolute_slots.insert(stray.absolute_slots.begin(), code.base);
    auto wrong = verify(*cfgs["jit_computed_goto"], stray, cache.redirects);
    ASSERT_FALSE(wrong);
    EXPECT_NE(wrong.error().message().find("no rebuilt table's entry"), std::string::npos) << wrong.error().message();
  }
}

}  // namespace
}  // namespace dyni::jit

namespace dyni::jit {
namespace {

// The whole pipeline on this binary's functions: each copy's unwind rows give
// every cache instruction its original's frame (I6), under a shuffled layout.
TEST_F(CacheInProcess, CopiesHaveTheirOriginalsFrames) {
  ModuleInput input{table.get(), image.get(), nullptr, {}, reinterpret_cast<uint64_t>(buffer) - bias, {}, {}, 0};
  use_unwind_info(input, *file);
  for (const std::string& name : kShapes) input.hot.push_back(named(name)->addr);
  JitOptions options;
  options.layout.shuffle_seed = 99;
  options.layout.cold = ColdBlocks::LeaveInOriginal;
  auto plan = optimize_module(input, options);
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->cache.functions.size(), kShapes.size());
  std::size_t distinct_frames = 0;
  for (const CachedFunction& f : plan->cache.functions) {
    const auto& original = plan->original_unwind.at(f.original_entry);
    ASSERT_FALSE(f.unwind.empty());
    std::vector<elf::CfiRow> rows;
    for (const UnwindRow& r : f.unwind) rows.push_back({r.cache_addr, r.state});
    const elf::Function* fn = table->find(f.original_entry);
    for (std::size_t k = 0; k < f.code.translation.size(); ++k) {
      const TranslationEntry& t = f.code.translation[k];
      auto want = cache_frame(original, fn->addr + fn->size, f.code, k);
      auto got = elf::cfi_state_at(rows, f.code.base + f.code.bytes.size(), t.new_addr);
      ASSERT_TRUE(want && got);
      EXPECT_TRUE(*want == *got) << std::hex << t.new_addr << " ← " << t.original_addr;
    }
    distinct_frames = std::max(distinct_frames, f.unwind.size());
  }
  EXPECT_GE(distinct_frames, 3u) << "some shape should push and pop (several frames)";
}

}  // namespace
}  // namespace dyni::jit
