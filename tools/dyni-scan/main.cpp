// dyni-scan ELF-FILE [--profile FILE [--leaving]] [--shuffle SEED] [--leave-cold] [--counting [--stripes N] [--sites every|fewest|propagation]]
//           [--counts FILE [--loop-align 0|16|32|64]]
//
// Runs the whole jit (jit/pipeline.h) over a binary: every function as if all
// were hot, or the functions of a recorded profile (dyni-record) laid out by
// it. Prints the functions and bytes accepted, the rejections by reason, the
// shares of sampled CPU accepted and staying in the cache (with a profile;
// --leaving lists the sampled copies that leave it), the cache built, and the
// verifier's verdict on every function: the copies it rejected while the
// cache was built (those functions stay in the original code) and a second
// check of every copy kept, frames included. Exits 1 on any verifier failure
// or when the module fails as a whole.
// --shuffle lays every function out in a random block order (with
// --leave-cold, leaving a random quarter of blocks behind): a stress test of
// the emitter and verifier on real code. --counting builds counting copies
// (jit/counting.h) instead and prints their counter sites (--stripes N: the
// striped form, for N CPUs; shared slots by default). --counts FILE lays
// the functions that ran out by those counts (dyni-inject's DYNI_COUNTS_FILE)
// and prints what they show of the original code and of that layout
// (jit/layout_metrics.h), with its hot loop tops on N-byte boundaries where
// --loop-align N is given (jit/block_layout.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <string>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/block_profile.h"
#include "jit/cfg.h"
#include "jit/counting.h"
#include "jit/entry_pads.h"
#include "jit/layout_metrics.h"
#include "jit/module_counts.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"
#include "jit/verifier.h"

#include <fmt/format.h>

namespace {

using namespace dyni;

struct Args {
  std::string elf, profile;
  uint64_t shuffle = 0;
  bool leave_cold = false;
  bool leaving = false;  // --leaving: list the sampled functions whose copies leave the cache
  bool counting = false;
  uint32_t stripes = 0;  // --stripes N: striped counters for N CPUs
  // --sites: a counter at every block, the fewest (default), or the fewest
  // found by propagating once per site (the slow search, to compare).
  jit::CounterSet sites = jit::CounterSet::Fewest;
  std::string counts;  // --counts FILE: lay out by these counts and say what they show
  unsigned loop_alignment = jit::LayoutOptions{}.loop_alignment;  // --loop-align N (0: none; jit/block_layout.h)
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--profile" && i + 1 < argc) a.profile = argv[++i];
    else if (s == "--shuffle" && i + 1 < argc) a.shuffle = std::strtoull(argv[++i], nullptr, 0);
    else if (s == "--leave-cold") a.leave_cold = true;
    else if (s == "--leaving") a.leaving = true;
    else if (s == "--counting") a.counting = true;
    else if (s == "--stripes" && i + 1 < argc) a.stripes = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 0));
    else if (s == "--sites" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v == "every") a.sites = jit::CounterSet::Every;
      else if (v == "fewest") a.sites = jit::CounterSet::Fewest;
      else if (v == "propagation") a.sites = jit::CounterSet::FewestByPropagation;
      else return false;
    }
    else if (s == "--counts" && i + 1 < argc) a.counts = argv[++i];
    else if (s == "--loop-align" && i + 1 < argc) a.loop_alignment = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (!s.starts_with("-") && a.elf.empty()) a.elf = s;
    else return false;
  }
  return !a.elf.empty();
}

// A profile or counts file: T::from_json of the JSON in `path`.
template <class T>
Result<T> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(path + ": cannot open");
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return fail(path + ": not JSON");
  return T::from_json(j);
}

double percent(uint64_t part, uint64_t whole) { return whole ? 100.0 * part / whole : 0.0; }

void print_rejections(const jit::ModulePlan& plan) {
  std::map<std::string, std::tuple<std::size_t, uint64_t, std::string>> by_kind;  // n, samples, example
  for (const jit::Rejection& r : plan.rejected) {
    auto& [n, samples, example] = by_kind[jit::reason_kind(r.reason)];
    if (n++ == 0) example = r.name + ": " + r.reason;
    samples += r.samples;
  }
  for (const auto& [kind, v] : by_kind)
    std::printf("rejected: %-40s %6zu functions %7llu samples  e.g. %s\n", kind.c_str(), std::get<0>(v),
                static_cast<unsigned long long>(std::get<1>(v)), std::get<2>(v).substr(0, 100).c_str());
}

