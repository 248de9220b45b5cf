// One scan of /proc for processes whose executable is listed in [exeList].
#include "dynid/discovery.h"

namespace dyni {

std::string basename_of(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool exe_listed(const std::vector<std::string>& exe_list, const std::string& exe_path) {
  std::string base = basename_of(exe_path);
  for (const auto& entry : exe_list) {
    bool is_path = entry.find('/') != std::string::npos;
    if (is_path ? entry == exe_path : entry == base) return true;
  }
  return false;
}

std::vector<DiscoveredProcess> discover(const std::vector<std::string>& exe_list,
                                        const std::string& proc_root, pid_t self) {
  std::vector<DiscoveredProcess> found;
  if (exe_list.empty()) return found;
  for (pid_t pid : list_pids(proc_root)) {
    if (pid == self) continue;
    auto exe = read_exe(proc_root, pid);  // fails for kernel threads and exited pids
    if (!exe || !exe_listed(exe_list, exe->path)) continue;
    auto stat = read_proc_stat(proc_root, pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') continue;
    found.push_back({*stat, *exe, basename_of(exe->path), read_mount_namespace(proc_root, pid)});
  }
  return found;
}

}  // namespace dyni
