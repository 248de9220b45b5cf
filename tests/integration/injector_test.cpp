// Live injection into a real C++ target (dynid/injector.h): its hot
// functions move to a code cache, its results stay the same, exceptions
// thrown through hot frames are still caught, its threads run in the cache,
// and undo puts every entry byte back.
#include "dynid/injector.h"
#include "elf/elf_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "dynid/cache_scan.h"
#include "dynid/inject/target_module.h"
#include "dynid/proc_reader.h"
#include "dynid/target_memory.h"
#include "dynid/thread_unwind.h"
#include "dynid/world_stop.h"
#include "elf/function_table.h"
#include "elf/got_slots.h"
#include "profiler/process_maps.h"
#include "tests/integration/stoppable_target.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using namespace std::chrono_literals;

// The link-time entries of the functions named inject_* in `path`.
std::vector<uint64_t> hot_functions(const std::string& path = DYNI_TEST_INJECT) {
  std::vector<uint64_t> hot;
  auto file = elf::ElfFile::open(path);
  auto table = file ? elf::FunctionTable::build(*file) : fail("unreadable");
  if (!table) return hot;
  for (const elf::Function& f : table->functions())
    if (f.name.starts_with("inject_") || f.name.find("inject_") != std::string::npos) hot.push_back(f.addr);
  return hot;
}

std::array<uint8_t, 5> bytes_at(pid_t pid, uint64_t addr) {
  std::array<uint8_t, 5> a{};
  if (auto b = read_target(pid, addr, 5)) std::copy(b->begin(), b->end(), a.begin());
  return a;
}

// Stop windows in which some thread's PC lies in the cache's code. Given the
// cache's search table, its stack unwinds to the end, the way it does from
// the original code; without it, libunwind can only guess, and the unwind
// must say so, never claim a complete stack.
int windows_in(pid_t pid, const UnwindTable& frames, int windows) {
  int in = 0;
  StackReader reader(pid, {frames});
  StackReader blind(pid);
  for (int i = 0; i < windows; ++i) {
    auto w = WorldStop::stop(pid, 1000ms);
    if (!w) continue;
    for (const auto& [tid, t] : w->threads()) {
      if (t.regs.rip < frames.code_lo || t.regs.rip >= frames.code_hi) continue;
      auto stack = reader.unwind(tid);
      if (!stack) {
        ADD_FAILURE() << stack.error().message();
        break;
      }
      EXPECT_TRUE(stack->complete) << "a stack through the cache: " << stack->incomplete_why;
      EXPECT_GE(stack->frames.size(), 3u);
      auto guess = blind.unwind(tid);
      EXPECT_TRUE(guess && !guess->complete) << "a stack through the cache claimed to be complete without its rows";
      ++in;
      break;
    }
    w->resume();
    std::this_thread::sleep_for(5ms);
  }
  return in;
}

using InjectorTest = test::PtraceTest;

// A pid that another process took since the target was found is refused
// before anything is read or written, whatever the new process's image.
TEST_F(InjectorTest, APidTakenByAnotherProcessIsRefused) {
  StoppableTarget target(DYNI_TEST_INJECT, nullptr);
  ASSERT_EQ(target.read_line(), "ready");
  auto stat = read_proc_stat("/proc", target.pid());
  ASSERT_TRUE(stat);
  InjectRequest request{target.pid(), hot_functions()};
  request.start_time = stat->start_time + 1;  // the process found earlier
  auto injected = inject_module(request);
  ASSERT_FALSE(injected);
  EXPECT_NE(injected.error().message().find("its pid is another process's"), std::string::npos) << injected.error().message();
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps);
  EXPECT_TRUE(find_cache_records(target.pid(), *maps).empty()) << "nothing was mapped into it";
}

// The link-time address of the function named `name` in the file at `path`, or 0.
uint64_t function_named(const std::string& path, const std::string& name) {
  auto file = elf::ElfFile::open(path);
  auto table = file ? elf::FunctionTable::build(*file) : fail("unreadable");
  for (const elf::Function& f : table ? table->functions() : std::vector<elf::Function>{})
    if (f.name == name) return f.addr;
  return 0;
}

