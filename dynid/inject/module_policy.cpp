// What stays in place in a copied module (module_policy.h).
#include "dynid/inject/module_policy.h"

#include <array>
#include <string_view>

#include "dynid/clean_thread.h"

namespace dyni::inject {
namespace {

// Cancellation's own functions (glibc 2.36's names, with libc6-dbg; most
// have no exported name): a cancelled thread unwinds from them.
constexpr std::array<std::string_view, 13> kCancellation = {
    "pthread_testcancel",         "__pthread_testcancel",       "__do_cancel",          "__pthread_unwind",
    "__pthread_unwind_next",      "__pthread_enable_asynccancel", "__pthread_disable_asynccancel",
    "sigcancel_handler",          "__libc_unwind_longjmp",      "__libc_longjmp",       "__longjmp",
    "____longjmp_chk",            "__pthread_cleanup_upto"};
constexpr std::array<std::string_view, 2> kContextTrampolines = {"__start_context", "__push___start_context"};

}  // namespace

std::map<uint64_t, std::string> libc_functions_kept_in_place(const elf::FunctionTable& functions) {
  std::map<uint64_t, std::string> kept;
  for (const elf::Function& f : functions.functions()) {
    if (f.name.empty()) continue;
    if (holds_call_locks(f.name))
      kept[f.addr] = f.name + " may hold a lock a remote call of dyni's takes (clean_thread.h)";
    for (std::string_view c : kCancellation)
      if (f.name == c) kept[f.addr] = f.name + " is thread cancellation's: a cancelled thread unwinds from it";
    for (std::string_view t : kContextTrampolines)
      if (f.name == t) kept[f.addr] = f.name + " is makecontext's trampoline, the bottom of a context's stack";
  }
  return kept;
}

Result<jit::ModuleInput> jit_input(const TargetModule& module, const jit::ModuleProfile* profile,
                                   std::vector<uint64_t> hot, uint64_t cache_base) {
  jit::ModuleInput input{module.module->functions.get(), module.image.get(), profile, std::move(hot), cache_base,
                         module.plt, {}, 0};
  jit::use_unwind_info(input, *module.file);
  if (auto probes = jit::use_probe_sites(input, *module.file); !probes) return std::unexpected(probes.error());
  input.caller_lookups = module.caller_lookups;
  input.kept_in_place = module.kept_in_place;
  input.keep_system_call_functions = module.system_library;
  input.only_leaves = module.only_leaves;
  return input;
}

}  // namespace dyni::inject