// I6 for unwinding: at every cache instruction, the copy's row is the row of
// the original instruction it stands for.
Status check_unwind(const jit::ModulePlan& plan, const jit::CachedFunction& f, const jit::FunctionCfg& cfg) {
  auto original = plan.original_unwind.find(f.original_entry);
  if (original == plan.original_unwind.end()) return ok();
  std::vector<elf::CfiRow> cache_rows;
  for (const jit::UnwindRow& r : f.unwind) cache_rows.push_back({r.cache_addr, r.state});
  uint64_t cache_end = f.code.base + f.code.bytes.size();
  for (std::size_t k = 0; k < f.code.translation.size(); ++k) {
    const jit::TranslationEntry& t = f.code.translation[k];
    auto want = jit::cache_frame(original->second, cfg.end, f.code, k);
    auto got = elf::cfi_state_at(cache_rows, cache_end, t.new_addr);
    if (!want || !got || !(*want == *got)) return fail(fmt::format("unwind row differs at {:#x}", t.new_addr));
  }
  return ok();
}

void print_failure(uint64_t function, const std::string& why, std::size_t& failures) {
  if (failures++ < 10)
    std::fprintf(stderr, "verifier failure: %#llx: %s\n", static_cast<unsigned long long>(function), why.c_str());
}

// Where the entry patches sit (jit/patch_plan.h): inside a jmp rel32 or
// after a REX prefix, after how many kept instructions; and, checked apart
// from the rule, how many change a byte where an instruction of the file
// begins (a uprobe or breakpoint there would break them): none should.
void print_entry_spots(const jit::ModulePlan& plan) {
  std::map<uint64_t, const jit::FunctionCfg*> cfg_of;
  for (const auto& c : plan.cfgs) cfg_of[c->start] = c.get();
  std::size_t in_jmp = 0, after_rex = 0, keeping = 0, at_starts = 0;
  for (const jit::CachedFunction& f : plan.cache.functions)
    for (const jit::EntryPatch& p : f.patch.entries) {
      const jit::FunctionCfg& cfg = *cfg_of.at(f.original_entry);
      keeping += !cfg.instructions.empty() && cfg.instructions[0].end() <= p.addr;
      for (const jit::Instruction& in : cfg.instructions) {
        in_jmp += in.addr == p.addr && p.original[0] == jit::kJmpRel32Opcode;
        after_rex += in.addr + 1 == p.addr && (in.bytes[0] & 0xf0) == 0x40 && in.length > jit::kEntryPatchSize && !p.pad;
      }
      at_starts += jit::changes_an_instruction_start(cfg, p);
    }
  std::printf("entries:   %zu in a jmp rel32, %zu after a REX prefix (%zu after kept instructions); %zu change a byte "
              "where an instruction begins (probe_safe_entries = false)\n",
              in_jmp, after_rex, keeping, at_starts);
}

// The entries through a pad between functions (jit/entry_pads.h), and of
// those that still change a byte where an instruction begins, how many have
// a short-jump spot but no pad of their own.
void print_pads(const jit::ModulePlan& plan, const elf::FunctionTable& table, const jit::ModuleImage& image) {
  std::map<uint64_t, const jit::FunctionCfg*> cfg_of;
  for (const auto& c : plan.cfgs) cfg_of[c->start] = c.get();
  const jit::EntryPads pads(table.functions(), image);
  std::size_t padded = 0, unsafe = 0, spot_no_pad = 0;
  std::map<std::string, std::size_t> why;
  for (const jit::CachedFunction& f : plan.cache.functions)
    for (const jit::EntryPatch& p : f.patch.entries) {
      const jit::FunctionCfg& cfg = *cfg_of.at(f.original_entry);
      padded += p.pad != 0;
      if (!jit::changes_an_instruction_start(cfg, p)) continue;
      ++unsafe;
      if (auto spot = jit::short_jump_spot(cfg)) ++spot_no_pad, ++why[pads.why_none(cfg, *spot)];
    }
  std::printf("pads:      %zu entries through a pad (%zu runs of padding in the file); of the %zu that change a byte "
              "where an instruction begins, %zu have a short-jump spot but no pad of their own\n",
              padded, pads.runs().size(), unsafe, spot_no_pad);
  for (const auto& [reason, n] : why) std::printf("  no pad: %-70s %zu\n", reason.c_str(), n);
}