// The path under which process `pid` maps a file named `name`, or "".
std::string mapped_path(pid_t pid, const std::string& name) {
  auto maps = profiler::read_maps(pid);
  for (const auto& m : maps ? *maps : std::vector<profiler::Mapping>{})
    if (m.path.ends_with("/" + name)) return m.path;
  return "";
}

// The target's hot code moves to a cache within reach of the file it maps
// named `name` (its executable, or a library), runs there with the same
// results, and undo and redo put each entry back and in again.
void check_injection(StoppableTarget& target, const std::string& name, bool library) {
  ASSERT_EQ(target.read_line(), "ready");
  const std::string module = mapped_path(target.pid(), name);
  ASSERT_NE(module, "") << name << " is not mapped";
  std::string before = target.ask("run 300");
  ASSERT_EQ(before.rfind("sum ", 0), 0u) << before;
  std::vector<uint64_t> hot = hot_functions(module);
  ASSERT_GE(hot.size(), 8u);

  InjectRequest request{target.pid(), hot};
  if (library) request.module = module;
  auto injected = inject_module(request);
  ASSERT_TRUE(injected) << injected.error().message();
  EXPECT_EQ(injected->error, "");
  EXPECT_EQ(injected->module, module);
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps);
  auto [lo, hi] = inject::module_range(*maps, module);
  EXPECT_LT(std::max(injected->code_addr + injected->code_size, hi) - std::min(injected->code_addr, lo), 1ull << 31)
      << "the cache within a rel32 of every byte of its module";
  for (const std::string& s : injected->skipped) std::printf("skipped: %s\n", s.c_str());
  std::printf("patched %zu entries, cache %#llx (%llu bytes of code), longest patch window %lld us\n",
              injected->patched.size(), static_cast<unsigned long long>(injected->code_addr),
              static_cast<unsigned long long>(injected->code_size),
              static_cast<long long>(injected->longest_stop.count()));
  EXPECT_GE(injected->patched.size(), 6u);
  // The function with an rseq critical section stays where the kernel
  // expects it; the one that calls dlsym (directly and by a wrapper's tail
  // jump) where glibc can tell its module.
  EXPECT_TRUE(std::any_of(injected->skipped.begin(), injected->skipped.end(), [](const std::string& s) {
    return s.find("holds an rseq critical section") != std::string::npos;
  }));
  const uint64_t lookup = function_named(module, "inject_lookup") + injected->module_bias;
  EXPECT_FALSE(std::any_of(injected->copies.begin(), injected->copies.end(),
                           [&](const CopyRange& c) { return c.original_entry == lookup; }))
      << "inject_lookup was copied";
  EXPECT_GE(injected->plan["rejected"].value("calls a user of its return address", 0), 1) << injected->plan.dump();
  for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.replacement);

  // The busy worker runs in the cache (much of its time goes to the C++
  // runtime's throws, outside it); its results and ours are unchanged (the
  // worker prints WRONG and exits on any difference, and a throw through a
  // copy whose frames were not registered would terminate it).
  EXPECT_EQ(injected->frames.code_lo, injected->code_addr);
  int in_cache = windows_in(target.pid(), injected->frames, 40);
  std::printf("a thread was in the cache in %d of 40 stop windows\n", in_cache);
  EXPECT_GE(in_cache, 2);
  EXPECT_EQ(target.ask("run 300"), before);
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(target.running()) << target.read_line(100ms);

  // Undo, redo, undo: a redo must prove the stacks of threads still running
  // in the cache, so it needs the cache's frames; every entry goes back in.
  // The worker's calls of inject_session last 300 rounds: once it has begun
  // one after the patch, it runs in that copy for seconds, undone or not.
  uint64_t rounds = std::stoull(target.ask("ping").substr(5));
  uint64_t next_session = (rounds / 300 + 1) * 300;
  while (std::stoull(target.ask("ping").substr(5)) < next_session + 3) std::this_thread::sleep_for(20ms);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(undo_patches(*injected));
    for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.original);
    EXPECT_EQ(target.ask("run 300"), before);
    if (round == 2) break;
    auto redone = redo_patches(*injected);
    ASSERT_TRUE(redone) << redone.error().message();
    EXPECT_EQ(redone->patched.size(), injected->patched.size()) << (redone->skipped.empty() ? "" : redone->skipped[0]);
    for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.replacement);
    EXPECT_EQ(target.ask("run 300"), before);
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(target.running()) << target.read_line(100ms);
  EXPECT_EQ(target.finish(), 0);
}

