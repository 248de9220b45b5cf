// What stays in place in glibc's libc when dyni copies it (issue 22 item 3;
// dynid/inject/module_policy.h, jit ModuleInput::kept_in_place and
// keep_system_call_functions), on this machine's own libc.
#include "dynid/inject/module_policy.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "dynid/module_choice.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/cfg.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"

namespace dyni {
namespace {

const char kLibcPath[] = "/lib/x86_64-linux-gnu/libc.so.6";

TEST(LibraryStays, GlibcsLibcIsCopiedLdSoOlderGlibcsAndAllocatorsAreNot) {
  EXPECT_TRUE(is_glibc_libc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
  EXPECT_EQ(why_library_stays("/usr/lib/x86_64-linux-gnu/libc.so.6"), "");
  for (const char* kept : {"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc-2.31.so",
                           "/lib/x86_64-linux-gnu/libpthread.so.0", "/lib/ld-musl-x86_64.so.1",
                           "/lib/x86_64-linux-gnu/libgcc_s.so.1", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}) {
    EXPECT_FALSE(is_glibc_libc(kept)) << kept;
    EXPECT_NE(why_library_stays(kept), "") << kept;
  }
}

// This process's libc defines malloc, yet it is the module dynid may copy:
// its allocator stays in place by name instead.
TEST(LibraryStays, ThisProcesssLibcMayBeCopied) {
  auto symbols = profiler::Symbolizer::for_process(::getpid());
  ASSERT_TRUE(symbols) << symbols.error().message();
  std::string libc;
  for (const profiler::Module& m : symbols->modules())
    if (is_glibc_libc(m.path)) libc = m.path;
  ASSERT_FALSE(libc.empty());
  EXPECT_EQ(why_module_stays(*symbols, libc, "/proc/self/exe"), "");
}

struct Libc {
  elf::ElfFile file;
  elf::FunctionTable functions;
  // The address of `name` (the table keeps one name an address: free may
  // be listed as cfree, or cfree@GLIBC_2.2.5 with libc6-dbg).
  uint64_t named(const std::string& name) const {
    auto symbols = file.function_symbols();
    if (!symbols) return 0;
    for (const elf::Symbol& s : *symbols)
      if (s.name == name) return s.addr;
    return 0;
  }
};

// This machine's libc, its function table named as the symbolizer names it
// with `with_debug` (libc6-dbg's symbols, where installed), else from the
// file alone.
Libc read_libc(bool with_debug = false) {
  auto file = elf::ElfFile::open(kLibcPath);
  EXPECT_TRUE(file) << file.error().message();
  std::optional<elf::ElfFile> debug;
  const std::string debug_path = elf::debug_file_path(file->build_id());
  if (with_debug && !debug_path.empty() && ::access(debug_path.c_str(), R_OK) == 0)
    if (auto opened = elf::ElfFile::open_symbols(debug_path)) debug = std::move(*opened);
  auto functions = elf::FunctionTable::build(*file, debug ? &*debug : nullptr);
  EXPECT_TRUE(functions) << functions.error().message();
  return Libc{std::move(*file), std::move(*functions)};
}

// The same functions are kept whichever names the table shows (libc6-dbg
// names free cfree@GLIBC_2.2.5, posix_memalign __posix_memalign and
// dl_iterate_phdr __GI___dl_iterate_phdr).
TEST(LibcPolicy, TheAllocatorAndCancellationStayInPlaceByNameWithAndWithoutDebugSymbols) {
  for (bool with_debug : {false, true}) {
    Libc libc = read_libc(with_debug);
    auto kept = inject::libc_functions_kept_in_place(libc.file, libc.functions);
    ASSERT_TRUE(kept) << kept.error().message();
    for (const char* name : {"malloc", "free", "calloc", "realloc", "posix_memalign", "malloc_trim", "fork",
                             "pthread_testcancel", "dl_iterate_phdr"}) {
      const uint64_t addr = libc.named(name);
      ASSERT_NE(addr, 0u) << name << " is not named in " << kLibcPath;
      EXPECT_TRUE(kept->count(addr)) << name << (with_debug ? " (with libc6-dbg's names)" : "");
    }
    for (const char* name : {"qsort_r", "strtol", "memchr"}) {
      const uint64_t addr = libc.named(name);
      EXPECT_NE(addr, 0u) << name;
      EXPECT_FALSE(kept->count(addr)) << name;
    }
    EXPECT_LT(kept->size(), libc.functions.functions().size() / 10) << "most of libc may be copied";
  }
}

TEST(LibcPolicy, ThisGlibcIsOneTheRulesWereMadeFor) {
  Libc libc = read_libc();
  const int minor = inject::glibc_minor_version(libc.file);
  EXPECT_GE(minor, 34);
  // Debian 12's glibc; a machine with another one sees its libc stay as it is.
  if (minor != 36) GTEST_SKIP() << "glibc 2." << minor << " here: dyni's libc rules cover 2.34 to 2.36";
  EXPECT_TRUE(inject::libc_functions_kept_in_place(libc.file, libc.functions));
}

// The jit keeps a function that makes a system call (getpid: `syscall`)
// in place only when asked to, a function kept by name whatever it is, and
// with only_leaves every function that calls another.
TEST(LibcPolicy, TheJitKeepsFunctionsThatMakeSystemCallsAndThoseKeptByName) {
  Libc libc = read_libc();
  jit::ModuleImage image(libc.file);
  const uint64_t getpid = libc.named("getpid"), qsort = libc.named("qsort_r"), strtol = libc.named("strtol");
  ASSERT_NE(getpid, 0u);
  ASSERT_NE(qsort, 0u);
  ASSERT_NE(strtol, 0u);
  auto plan_with = [&](bool keep_system_calls, std::map<uint64_t, std::string> kept, bool only_leaves = false) {
    jit::ModuleInput input{&libc.functions, &image, nullptr, {getpid, qsort, strtol},
                           jit::provisional_cache_base(libc.functions), {}, {}, 0};
    jit::use_unwind_info(input, libc.file);
    input.kept_in_place = std::move(kept);
    input.keep_system_call_functions = keep_system_calls;
    input.only_leaves = only_leaves;
    auto plan = jit::optimize_module(input);
    EXPECT_TRUE(plan) << plan.error().message();
    return std::move(*plan);
  };
  auto copied = [](const jit::ModulePlan& plan, uint64_t addr) {
    return std::any_of(plan.cache.functions.begin(), plan.cache.functions.end(),
                       [&](const jit::CachedFunction& f) { return f.original_entry == addr; });
  };
  auto reason = [](const jit::ModulePlan& plan, uint64_t addr) {
    for (const jit::Rejection& r : plan.rejected)
      if (r.addr == addr) return r.reason;
    return std::string();
  };
  jit::ModulePlan free_plan = plan_with(false, {});
  EXPECT_TRUE(copied(free_plan, getpid)) << reason(free_plan, getpid);
  EXPECT_TRUE(copied(free_plan, qsort)) << reason(free_plan, qsort);

  jit::ModulePlan libc_plan = plan_with(true, {{qsort, "qsort_r is kept for this test"}});
  EXPECT_FALSE(copied(libc_plan, getpid));
  EXPECT_EQ(jit::reason_kind(reason(libc_plan, getpid)), jit::kMakesSystemCall) << reason(libc_plan, getpid);
  EXPECT_FALSE(copied(libc_plan, qsort));
  EXPECT_EQ(reason(libc_plan, qsort), std::string(jit::kKeptInPlace) + ": qsort_r is kept for this test");
  EXPECT_EQ(jit::reason_kind(reason(libc_plan, qsort)), jit::kKeptInPlace);
  EXPECT_TRUE(copied(libc_plan, strtol)) << reason(libc_plan, strtol);

  // With no unwinder to know the copies' frames, only leaves: qsort_r calls
  // its comparison, getpid calls nothing.
  jit::ModulePlan leaves = plan_with(false, {}, true);
  EXPECT_FALSE(copied(leaves, qsort));
  EXPECT_EQ(jit::reason_kind(reason(leaves, qsort)), jit::kNotALeaf) << reason(leaves, qsort);
  EXPECT_TRUE(copied(leaves, getpid)) << reason(leaves, getpid);
}

}  // namespace
}  // namespace dyni