// The copies the verifier rejected while the cache was built, then every
// copy kept decoded back again (exits against all entry patches) and its
// frames checked; the failures are printed.
std::size_t verify_all(const jit::ModulePlan& plan) {
  std::size_t failures = 0;
  for (const jit::Rejection& r : plan.rejected)
    if (jit::reason_kind(r.reason) == "copy fails verification") print_failure(r.addr, r.reason, failures);
  std::map<uint64_t, const jit::FunctionCfg*> cfg_of;
  for (const auto& c : plan.cfgs) cfg_of[c->start] = c.get();
  jit::PatchedBytes patched;
  for (const jit::CachedFunction& f : plan.cache.functions)
    for (const jit::EntryPatch& p : f.patch.entries) {
      patched[p.addr] = jit::changed_end(p);
      if (p.pad) patched[p.pad] = p.pad + jit::kEntryPatchSize;
    }
  for (const jit::CachedFunction& f : plan.cache.functions) {
    const jit::FunctionCfg& cfg = *cfg_of.at(f.original_entry);
    auto checked = jit::verify(cfg, f.code, plan.cache.redirects, patched);
    if (checked) checked = check_unwind(plan, f, cfg);
    if (!checked) print_failure(f.original_entry, checked.error().message(), failures);
  }
  return failures;
}

// A dispatch of a copy that leaves the cache: an indirect jump that is not
// through a table rebuilt for it (a tail call through a pointer, or a table
// read from the original). `sampled` when its block has samples: a dispatch
// in a block the profile never saw is cold code, like a cold block left in
// the original code (GCC's speculative devirtualization puts the tail call
// through the pointer on such a path, behind a compare with the function it
// inlined).
struct Exit {
  std::string why;
  bool sampled = false;
};

std::vector<Exit> exits_of(const jit::FunctionCfg& cfg, const jit::CachedFunction& copy,
                           const jit::FunctionSamples& samples) {
  std::set<uint64_t> rebuilt_loads;
  for (const jit::RebuiltTable& t : copy.code.tables) rebuilt_loads.insert(t.load);
  const std::vector<jit::BlockCount> counts = jit::block_counts(cfg, samples.by_offset);
  std::vector<Exit> out;
  for (std::size_t k = 0; k < cfg.blocks.size(); ++k) {
    const jit::Block& b = cfg.blocks[k];
    const jit::Instruction& in = cfg.instructions[b.first + b.count - 1];
    if (in.flow != jit::Flow::IndirectBranch) continue;
    auto table = std::find_if(cfg.tables.begin(), cfg.tables.end(),
                              [&](const jit::JumpTable& t) { return t.jump_addr == in.addr; });
    std::string why;
    if (table == cfg.tables.end()) why = fmt::format("tail call through a pointer at {:#x}", in.addr);
    else if (!rebuilt_loads.count(table->load_addr))
      why = fmt::format("table not rebuilt at {:#x}{}", in.addr, table->proven ? "" : " (bound not proven)");
    if (!why.empty()) out.push_back({why, counts[k].samples > 0});
  }
  return out;
}

// The accepted functions with samples, each with its samples and exits.
struct SampledCopy {
  const jit::FunctionCfg* cfg;
  uint64_t samples;
  std::vector<Exit> exits;
};

std::vector<SampledCopy> sampled_copies(const jit::ModulePlan& plan, const jit::ModuleProfile& profile) {
  std::map<uint64_t, const jit::CachedFunction*> cached;
  for (const jit::CachedFunction& f : plan.cache.functions) cached[f.original_entry] = &f;
  std::vector<SampledCopy> out;
  for (const auto& cfg : plan.cfgs) {
    auto f = cached.find(cfg->start);
    auto s = profile.functions.find(cfg->start);
    if (f == cached.end() || s == profile.functions.end()) continue;
    out.push_back({cfg.get(), s->second.samples, exits_of(*cfg, *f->second, s->second)});
  }
  return out;
}

