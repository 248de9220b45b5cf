// Choosing the module of a target that dyni optimizes (module_choice.h).
#include "dynid/module_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/paths.h"
#include "dynid/clean_thread.h"
#include "elf/elf_file.h"

namespace dyni {

std::vector<std::pair<std::string, double>> module_shares(const profiler::Profile& profile,
                                                          const profiler::Symbolizer& symbolizer) {
  std::map<int, uint64_t> by_module;
  for (const auto& [key, f] : profile.functions()) by_module[key.first] += f.samples;
  std::vector<std::pair<std::string, double>> shares;
  const auto& modules = symbolizer.modules();
  for (const auto& [index, samples] : by_module)
    if (index >= 0 && static_cast<std::size_t>(index) < modules.size() && profile.total() > 0)
      shares.emplace_back(modules[static_cast<std::size_t>(index)].path,
                          static_cast<double>(samples) / static_cast<double>(profile.total()));
  if (profile.total() > 0 && profile.outside_modules() > 0)
    shares.emplace_back(kOutsideModules, static_cast<double>(profile.outside_modules()) /
                                             static_cast<double>(profile.total()));
  std::stable_sort(shares.begin(), shares.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return shares;
}

ModuleChoice choose_module(const std::vector<std::pair<std::string, double>>& shares, const std::string& exe_path,
                           const WhyModuleStays& why_stays, bool all_hot, double min_share) {
  ModuleChoice choice;
  double exe = 0;
  for (const auto& [path, share] : shares)
    if (path == exe_path) exe += share;
  std::string hottest_why;  // the hottest module's reason, said when none is chosen
  for (const auto& [path, share] : shares) {
    if (share < min_share) break;  // hottest first
    std::string why = path == kOutsideModules ? "dyni optimizes code from files" : why_stays(path);
    if (!why.empty()) {
      if (hottest_why.empty())
        hottest_why = fmt::format("{:.0f} % of samples in {}, which dyni does not optimize: {}", 100 * share, path, why);
      choice.passed_over.push_back(fmt::format("{} ({:.0f} %): {}", path, 100 * share, why));
    } else if (choice.path.empty()) {
      choice.path = path;
      choice.executable = path == exe_path;
    } else {
      choice.also.push_back(path);
    }
    if (!choice.path.empty() && !all_hot) break;  // the colder modules are not asked about
  }
  if (!choice.path.empty()) return choice;
  if (hottest_why.empty())
    choice.why_none = fmt::format("no module holds {:.0f} % of samples (the executable holds {:.2f} %)",
                                  100 * min_share, 100 * exe);
  else
    choice.why_none = fmt::format("{}; the executable holds {:.2f} %", hottest_why, 100 * exe);
  return choice;
}

bool is_glibc_libc(std::string_view path) { return paths::file_name(path) == "libc.so.6"; }

std::string why_library_stays(std::string_view path) {
  std::string_view base = paths::file_name(path);
  // glibc's names since 2.34 and before it (libc-2.31.so, ld-2.31.so), musl's.
  // glibc's libc.so.6 is copied, less the functions that must stay
  // (inject/module_policy.h); an older glibc's libc-2.*.so, its separate
  // libpthread and musl's libc are not studied.
  for (std::string_view kept : {"ld-linux", "ld-2.", "ld-musl", "libc-2.", "libc.musl", "libpthread", "libdl.so",
                                "libdl-2.", "librt.so", "librt-2."})
    if (base.starts_with(kept))
      return fmt::format("{} stays as it is: dyni's remote calls and stack proofs rely on its code (system call "
                         "sites, __restore_rt, the clone sequence, malloc)", base);
  if (module_holds_call_locks(path))
    return fmt::format("{} stays as it is: its code may hold the locks a remote call takes (the unwinder, an "
                       "allocator)", base);
  return "";
}

std::string_view allocator_defined(const profiler::Module& module) {
  if (!module.functions) return "";
  for (const elf::Function& f : module.functions->functions())
    for (std::string_view allocator : {"malloc", "free", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc"})
      if (f.name == allocator) return allocator;
  return "";
}

std::string why_module_stays(const profiler::Symbolizer& symbols, const std::string& path, const std::string& exe_path) {
  const profiler::Module* module = nullptr;
  for (const profiler::Module& m : symbols.modules())
    if (m.path == path) module = &m;
  if (!module) return "it is not mapped as code";
  if (!module->error.empty()) return "it could not be read: " + module->error;
  if (!module->functions || module->functions->functions().empty()) return "it has no function table";
  // ld.so run as the executable (`ld-linux-x86-64.so.2 ./prog`) stays too.
  if (std::string why = why_library_stays(path); !why.empty()) return why;
  if (path == exe_path) return "";
  // An allocator under a name not listed: remote calls run malloc, and a
  // thread stopped in the copied library's code may take one. glibc's
  // allocator stays in place by name, the rest of libc is copied.
  if (std::string_view allocator = is_glibc_libc(path) ? "" : allocator_defined(*module); !allocator.empty())
    return fmt::format("{} stays as it is: it defines {} (an allocator: remote calls take its locks)",
                       paths::file_name(path), allocator);
  if (module->deleted) return "its file was replaced or deleted on disk since it was loaded (restart the process)";
  auto notes = elf::ElfFile::open_notes(path);
  if (!notes) return "its file cannot be read: " + notes.error().message();
  if (notes->build_id().empty()) return "it has no build-id (the cache's record names its module by it)";
  return "";
}

}  // namespace dyni
