// One scan of /proc for processes whose executable is listed in [exeList],
// and the symlink resolution of [exeList] that the scans match against.
#include "dynid/discovery.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_set>

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

ProcessIdentities::ProcessIdentities(std::unique_ptr<ExecWatch> watch) : watch_(std::move(watch)) {
  rlimit files{};
  if (watch_ && ::getrlimit(RLIMIT_NOFILE, &files) == 0)
    max_kept_fds_ = std::min<std::size_t>(512, static_cast<std::size_t>(files.rlim_cur / 8));
}

const std::vector<pid_t>& ProcessIdentities::begin_scan(const std::string& proc_root, int64_t now_ms) {
  now_ms_ = now_ms;
  read_ = 0;
  ExecWatch::Changes changes = watch_ ? watch_->drain() : ExecWatch::Changes{.all = true, .pids = {}};
  if (changes.all) known_.clear();
  for (pid_t pid : changes.pids) known_.erase(pid);
  // No process born or gone since the last drain, which came before the
  // last listing: that listing still holds (a zombie reaped since is not
  // reported; its pid then reads as nothing).
  const bool unchanged = listed_ms_ > 0 && !changes.all && changes.pids.empty() && now_ms - listed_ms_ < kRefreshMs;
  if (!unchanged) {
    pids_ = list_pids(proc_root);
    listed_ = std::unordered_set<pid_t>(pids_.begin(), pids_.end());
    listed_ms_ = now_ms;
  }
  // Refreshed at one of eight ages up to kRefreshMs, by pid: the hundreds
  // read in one scan (dynid's first, a burst of workers) are not all read
  // again in one later scan, which -status would wait for.
  std::erase_if(known_, [&](const auto& entry) {
    const int64_t refresh_ms = kRefreshMs - (entry.first % 8) * (kRefreshMs / 16);
    return !listed_.contains(entry.first) || now_ms - entry.second.read_ms >= refresh_ms;
  });
  kept_fds_ = std::count_if(known_.begin(), known_.end(), [](const auto& entry) { return entry.second.stat_fd.fd >= 0; });
  return pids_;
}

ProcessIdentity::KeptFd& ProcessIdentity::KeptFd::operator=(KeptFd&& other) noexcept {
  if (this != &other) {
    if (fd >= 0) ::close(fd);
    fd = std::exchange(other.fd, -1);
  }
  return *this;
}

ProcessIdentity::KeptFd::~KeptFd() {
  if (fd >= 0) ::close(fd);
}

Result<ProcStat> ProcessIdentities::stat_of(ProcessIdentity& id, const std::string& proc_root, pid_t pid) {
  if (id.last_stat && id.stat_skips_left > 0) {
    --id.stat_skips_left;
    ProcStat reused = *id.last_stat;
    reused.reused = true;
    return reused;
  }
  auto stat = read_stat(id, proc_root, pid);
  if (!stat || !watch_) return stat;
  // Idle since its last read: read again kIdleStatStride scans later.
  // (A parent whose children come and go, each reaped, is not idle: its
  // group's CPU counts their time, group_cpu.h.)
  const bool idle = id.last_stat && id.last_stat->cpu_ticks == stat->cpu_ticks &&
                    id.last_stat->children_ticks == stat->children_ticks;
  id.stat_skips_left = idle ? kIdleStatStride - 1 : 0;
  id.last_stat = *stat;
  return stat;
}

Result<ProcStat> ProcessIdentities::read_stat(ProcessIdentity& id, const std::string& proc_root, pid_t pid) {
  if (id.stat_fd.fd < 0 && kept_fds_ < max_kept_fds_) {
    id.stat_fd.fd = ::open(fmt::format("{}/{}/stat", proc_root, pid).c_str(), O_RDONLY | O_CLOEXEC);
    kept_fds_ += id.stat_fd.fd >= 0;
  }
  if (id.stat_fd.fd < 0) return read_proc_stat(proc_root, pid);
  char text[4096];  // one line of about 300 bytes
  const ssize_t n = ::pread(id.stat_fd.fd, text, sizeof text, 0);
  if (n <= 0 || static_cast<std::size_t>(n) == sizeof text) return fail(fmt::format("cannot read {}/{}/stat", proc_root, pid));
  return parse_proc_stat(std::string(text, static_cast<std::size_t>(n)));
}

