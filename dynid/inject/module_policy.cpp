// What stays in place in a copied module (module_policy.h).
#include "dynid/inject/module_policy.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "dynid/clean_thread.h"

namespace dyni::inject {
namespace {

// Cancellation's own functions (glibc 2.36's names, with libc6-dbg; most
// have no exported name): a cancelled thread unwinds from them.
constexpr std::string_view kCancellation[] = {
    "pthread_testcancel", "__pthread_testcancel", "__do_cancel", "__pthread_unwind", "__pthread_unwind_next",
    "__pthread_enable_asynccancel", "__pthread_disable_asynccancel", "sigcancel_handler", "__libc_unwind_longjmp",
    "__libc_longjmp", "__longjmp", "____longjmp_chk", "__longjmp_chk", "__pthread_cleanup_upto"};
constexpr std::string_view kContextTrampolines[] = {"__start_context", "__push___start_context"};

// The glibc versions whose libc this policy was made for: 2.34 merged
// libpthread into libc; 2.36 is Debian 12's, the one studied. 2.41 moved
// cancellation into __syscall_cancel with a PC-range check in its handler.
constexpr int kOldestGlibc = 34, kNewestGlibc = 36;

// Why `name` (a plain name) keeps its function in place, or "".
std::string why_kept(std::string_view name) {
  if (holds_call_locks(name)) return fmt::format("{} may hold a lock a remote call of dyni's takes (clean_thread.h)", name);
  for (std::string_view c : kCancellation)
    if (name == c) return fmt::format("{} is thread cancellation's: a cancelled thread unwinds from it", name);
  for (std::string_view t : kContextTrampolines)
    if (name == t) return fmt::format("{} is makecontext's trampoline, the bottom of a context's stack", name);
  return "";
}

}  // namespace

std::vector<elf::Symbol> function_symbols_with_debug(const elf::ElfFile& file) {
  std::vector<elf::Symbol> out;
  if (auto own = file.function_symbols()) out = std::move(*own);
  const std::string debug = elf::debug_file_path(file.build_id());
  if (debug.empty() || ::access(debug.c_str(), R_OK) != 0) return out;
  auto opened = elf::ElfFile::open_symbols(debug);
  auto names = opened ? opened->function_symbols() : fail("");
  if (names) out.insert(out.end(), names->begin(), names->end());
  return out;
}

int glibc_minor_version(const elf::ElfFile& file) {
  const elf::Section* dynstr = file.find_section(".dynstr");
  auto bytes = dynstr ? file.contents(*dynstr) : fail("no .dynstr");
  if (!bytes) return 0;
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  constexpr std::string_view kPrefix = "GLIBC_2.";
  int newest = 0;
  for (std::size_t at = text.find(kPrefix); at != std::string_view::npos; at = text.find(kPrefix, at + 1)) {
    // A version name is the whole string: "GLIBC_2.36", not "GLIBC_2.36.x" nor "GLIBC_PRIVATE".
    const char* digits = text.data() + at + kPrefix.size();
    const char* end = text.data() + text.size();
    int minor = 0;
    auto [next, ec] = std::from_chars(digits, end, minor);
    if (ec == std::errc() && next < end && *next == '\0' && (at == 0 || text[at - 1] == '\0')) newest = std::max(newest, minor);
  }
  return newest;
}

Result<std::map<uint64_t, std::string>> libc_functions_kept_in_place(const elf::ElfFile& file,
                                                                     const elf::FunctionTable& functions) {
  const int minor = glibc_minor_version(file);
  if (minor < kOldestGlibc || minor > kNewestGlibc)
    return fail(fmt::format("glibc 2.{}'s libc stays as it is: dyni's rules for what must stay in place were made for "
                            "glibc 2.{} to 2.{}", minor, kOldestGlibc, kNewestGlibc));
  // Every name of each function (the file's and libc6-dbg's, which name
  // the same address differently), plain (plain_symbol_name).
  std::map<uint64_t, std::string> kept;
  std::set<std::string> found;
  for (const elf::Symbol& s : function_symbols_with_debug(file)) {
    const elf::Function* f = functions.find(s.addr);
    if (!f || f->addr != s.addr) continue;
    const std::string_view plain = plain_symbol_name(s.name);
    if (std::string why = why_kept(plain); !why.empty()) {
      kept.emplace(f->addr, std::move(why));
      found.emplace(plain);
    }
  }
  // Names this policy relies on: without them, it does not know this libc.
  for (const char* needed : {"malloc", "free", "calloc", "realloc", "pthread_testcancel"})
    if (!found.count(needed)) return fail(fmt::format("its {} was not found by name: dyni does not know this libc", needed));
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

Status fit_to_unwinder(TargetModule& module, uint64_t register_frame) {
  if (register_frame || !module.file->find_section(".gcc_except_table")) return ok();
  if (!module.system_library)
    return fail(module.module->path + " has exception tables but no libgcc_s is loaded to register the cache's frames with");
  module.only_leaves = true;
  return ok();
}

}  // namespace dyni::inject