TEST_F(InjectorTest, HotCodeRunsFromTheCacheWithTheSameResultsAndUndoRestoresIt) {
  StoppableTarget target(DYNI_TEST_INJECT, nullptr);
  check_injection(target, "dyni-test-inject", false);
}

// The same code built as a shared library (issue 22): its copies' frames
// are registered with their exceptions, and calls between its functions go
// through its PLT to the patched entries.
TEST_F(InjectorTest, HotCodeInASharedLibraryRunsFromTheCacheWithTheSameResultsAndUndoRestoresIt) {
  StoppableTarget target(DYNI_TEST_INJECT_IN_LIBRARY, nullptr);
  check_injection(target, "libdyni-test-inject.so", true);
}

// A library unloaded and another file (or another load of it) mapped where it
// was: undo and redo write nothing there, whatever the bytes. Seen here as
// the Injection's module identity no longer matching the mapping.
TEST_F(InjectorTest, UndoAndRedoWriteNothingIntoAnotherFileMappedWhereTheLibraryWas) {
  StoppableTarget target(DYNI_TEST_INJECT_IN_LIBRARY, nullptr);
  ASSERT_EQ(target.read_line(), "ready");
  const std::string module = mapped_path(target.pid(), "libdyni-test-inject.so");
  std::string before = target.ask("run 30");
  InjectRequest request{target.pid(), hot_functions(module)};
  request.module = module;
  auto injected = inject_module(request);
  ASSERT_TRUE(injected) << injected.error().message();
  ASSERT_FALSE(injected->patched.empty());
  ASSERT_NE(injected->module_inode, 0u);
  for (uint64_t Injection::*identity : {&Injection::module_inode, &Injection::module_load}) {
    Injection elsewhere = *injected;
    elsewhere.*identity += 4096;
    ASSERT_TRUE(undo_patches(elsewhere));
    for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.replacement);
  }
  ASSERT_TRUE(undo_patches(*injected));
  for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.original);
  for (uint64_t Injection::*identity : {&Injection::module_inode, &Injection::module_load}) {
    Injection elsewhere = *injected;
    elsewhere.*identity += 4096;
    auto redone = redo_patches(elsewhere);
    EXPECT_TRUE(!redone || redone->patched.empty()) << "redo patched another file";
    for (const PatchRecord& p : injected->patched) EXPECT_EQ(bytes_at(target.pid(), p.addr), p.original);
  }
  EXPECT_EQ(target.ask("run 30"), before);
  EXPECT_EQ(target.finish(), 0);
}

// A library's calls between its own exported functions go through its PLT;
// where the live slot holds the library's function, a copy calls it (or its
// copy) directly. The executable's PLT slots all lead to other modules.
TEST_F(InjectorTest, ALibrarysStubsWhoseSlotsHoldItsOwnFunctionsAreBypassed) {
  for (bool library : {true, false}) {
    StoppableTarget target(library ? DYNI_TEST_INJECT_IN_LIBRARY : DYNI_TEST_INJECT, nullptr);
    ASSERT_EQ(target.read_line(), "ready");
    ASSERT_EQ(target.ask("run 3").rfind("sum ", 0), 0u);  // every slot it uses is bound by now
    const std::string path = mapped_path(target.pid(), library ? "libdyni-test-inject.so" : "dyni-test-inject");
    auto symbols = profiler::Symbolizer::for_process(target.pid());
    ASSERT_TRUE(symbols) << symbols.error().message();
    auto module = inject::read_target_module(target.pid(), *symbols, library ? path : "");
    ASSERT_TRUE(module) << module.error().message();
    std::set<std::string> reached;
    for (const auto& [stub, function] : inject::plt_redirects(target.pid(), *module).to) {
      const elf::Function* f = module->module->functions->find(function);
      ASSERT_TRUE(f && f->addr == function) << std::hex << stub << " -> " << function;
      reached.insert(f->name);
    }
    if (library) {
      for (const char* called : {"inject_mix", "inject_loop", "inject_guarded", "inject_middle", "inject_round"})
        EXPECT_TRUE(reached.count(called)) << called << " is called through the library's PLT";
    } else {
      EXPECT_TRUE(reached.empty()) << *reached.begin();
    }
    EXPECT_EQ(target.finish(), 0);
  }
}

