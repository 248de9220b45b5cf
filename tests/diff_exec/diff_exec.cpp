// diff_exec CORPUS.so...: the differential execution test of the jit.
//
// Each corpus build (corpus.c and shapes.S by gcc and clang at several
// levels) is loaded into this process and run through the whole jit
// (optimize_module, verifier on) under many seeded layouts: original order,
// shuffled, shuffled with a quarter of the blocks left in the original code,
// layouts from random profiles, and counting copies. For each layout a forked child first
// calls every original over the inputs, then applies the entry patches and
// calls every copy directly and every function through its patched entry;
// any result that differs, any crash, and any hang (the child's time limit)
// is reported with the function and layout. Exits 1 on any of them, or when
// the jit fails a module as a whole.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "jit/cfg.h"
#include "jit/pipeline.h"
#include "tests/diff_exec/loaded_module.h"

namespace {

using namespace dyni;
using Inputs = std::vector<std::pair<long, long>>;
using Function = long (*)(long, long);

constexpr unsigned kSeeds = 16;
constexpr unsigned kChildSeconds = 20;

enum class Mode { Original, Shuffled, ShuffledLeaving, RandomProfile, Counting, CountingStriped };
const char* kModeNames[] = {"original", "shuffled", "shuffled-leaving-blocks", "random-profile", "counting",
                            "counting-striped"};

struct Layout {
  Mode mode;
  uint64_t seed;
  std::string name() const { return std::string(kModeNames[static_cast<int>(mode)]) + " seed " + std::to_string(seed); }
};

struct Target {
  std::string name;
  uint64_t addr;  // link-time
};

// Edge values crossed with each other, then seeded random pairs.
Inputs make_inputs() {
  const std::vector<long> edges = {0, 1, -1, 2, 3, 7, 8, 15, 16, 31, 63, 64, 100, 255, 1000, 4096, 12345,
                                   99999, -7, -1000, -100001, 'a', 'e', '0', '9', ' ', 'Z', LONG_MIN, LONG_MAX};
  Inputs out;
  for (long a : edges)
    for (long b : {0L, 1L, -1L, 5L, 1000L, LONG_MIN})
      out.emplace_back(a, b);
  std::mt19937_64 rng(10);
  for (int i = 0; i < 300; ++i) {
    long a = static_cast<long>(rng()) >> (rng() % 60), b = static_cast<long>(rng()) >> (rng() % 60);
    out.emplace_back(a, b);
  }
  return out;
}

// The functions called: d_* (C corpus) and a_* (shapes); h_* are helpers,
// hot but not called directly. a_tsx runs only where the CPU has RTM.
std::vector<Target> targets_of(const elf::FunctionTable& table, bool called_only) {
  std::vector<Target> out;
  for (const elf::Function& f : table.functions()) {
    bool called = f.name.starts_with("d_") || f.name.starts_with("a_");
    if (f.name.find('.') != std::string::npos) continue;  // d_x.cold and such: parts, not functions
    if (called_only && f.name == "a_tsx" && !__builtin_cpu_supports("rtm")) continue;
    if (called || (!called_only && f.name.starts_with("h_"))) out.push_back({f.name, f.addr});
  }
  return out;
}

// Random samples on random instructions of each hot function.
jit::ModuleProfile random_profile(const elf::FunctionTable& table, const std::vector<Target>& hot, uint64_t seed) {
  std::mt19937_64 rng(seed);
  jit::ModuleProfile p;
  for (const Target& t : hot) {
    const elf::Function* f = table.find(t.addr);
    if (!f || f->size == 0) continue;
    jit::FunctionSamples& s = p.functions[t.addr];
    for (int k = 0; k < 12; ++k) {
      uint64_t n = rng() % 3 == 0 ? 0 : rng() % 500;
      s.by_offset[rng() % f->size] += n;
      s.samples += n;
    }
    p.total_samples += s.samples;
  }
  return p;
}

Result<jit::ModulePlan> plan_for(const diff::LoadedModule& m, const std::vector<Target>& hot, const Layout& layout,
                                 const jit::ModuleProfile& profile) {
  jit::ModuleInput input{&m.functions(), &m.image(), nullptr, {}, m.cache_base(), {}, {}, 0};
  jit::use_unwind_info(input, m.file());
  for (const Target& t : hot) input.hot.push_back(t.addr);
  jit::JitOptions options;
  options.layout.cold = jit::ColdBlocks::CopyLast;
  if (layout.mode == Mode::Shuffled || layout.mode == Mode::ShuffledLeaving) options.layout.shuffle_seed = layout.seed;
  if (layout.mode == Mode::ShuffledLeaving) options.layout.cold = jit::ColdBlocks::LeaveInOriginal;
  // Odd seeds also put random blocks on loop-top boundaries (padding of
  // nops and of int3s, jit/emitter.h), 16, 32 or 64 bytes.
  // Even seeds none, as layouts from samples have.
  options.layout.loop_alignment = options.layout.shuffle_seed && layout.seed % 2 ? 16u << (layout.seed / 2 % 3) : 0;
  // Counting copies (jit/counting.h), with shared or striped counters.
  options.cache.counting = layout.mode == Mode::Counting || layout.mode == Mode::CountingStriped;
  if (layout.mode == Mode::CountingStriped) options.cache.counter_stripes = 4;
  if (layout.mode == Mode::RandomProfile) {
    input.profile = &profile;
    options.layout.cold = jit::ColdBlocks::LeaveInOriginal;
    options.layout.cold_fraction = 1.0;  // leave every unsampled, flowless block behind
  }
  return jit::optimize_module(input, options);
}

void say(int fd, const std::string& line) {
  std::string s = line + "\n";
  if (write(fd, s.data(), s.size()) < 0) _exit(3);
}

std::vector<long> call_all(uint64_t fn, const Inputs& inputs) {
  std::vector<long> out;
  for (const auto& [a, b] : inputs) out.push_back(reinterpret_cast<Function>(fn)(a, b));
  return out;
}

// In the forked child: originals, then patches, then copies and patched
// entries; every step announced first, so a crash or hang names its place.
[[noreturn]] void run_child(diff::LoadedModule& m, const jit::ModulePlan& plan, const std::vector<Target>& targets,
                            const Inputs& inputs, int fd) {
  alarm(kChildSeconds);
  std::map<uint64_t, uint64_t> copy_of;
  for (const jit::CachedFunction& f : plan.cache.functions) copy_of[f.original_entry] = f.code.base;
  std::map<std::string, std::vector<long>> want;
  for (const Target& t : targets) {
    say(fd, "running " + t.name + " (original)");
    want[t.name] = call_all(m.live(t.addr), inputs);
  }
  if (auto patched = m.apply_patches(plan.cache); !patched) say(fd, "error: " + patched.error().message());
  for (const Target& t : targets) {
    std::vector<std::pair<std::string, uint64_t>> ways = {{"patched entry", m.live(t.addr)}};
    if (copy_of.count(t.addr)) ways.emplace_back("copy", m.live(copy_of[t.addr]));
    for (const auto& [how, fn] : ways) {
      say(fd, "running " + t.name + " (" + how + ")");
      std::vector<long> got = call_all(fn, inputs);
      for (std::size_t i = 0; i < inputs.size(); ++i)
        if (got[i] != want[t.name][i]) {
          say(fd, "mismatch: " + t.name + " (" + how + ") at (" + std::to_string(inputs[i].first) + ", " +
                      std::to_string(inputs[i].second) + "): " + std::to_string(got[i]) + " instead of " +
                      std::to_string(want[t.name][i]));
          break;
        }
    }
  }
  say(fd, "done");
  _exit(0);
}

// Runs one layout in a child; the problems found, one line each.
std::vector<std::string> run_layout(diff::LoadedModule& m, const jit::ModulePlan& plan,
                                    const std::vector<Target>& targets, const Inputs& inputs) {
  int fds[2];
  if (pipe(fds) != 0) return {"pipe failed"};
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    run_child(m, plan, targets, inputs, fds[1]);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<std::string> problems;
  std::string last;
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string line = text.substr(at, nl - at);
    if (line.starts_with("running ")) last = line.substr(8);
    if (line.starts_with("mismatch") || line.starts_with("error")) problems.push_back(line);
  }
  bool done = text.ends_with("done\n") && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  bool signalled = WIFSIGNALED(status);
  if (!done && signalled && WTERMSIG(status) == SIGALRM) problems.push_back("hang: " + last);
  else if (!done && signalled) problems.push_back("crash (signal " + std::to_string(WTERMSIG(status)) + "): " + last);
  else if (!done) problems.push_back("child failed (status " + std::to_string(status) + "): " + last);
  return problems;
}