bool leaves(const SampledCopy& c, bool count_cold) {
  return std::any_of(c.exits.begin(), c.exits.end(), [&](const Exit& e) { return e.sampled || count_cold; });
}

// Samples of the accepted functions that stay in the cache: no dispatch in
// a sampled block leaves it (with count_cold, no dispatch anywhere does).
uint64_t staying_samples(const std::vector<SampledCopy>& copies, bool count_cold) {
  uint64_t staying = 0;
  for (const SampledCopy& c : copies)
    if (!leaves(c, count_cold)) staying += c.samples;
  return staying;
}

// --leaving: the sampled copies that leave the cache, heaviest first, each
// with its first leaving dispatch (a sampled one if there is one).
void print_leaving(const std::vector<SampledCopy>& copies, const elf::FunctionTable& table) {
  std::vector<std::tuple<uint64_t, std::string, std::string>> rows;
  for (const SampledCopy& c : copies) {
    if (c.exits.empty()) continue;
    auto hot = std::find_if(c.exits.begin(), c.exits.end(), [](const Exit& e) { return e.sampled; });
    const Exit& shown = hot != c.exits.end() ? *hot : c.exits.front();
    const elf::Function* f = table.find(c.cfg->start);
    std::string name = f && !f->name.empty() ? f->name : fmt::format("func_{:x}", c.cfg->start);
    rows.emplace_back(c.samples, name, shown.why + (shown.sampled ? "" : " (in an unsampled block: cold)"));
  }
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [samples, name, why] : rows)
    std::printf("leaving:   %6llu samples  %s: %s\n", static_cast<unsigned long long>(samples), name.c_str(), why.c_str());
}

// --counts: what the counts show of the original code and of the cache laid
// out by them (jit/layout_metrics.h).
void print_count_metrics(const jit::ModulePlan& plan, const jit::ModuleCounts& counts) {
  const jit::CountMetrics both = jit::count_metrics(plan, counts);
  for (bool laid_out : {false, true}) {
    const jit::LayoutMetrics& m = laid_out ? both.laid_out : both.original;
    std::printf("%-12s ext-TSP %.4g, %llu bytes ran, 99%% of %llu executed instructions in %zu lines and %zu pages, "
                "%.1f taken jumps per 1,000 instructions\n",
                laid_out ? "laid out:" : "original:", m.ext_tsp, static_cast<unsigned long long>(m.hot_bytes),
                static_cast<unsigned long long>(m.instructions), m.lines_99, m.pages_99, m.taken_per_1000());
  }
  const jit::IndirectMetrics& i = both.indirect;
  std::printf("indirect:   %zu sites ran (%zu with one target for 90%% of calls), %llu calls, %.1f%% to their site's "
              "most called target, %.1f%% to one with a copy\n",
              i.sites, i.sites_90, static_cast<unsigned long long>(i.calls), percent(i.to_top, i.calls),
              percent(i.to_top_copied, i.calls));
  const jit::LeafMetrics& l = both.leaves;
  std::printf("leaves:     %zu functions of at most %zu instructions and a ret took %llu of %llu calls (%.1f%%): "
              "what inlining them could save at most, a call and a ret each\n",
              l.leaves, jit::kSmallLeaf, static_cast<unsigned long long>(l.leaf_calls),
              static_cast<unsigned long long>(l.calls), percent(l.leaf_calls, l.calls));
}