// The library's GOT slots are named from its relocations, bound or not:
// dlsym's (another module's) and inject_mix's (its own, at its address).
TEST(GotSlots, NameTheSymbolsALibrarysSlotsBind) {
  const std::string launcher = DYNI_TEST_INJECT_IN_LIBRARY;
  const std::string library = launcher.substr(0, launcher.rfind('/')) + "/libdyni-test-inject.so";
  auto file = elf::ElfFile::open(library);
  ASSERT_TRUE(file) << file.error().message();
  auto slots = elf::got_slots(*file);
  ASSERT_TRUE(slots) << slots.error().message();
  std::map<std::string, const elf::GotSlot*> by_name;
  for (const elf::GotSlot& s : *slots) by_name[s.name] = &s;
  ASSERT_TRUE(by_name.count("dlsym"));
  EXPECT_EQ(by_name["dlsym"]->defined, 0u);
  EXPECT_TRUE(by_name["dlsym"]->jump_slot);
  ASSERT_TRUE(by_name.count("inject_mix"));
  EXPECT_EQ(by_name["inject_mix"]->defined, function_named(library, "inject_mix"));
  EXPECT_NE(by_name["inject_mix"]->slot, by_name["dlsym"]->slot);
}

// libc and ld.so hold what dyni's own remote calls rely on: they are refused
// by name before anything is mapped, and so is a library not mapped at all.
// ld.so and libgcc_s are never copied; libc is, but never a function of it
// that makes a system call (getpid's `syscall`: module_policy.h).
TEST_F(InjectorTest, TheDynamicLoaderAndLibgccAreNeverCopiedNorLibcsSystemCalls) {
  StoppableTarget target(DYNI_TEST_INJECT, nullptr);
  ASSERT_EQ(target.read_line(), "ready");
  {
    InjectRequest request{target.pid(), {}};
    request.module = mapped_path(target.pid(), "libc.so.6");
    ASSERT_NE(request.module, "");
    auto file = elf::ElfFile::open(request.module);
    ASSERT_TRUE(file);
    auto names = file->function_symbols();
    ASSERT_TRUE(names);
    for (const elf::Symbol& s : *names)
      if (s.name == "getpid") request.hot = {s.addr};
    ASSERT_EQ(request.hot.size(), 1u);
    auto injected = inject_module(request);
    ASSERT_FALSE(injected) << "getpid was copied";
    EXPECT_NE(injected.error().message().find("makes a system call"), std::string::npos) << injected.error().message();
  }
  for (const char* name : {"ld-linux-x86-64.so.2", "libgcc_s.so.1"}) {
    InjectRequest request{target.pid(), {0x1000}};
    request.module = mapped_path(target.pid(), name);
    ASSERT_NE(request.module, "") << name << " is not mapped";
    auto injected = inject_module(request);
    ASSERT_FALSE(injected) << name;
    EXPECT_NE(injected.error().message().find("stays as it is"), std::string::npos) << injected.error().message();
  }
  InjectRequest absent{target.pid(), {0x1000}};
  absent.module = "/usr/lib/x86_64-linux-gnu/libnot-mapped.so.1";
  auto injected = inject_module(absent);
  ASSERT_FALSE(injected);
  EXPECT_NE(injected.error().message().find("not mapped"), std::string::npos) << injected.error().message();
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps);
  EXPECT_TRUE(find_cache_records(target.pid(), *maps).empty()) << "nothing was mapped into it";
  EXPECT_EQ(target.ask("run 30"), target.ask("run 30"));
  EXPECT_EQ(target.finish(), 0);
}

}  // namespace
}  // namespace dyni