std::vector<Layout> layouts() {
  std::vector<Layout> out = {{Mode::Original, 0}, {Mode::Counting, 0}};
  if (cpu_has_rdpid()) out.push_back({Mode::CountingStriped, 0});
  else std::printf("counting-striped: skipped, this CPU has no rdpid (its counters are shared)\n");
  for (Mode mode : {Mode::Shuffled, Mode::ShuffledLeaving, Mode::RandomProfile})
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) out.push_back({mode, seed});
  return out;
}

// The shapes only test something from the cache: each must be there, but
// the callers of return-address users, which must be rejected for it.
std::vector<std::string> missing_shapes(const jit::ModulePlan& plan, const std::vector<Target>& called) {
  const std::set<std::string> uses_return_address = {"a_uses_pc", "a_checks_caller"};
  std::set<uint64_t> cached;
  for (const jit::CachedFunction& f : plan.cache.functions) cached.insert(f.original_entry);
  std::map<uint64_t, std::string> why;
  for (const jit::Rejection& r : plan.rejected) why[r.addr] = r.reason;
  std::vector<std::string> out;
  for (const Target& t : called) {
    if (!t.name.starts_with("a_")) continue;
    bool expected_out = uses_return_address.count(t.name) > 0;
    bool out_for_it = why.count(t.addr) && jit::reason_kind(why[t.addr]) == "calls a user of its return address";
    if (expected_out ? !out_for_it : !cached.count(t.addr))
      out.push_back("shape " + t.name + (expected_out ? " not rejected" : " not in the cache: " + why[t.addr]));
  }
  return out;
}

