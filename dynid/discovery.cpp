// One scan of /proc for processes whose executable is listed in [exeList],
// and the symlink resolution of [exeList] that the scans match against.
#include "dynid/discovery.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

namespace dyni {

std::string basename_of(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

namespace {

bool is_path_entry(const std::string& entry) { return entry.find('/') != std::string::npos; }

// Adds `link`'s symlink for `entry` when it leads to a file of another
// basename, not yet known for this entry.
void add_symlink(ExeMatcher& matcher, const std::string& entry, const std::string& link) {
  std::error_code ec;
  std::string target = std::filesystem::canonical(link, ec).string();
  if (ec || basename_of(target) == basename_of(entry)) return;
  for (const ExeSymlink& known : matcher.symlinks)
    if (known.entry == entry && known.target == target) return;
  matcher.symlinks.push_back({entry, link, target});
}

}  // namespace

ExeMatcher resolve_exe_list(const std::vector<std::string>& exe_list,
                            const std::vector<std::string>& bin_dirs) {
  ExeMatcher matcher{exe_list, {}};
  for (const std::string& entry : exe_list) {
    if (is_path_entry(entry)) {
      add_symlink(matcher, entry, entry);
      continue;
    }
    for (const std::string& dir : bin_dirs) add_symlink(matcher, entry, dir + "/" + entry);
  }
  return matcher;
}

std::optional<ExeMatch> match_exe(const ExeMatcher& matcher, const std::string& exe_path,
                                  bool same_mount_ns) {
  for (const std::string& entry : matcher.entries)
    if (is_path_entry(entry) && entry == exe_path) return ExeMatch{entry, "path"};
  std::string base = basename_of(exe_path);
  for (const std::string& entry : matcher.entries)
    if (!is_path_entry(entry) && entry == base) return ExeMatch{entry, "basename"};
  if (!same_mount_ns) return std::nullopt;
  for (const ExeSymlink& s : matcher.symlinks)
    if (s.target == exe_path) return ExeMatch{s.entry, s.link + " -> " + s.target};
  return std::nullopt;
}

std::vector<DiscoveredProcess> discover(const ExeMatcher& matcher, const std::string& proc_root,
                                        pid_t self) {
  std::vector<DiscoveredProcess> found;
  if (matcher.entries.empty()) return found;
  std::string own_ns = read_mount_namespace(proc_root, ::getpid());
  for (pid_t pid : list_pids(proc_root)) {
    if (pid == self) continue;
    auto exe = read_exe(proc_root, pid);  // fails for kernel threads and exited pids
    if (!exe) continue;
    // Its mount namespace only where it matters (each scan reads every
    // process): a match, or an executable that a listed symlink leads to.
    auto match = match_exe(matcher, exe->path, false);
    const bool linked = std::any_of(matcher.symlinks.begin(), matcher.symlinks.end(),
                                    [&](const ExeSymlink& s) { return s.target == exe->path; });
    if (!match && !linked) continue;
    std::string ns = read_mount_namespace(proc_root, pid);
    if (!match) match = match_exe(matcher, exe->path, !ns.empty() && ns == own_ns);
    if (!match) continue;
    auto stat = read_proc_stat(proc_root, pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') continue;
    DiscoveredProcess p{*stat, *exe, basename_of(exe->path), ns, *match};
    struct stat file{};
    if (::stat(fmt::format("{}/{}/exe", proc_root, pid).c_str(), &file) == 0)
      p.exe_dev = file.st_dev, p.exe_ino = file.st_ino;
    found.push_back(std::move(p));
  }
  return found;
}

}  // namespace dyni