ProcessIdentity& ProcessIdentities::of(const std::string& proc_root, pid_t pid) {
  auto [it, added] = known_.try_emplace(pid);
  if (!added) return it->second;
  ++read_;
  ProcessIdentity& id = it->second;
  id.read_ms = now_ms_;
  if (auto exe = read_exe(proc_root, pid)) id.exe = std::move(*exe);  // fails for kernel threads and exited pids
  return id;
}

namespace {

const std::string& mount_ns_of(ProcessIdentity& id, const std::string& proc_root, pid_t pid) {
  if (!id.mount_ns) id.mount_ns = read_mount_namespace(proc_root, pid);
  return *id.mount_ns;
}

std::pair<uint64_t, uint64_t> exe_file_of(ProcessIdentity& id, const std::string& proc_root, pid_t pid) {
  if (!id.exe_file) {
    struct stat file{};
    id.exe_file = ::stat(fmt::format("{}/{}/exe", proc_root, pid).c_str(), &file) == 0
                      ? std::pair<uint64_t, uint64_t>{file.st_dev, file.st_ino}
                      : std::pair<uint64_t, uint64_t>{0, 0};
  }
  return *id.exe_file;
}

// True when `stat` is of the process `id` was read from (the first stat read
// with it says which): not a new process under a reused pid, nor an exec.
bool same_process(ProcessIdentity& id, const ProcStat& stat) {
  if (!id.start_time) id.start_time = stat.start_time, id.image = stat.image;
  return id.start_time == stat.start_time && id.image == stat.image;
}

// `pid` as a target, if its executable is listed.
std::optional<DiscoveredProcess> examine(const ExeMatcher& matcher, const std::string& proc_root, pid_t pid,
                                         const std::string& own_ns, ProcessIdentities& known) {
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second with all read afresh
    ProcessIdentity& id = known.of(proc_root, pid);
    if (!id.exe) return std::nullopt;
    // Its mount namespace only where it matters: a match, or an executable
    // that a listed symlink leads to.
    auto match = match_exe(matcher, id.exe->path, false);
    const bool linked = std::any_of(matcher.symlinks.begin(), matcher.symlinks.end(),
                                    [&](const ExeSymlink& s) { return s.target == id.exe->path; });
    if (!match && !linked) return std::nullopt;
    const std::string& ns = mount_ns_of(id, proc_root, pid);
    if (!match) match = match_exe(matcher, id.exe->path, !ns.empty() && ns == own_ns);
    if (!match) return std::nullopt;
    auto stat = known.stat_of(id, proc_root, pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') return std::nullopt;
    if (!same_process(id, *stat)) {
      known.forget(pid);
      continue;
    }
    // A listed process's link again with each stat read afresh: an upgrade
    // deletes its file (shown as exe_deleted), a rename moves it (matched
    // anew from the start).
    if (!stat->reused && !known.read_this_scan(id)) {
      auto exe = read_exe(proc_root, pid);
      if (!exe) return std::nullopt;
      if (exe->path != id.exe->path) {
        known.forget(pid);
        continue;
      }
      id.exe->deleted = exe->deleted;
    }
    DiscoveredProcess p{*stat, *id.exe, basename_of(id.exe->path), ns, *match};
    std::tie(p.exe_dev, p.exe_ino) = exe_file_of(id, proc_root, pid);
    return p;
  }
  return std::nullopt;
}

}  // namespace

std::vector<DiscoveredProcess> discover(const ExeMatcher& matcher, const std::string& proc_root, pid_t self,
                                        ProcessIdentities* known) {
  std::vector<DiscoveredProcess> found;
  ProcessIdentities read_all(nullptr);
  ProcessIdentities& ids = known ? *known : read_all;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  // Even with nothing listed: the events queue up otherwise.
  const std::vector<pid_t>& pids = ids.begin_scan(proc_root, std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  if (matcher.entries.empty()) return found;
  const std::string own_ns = read_mount_namespace(proc_root, ::getpid());
  for (pid_t pid : pids)
    if (pid != self)
      if (auto p = examine(matcher, proc_root, pid, own_ns, ids)) found.push_back(std::move(*p));
  return found;
}

}  // namespace dyni