// Every layout of one corpus build; the number of problems.
std::size_t test_module(const std::string& path, const Inputs& inputs) {
  auto loaded = diff::LoadedModule::load(path);
  if (!loaded) {
    std::printf("%s: %s\n", path.c_str(), loaded.error().message().c_str());
    return 1;
  }
  diff::LoadedModule& m = **loaded;
  std::vector<Target> hot = targets_of(m.functions(), false), called = targets_of(m.functions(), true);
  std::size_t problems = 0, cached = 0, nop_pads = 0, int3_pads = 0;
  std::map<std::string, std::set<std::string>> rejected;  // kind → functions
  for (const Layout& layout : layouts()) {
    jit::ModuleProfile profile = random_profile(m.functions(), hot, layout.seed);
    auto plan = plan_for(m, hot, layout, profile);
    auto written = plan ? m.write(plan->cache) : Status(std::unexpected(plan.error()));
    if (!written) {
      std::printf("%s, %s: module failed: %s\n", path.c_str(), layout.name().c_str(), written.error().message().c_str());
      ++problems;
      continue;
    }
    cached = std::max(cached, plan->cache.functions.size());
    for (const jit::CachedFunction& f : plan->cache.functions)
      for (const jit::TranslationEntry& t : f.code.translation)
        if (t.kind == jit::Translation::Padding) ++(f.code.bytes[t.new_addr - f.code.base] == 0xcc ? int3_pads : nop_pads);
    std::vector<std::string> found = missing_shapes(*plan, called);
    for (const jit::Rejection& r : plan->rejected) {
      rejected[jit::reason_kind(r.reason)].insert(r.name);
      // What the emitter made must always pass its own verifier.
      if (r.reason.find("cannot be emitted") != std::string::npos || r.reason.find("fails verification") != std::string::npos)
        found.push_back(r.name + " rejected: " + r.reason);
    }
    for (std::string& p : run_layout(m, *plan, called, inputs)) found.push_back(std::move(p));
    for (const std::string& p : found) {
      std::printf("%s, %s: %s\n", path.c_str(), layout.name().c_str(), p.c_str());
      ++problems;
    }
  }
  std::printf("%s: %zu functions hot, up to %zu in the cache, %zu called, %zu layouts x %zu inputs: %zu problems\n",
              path.c_str(), hot.size(), cached, called.size(), layouts().size(), inputs.size(), problems);
  std::printf("  loop-top padding: %zu nops run into, %zu int3 runs after code that never falls through\n", nop_pads,
              int3_pads);
  if (!nop_pads || !int3_pads) {
    std::printf("%s: the aligned layouts made no padding of a kind: the stress does not cover it\n", path.c_str());
    ++problems;
  }
  for (const auto& [kind, names] : rejected) {
    std::string list;
    for (const std::string& n : names) list += " " + n;
    std::printf("  rejected (%s):%s\n", kind.c_str(), list.c_str());
  }
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: diff_exec CORPUS.so...\n");
    return 2;
  }
  Inputs inputs = make_inputs();
  std::size_t problems = 0;
  for (int i = 1; i < argc; ++i) problems += test_module(argv[i], inputs);
  std::printf("%s: %zu problems\n", problems ? "FAILED" : "passed", problems);
  return problems ? 1 : 0;
}
