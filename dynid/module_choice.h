// Which module of a target dyni optimizes (issue 22): each module's share
// of the profile, and the hottest one dyni can copy, or why there is none.
// Apart from the jit's run (cache_plan.h), so that the choice is unit-tested
// without the injector.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "profiler/recorder.h"
#include "profiler/symbolizer.h"

namespace dyni {

// dyni optimizes the hottest module of a target it can, among those that
// hold at least this share of the samples (issue 22: the executable, or a
// shared library such as xz's liblzma or sqlite3's libsqlite3), and with
// all_hot_modules every other one that does; [options] min_module_percent.
constexpr double kMinModuleShare = 0.01;

// Each module's share of a profile's user samples in its functions (of all
// user samples), hottest first; code outside any module (a JIT's, anonymous)
// as kOutsideModules. Samples in a module but outside its functions count
// for none.
inline constexpr const char* kOutsideModules = "code outside any module (a JIT's or anonymous memory)";
std::vector<std::pair<std::string, double>> module_shares(const profiler::Profile& profile,
                                                          const profiler::Symbolizer& symbolizer);

// The module to optimize, or why there is none, by module ("97 % of samples
// in /usr/lib/.../libc.so.6, which dyni does not optimize: libc.so.6 stays
// as it is: ...; the executable holds 0.40 %"). `why_stays(path)` is "" for a
// module dyni can optimize, else why not. Pure; unit-tested.
struct ModuleChoice {
  std::string path;      // "" when none
  bool executable = false;
  std::string why_none;  // when path is ""
  // Modules passed over, for the log: "libc.so.6 (12 %): why" (with
  // all_hot, colder ones too).
  std::vector<std::string> passed_over;
  // The other modules dyni can optimize that hold at least `min_share`,
  // hottest first ([options] all_hot_modules).
  std::vector<std::string> also;
};
using WhyModuleStays = std::function<std::string(const std::string& path)>;
// `all_hot`: also every colder module that can be optimized (`also`);
// else the modules colder than the chosen one are not asked about. Only
// modules that hold at least `min_share` of the samples count.
ModuleChoice choose_module(const std::vector<std::pair<std::string, double>>& shares, const std::string& exe_path,
                           const WhyModuleStays& why_stays, bool all_hot = false, double min_share = kMinModuleShare);

// Why dyni does not optimize the module at `path` of the process that
// `symbols` read (executable `exe_path`), or "": it must have been read whole
// with a function table (I9); a library must not be one dyni's own calls rely
// on (why_library_stays, below), must not define malloc (but glibc's libc,
// whose allocator stays in place by name), must have a build-id (its
// cache's record names it by it) and must still be its file on disk (the
// build-id is read from it). choose_module's `why_stays`.
std::string why_module_stays(const profiler::Symbolizer& symbols, const std::string& path, const std::string& exe_path);

// The allocator function `module` defines ("malloc"), or "": a library
// that defines one is never copied (but glibc's libc), and a thread stopped in a module that
// defines one never takes a remote call (clean_thread.h): the call runs
// malloc, which may be that allocator, stopped halfway through.
std::string_view allocator_defined(const profiler::Module& module);

// Why the library at `path` is never copied, or "": ld.so, older glibcs'
// libc-2.*.so and libpthread, musl's libc, and the modules whose code may
// hold the locks a remote call takes (module_holds_call_locks: libgcc_s's
// unwinder, allocators). glibc's libc.so.6 is copied less what must stay in
// place (inject/module_policy.h: system call sites, __restore_rt, the clone
// sequence, malloc, cancellation).
std::string why_library_stays(std::string_view path);
// Whether `path` is glibc's libc (libc.so.6, glibc 2.34 and later).
bool is_glibc_libc(std::string_view path);

}  // namespace dyni