// --counting: the counter sites of the counting cache, and what they cost.
void print_counters(const jit::CodeCache& cache) {
  std::size_t blocks = 0, falls = 0, values = 0, saving = 0, bytes = 0;
  for (const jit::CachedFunction& f : cache.functions)
    for (const jit::CounterSite& s : f.counters) {
      (s.kind == jit::CounterKind::Block ? blocks : s.kind == jit::CounterKind::Value ? values : falls)++;
      saving += s.saves_flags;
      bytes += jit::counter_length(s.form());
    }
  std::size_t sites = blocks + falls + values;
  std::printf("counters:  %zu sites (%zu blocks, %zu fall-throughs, %zu indirect calls and jumps), %zu saving flags "
              "(%.1f%%), %zu bytes of counter code, %u slots at %#llx in %u stripes (%llu bytes)\n",
              sites, blocks, falls, values, saving, percent(saving, sites), bytes, cache.counter_slots,
              static_cast<unsigned long long>(cache.counters_base), cache.counter_stripes,
              static_cast<unsigned long long>(cache.counter_layout().bytes()));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: dyni-scan ELF-FILE [--profile FILE [--leaving]] [--shuffle SEED] [--leave-cold] "
                 "[--counting [--stripes N] [--sites every|fewest|propagation]] [--counts FILE [--loop-align 0|16|32|64]]\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto file = elf::ElfFile::open(args.elf);
  auto table = file ? elf::FunctionTable::build(*file) : std::unexpected(file.error());
  auto profile = args.profile.empty() ? Result<jit::ModuleProfile>(jit::ModuleProfile{}) : read_json_file<jit::ModuleProfile>(args.profile);
  auto counts = args.counts.empty() ? Result<jit::ModuleCounts>(jit::ModuleCounts{}) : read_json_file<jit::ModuleCounts>(args.counts);
  if (!table || !profile || !counts) {
    std::fprintf(stderr, "dyni-scan: %s: %s\n", args.elf.c_str(),
                 (!table ? table.error() : !profile ? profile.error() : counts.error()).message().c_str());
    return 1;
  }
  if (!args.counts.empty() && !counts->build_id.empty() && counts->build_id != file->build_id()) {
    std::fprintf(stderr, "dyni-scan: %s: the counts are of another build (%s)\n", args.elf.c_str(), counts->build_id.c_str());
    return 1;
  }
  jit::ModuleImage image(*file);
  jit::ModuleInput input{&*table, &image, args.profile.empty() ? nullptr : &*profile, {}, 0, {}, {}, 0};
  jit::use_unwind_info(input, *file);
  if (auto probes = jit::use_probe_sites(input, *file); !probes) {
    std::fprintf(stderr, "dyni-scan: %s: %s\n", args.elf.c_str(), probes.error().message().c_str());
    return 1;
  }
  uint64_t bytes_all = 0;
  if (!args.counts.empty()) input.counts = &*counts;
  for (const auto& f : table->functions()) {
    bool wanted = input.counts ? counts->entries(f.addr) > 0
                  : input.profile ? profile->functions.count(f.addr) > 0 : image.is_code(f.addr);
    if (!wanted) continue;
    input.hot.push_back(f.addr);
    bytes_all += f.size;
  }
  input.cache_base = jit::provisional_cache_base(*table);
  jit::JitOptions options;  // the verifier on, as in dynid
  options.layout.shuffle_seed = args.shuffle;
  options.layout.loop_alignment = args.loop_alignment;
  if (args.shuffle) options.layout.cold = args.leave_cold ? jit::ColdBlocks::LeaveInOriginal : jit::ColdBlocks::CopyLast;
  options.cache.counting = args.counting;
  options.cache.counter_stripes = args.stripes;
  options.cache.counter_set = args.sites;
  auto plan = jit::optimize_module(input, options);
  if (!plan) {
    std::fprintf(stderr, "dyni-scan: %s: module failed: %s\n", args.elf.c_str(), plan.error().message().c_str());
    return 1;
  }
  double jit_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t failures = verify_all(*plan);
  uint64_t bytes_ok = 0, tables = 0;
  for (const auto& c : plan->cfgs) bytes_ok += c->end - c->start, tables += c->tables.size();
  std::size_t accepted = plan->cache.functions.size(), total = input.hot.size();
  std::printf("%s\n", args.elf.c_str());
  std::printf("functions: %zu, accepted %zu (%.1f%%), jump tables resolved %llu\n", total, accepted,
              percent(accepted, total), static_cast<unsigned long long>(tables));
  std::printf("bytes:     %llu, accepted %llu (%.1f%%)\n", static_cast<unsigned long long>(bytes_all),
              static_cast<unsigned long long>(bytes_ok), percent(bytes_ok, bytes_all));
  if (input.profile) {
    std::printf("samples:   %llu in these functions, accepted %llu (%.1f%% of sampled CPU)\n",
                static_cast<unsigned long long>(plan->hot_samples),
                static_cast<unsigned long long>(plan->accepted_samples),
                percent(plan->accepted_samples, plan->hot_samples));
    auto copies = sampled_copies(*plan, *profile);
    uint64_t staying = staying_samples(copies, false), staying_static = staying_samples(copies, true);
    std::printf("           staying in the cache %llu (%.1f%% of sampled CPU): copies whose every indirect jump "
                "in a sampled block reaches copies (no table left to the original, no tail call through a pointer)\n",
                static_cast<unsigned long long>(staying), percent(staying, plan->hot_samples));
    std::printf("           staying, counting unsampled blocks too %llu (%.1f%% of sampled CPU)\n",
                static_cast<unsigned long long>(staying_static), percent(staying_static, plan->hot_samples));
    if (args.leaving) print_leaving(copies, *table);
  }
  print_rejections(*plan);
  std::map<std::string, std::size_t> unpatched;
  for (const jit::CachedFunction& f : plan->cache.functions)
    if (!f.unpatched.empty()) unpatched[jit::reason_kind(f.unpatched)]++;
  std::printf("cache:     %zu functions, %zu bytes at %#llx; %zu of %zu blocks left in the original code\n",
              plan->cache.functions.size(), plan->cache.bytes.size(),
              static_cast<unsigned long long>(plan->cache.base), plan->blocks_left, plan->blocks);
  for (const auto& [kind, n] : unpatched)
    std::printf("entry not patched (reached from cache code only): %-35s %6zu functions\n", kind.c_str(), n);
  print_entry_spots(*plan);
  print_pads(*plan, *table, image);
  std::size_t rebuildable = 0, rebuilt = 0;
  for (const auto& c : plan->cfgs)
    for (const jit::JumpTable& t : c->tables) rebuildable += t.rebuildable;
  for (const jit::CachedFunction& f : plan->cache.functions) rebuilt += f.code.tables.size();
  std::printf("tables:    %llu resolved, %zu proven rebuildable, %zu rebuilt in the cache (their dispatch stays in "
              "the cache); the others send their targets back to the original code\n",
              static_cast<unsigned long long>(tables), rebuildable, rebuilt);
  if (args.counting) print_counters(plan->cache);
  if (input.counts) {
    print_count_metrics(*plan, *counts);
    std::size_t promoted = 0;
    for (const jit::CachedFunction& f : plan->cache.functions) promoted += f.code.promoted.size();
    std::printf("promoted:  %zu indirect calls to guarded direct calls (jit/promotion.h)\n", promoted);
    std::size_t tops = 0, nops = 0, padding = 0;
    for (const jit::CachedFunction& f : plan->cache.functions)
      for (std::size_t k = 0; k < f.code.translation.size(); ++k) {
        const jit::TranslationEntry& t = f.code.translation[k];
        if (t.kind != jit::Translation::Padding) continue;
        const uint64_t end = k + 1 < f.code.translation.size() ? f.code.translation[k + 1].new_addr : f.code.base + f.code.code_size;
        const bool first = k == 0 || f.code.translation[k - 1].kind != jit::Translation::Padding;
        tops += first, padding += end - t.new_addr, nops += first && f.code.bytes[t.new_addr - f.code.base] != 0xcc;
      }
    std::printf("loops:     %zu loop tops padded to their boundary (%zu bytes; %zu with nops run into), loop alignment %u\n",
                tops, padding, nops, options.layout.loop_alignment);
  }
  std::size_t with_rows = 0, rows = 0;
  for (const jit::CachedFunction& f : plan->cache.functions) with_rows += !f.unwind.empty(), rows += f.unwind.size();
  std::printf("unwind:    %zu functions with rows, %zu rows (each cache instruction has its original's frame)\n",
              with_rows, rows);
  std::printf("verifier failures: %zu\n", failures);
  std::printf("time: %.2f s (jit), %.2f s (with verifier)\n", jit_secs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return failures == 0 ? 0 : 1;
}
