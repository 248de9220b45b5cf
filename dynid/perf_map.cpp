// perf's map for dyni's copies (perf_map.h).
#include "dynid/perf_map.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/printable.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {

// The numbers of a field of /proc/PID/status ("Uid:", "NSpid:").
std::vector<uint64_t> numbers(const std::string& field) {
  std::istringstream values(field);
  std::vector<uint64_t> out;
  for (uint64_t v = 0; values >> v;) out.push_back(v);
  return out;
}

// When the process started, in seconds since the epoch (boot time + its start in ticks).
double started_at(uint64_t start_time) {
  std::ifstream in("/proc/stat");
  std::string key;
  uint64_t btime = 0;
  while (in >> key)
    if (key == "btime" && in >> btime) break;
  return static_cast<double>(btime) + static_cast<double>(start_time) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool same_process(pid_t pid, uint64_t start_time) {
  auto s = read_proc_stat("/proc", pid);
  return s && s->start_time == start_time;
}

// The calling thread's filesystem uid and gid are the target's while it
// lives: the kernel then checks every step (the sticky /tmp, who may unlink
// what) as for a JIT in the target, and files it creates are the target's.
// setfsuid is per thread (the raw system calls; glibc does not broadcast them).
class TargetFsIds {
 public:
  TargetFsIds(uid_t uid, gid_t gid) {
    ::syscall(SYS_setfsgid, gid);
    ::syscall(SYS_setfsuid, uid);
  }
  ~TargetFsIds() {
    ::syscall(SYS_setfsuid, 0);
    ::syscall(SYS_setfsgid, 0);
  }
  TargetFsIds(const TargetFsIds&) = delete;
  TargetFsIds& operator=(const TargetFsIds&) = delete;
};

// `path` below the target's root `root`, resolved inside it: no symlink at
// any step, no jump out of that root, no magic link; `also`: more RESOLVE_ flags.
int open_in_root(int root, const std::string& path, uint64_t flags, uint64_t mode, uint64_t also = 0) {
  open_how how{};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.mode = mode;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | also;
  return static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
}

// Whether process `pid` is seen holding the file (dev, ino) open; `ec` is
// set when its fds could not be read.
bool seen_holding(pid_t pid, dev_t dev, ino_t ino, std::error_code& ec) {
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    struct stat st{};
    if (::stat(e.path().c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino) return true;
  }
  return false;
}

// Whether process `pid` holds the file (dev, ino) open; true when that
// cannot be told (its fds unreadable): the file is then left alone.
bool held_open_by(pid_t pid, dev_t dev, ino_t ino) {
  std::error_code ec;
  return seen_holding(pid, dev, ino, ec) || ec;
}

// Whether some other process is seen holding the file (dev, ino) open
// (dynid holds it itself, through the O_PATH descriptor it looks with).
// Scans every process: only for another user's old map. A process whose
// fds cannot be read (a zombie, one exiting) holds nothing here.
bool held_open_anywhere(dev_t dev, ino_t ino) {
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    std::error_code unreadable;
    if (pid != ::getpid() && seen_holding(pid, dev, ino, unreadable)) return true;
  }
  return false;
}

// perf's name for the map of the process whose /proc/PID/status is
// `status`: its pid in its own pid namespace (NSpid's last).
std::string map_name(const std::string& status, pid_t pid) {
  std::vector<uint64_t> nspids = numbers(status_field(status, "NSpid:"));
  return fmt::format("perf-{}.map", nspids.empty() ? static_cast<uint64_t>(pid) : nspids.back());
}

// Process (pid, start_time)'s root, in its mount namespace (a unit's
// PrivateTmp= included), opened while it is that process (a pid reused
// meanwhile is another's).
Result<int> process_root(pid_t pid, uint64_t start_time) {
  int root = ::open(fmt::format("/proc/{}/root", pid).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail("its root: " + errno_text());
  if (!same_process(pid, start_time)) {
    ::close(root);
    return fail("the process is gone");
  }
  return root;
}

// An existing map, opened to append only when it is a plain file of the
// target's owner that the target does not hold open (a JIT in it writing
// its own map at its own offset would overwrite dyni's lines, or cut one):
// looked at through an O_PATH descriptor first (no device or FIFO is ever
// opened), then reopened through it. -1: a dead process's map, to be made anew.
Result<int> open_existing(pid_t pid, int root, const std::string& path, uid_t uid, double started) {
  int at = open_in_root(root, path, O_PATH, 0);
  if (at < 0) return fail(errno_text());
  struct stat st{};
  std::string why;
  if (::fstat(at, &st) != 0) why = "fstat: " + errno_text();
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (st.st_nlink != 1) why = "it has other links";
  else if (held_open_by(pid, st.st_dev, st.st_ino)) why = "the target's own JIT keeps this map (it holds it open)";
  if (!why.empty()) {
    ::close(at);
    return fail(why);
  }
  // Older than the process: a dead process's with the same pid, whoever
  // owned it (a postgres backend's map, and then a root process with its
  // pid). Removed as the target's owner (the kernel says whether it may:
  // the sticky /tmp) and made anew by the caller, never appended to: perf
  // would name the new process's code by the dead one's lines.
  // Another user's map may be a live process's that shares this /tmp from
  // another pid namespace (containers of one pod): kept while any process
  // holds it open, as a JIT keeps its map.
  if (static_cast<double>(st.st_mtim.tv_sec) < started - 2) {
    const bool live_elsewhere = st.st_uid != uid && held_open_anywhere(st.st_dev, st.st_ino);
    ::close(at);
    if (live_elsewhere) return fail(fmt::format("owned by uid {} and held open by another process", st.st_uid));
    return -1;
  }
  if (st.st_uid != uid) {
    ::close(at);
    return fail(fmt::format("owned by uid {}, not the target's {}", st.st_uid, uid));
  }
  int fd = ::open(fmt::format("/proc/self/fd/{}", at).c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  const int err = errno;
  ::close(at);
  if (fd < 0) return fail(errno_text(err));
  return fd;
}

// Every line of `text` one of dyni's ("START SIZE NAME [dyni]").
bool only_dynis_lines(std::string_view text) {
  if (text.empty()) return false;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string_view line = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (!line.ends_with(" [dyni]")) return false;
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return true;
}

}  // namespace

std::size_t StalePerfMaps::exited(pid_t pid, uint64_t start_time, uint64_t image, const PerfMapHere& here) {
  constexpr std::size_t kMaxKept = 4096;  // the oldest pids are forgotten past this
  exited_[pid] = {start_time, image};
  if (exited_.size() > kMaxKept) exited_.erase(exited_.begin());
  if (here.path.empty()) return 0;
  here_.emplace_back(pid, here);
  return trim_here();
}

// The oldest maps in dynid's view past the last kept_here_; one written
// less than a minute ago waits (the others are newer), for the next call.
std::size_t StalePerfMaps::trim_here() {
  std::size_t removed = 0;
  while (here_.size() > kept_here_) {
    const auto& [pid, map] = here_.front();
    auto r = remove_dead_perf_map(pid, map);
    if (r && !*r) break;
    if (r) ++removed;
    else log::debug("perf map {} (of an exited process, past the {} kept): {}", map.path, kept_here_, r.error().message());
    here_.pop_front();
  }
  return removed;
}

namespace {

// The pids that processes in nested pid namespaces (containers) have there:
// a map named perf-N.map in a /tmp they share with the host may be theirs.
std::set<pid_t> pids_inside_namespaces() {
  std::set<pid_t> out;
  for (pid_t pid : list_pids("/proc")) {
    auto status = read_file(fmt::format("/proc/{}/status", pid), 1 << 16);
    std::vector<uint64_t> nspids = status ? numbers(status_field(*status, "NSpid:")) : std::vector<uint64_t>{};
    if (nspids.size() > 1) out.insert(static_cast<pid_t>(nspids.back()));
  }
  return out;
}

}  // namespace

std::size_t StalePerfMaps::take_over_leftovers(const std::string& dir) {
  std::vector<std::pair<int64_t, std::pair<pid_t, PerfMapHere>>> found;  // by modification time
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::filesystem::directory_entry& e = *it;
    const std::string name = e.path().filename();
    pid_t pid = 0;
    if (std::sscanf(name.c_str(), "perf-%d.map", &pid) != 1 || name != fmt::format("perf-{}.map", pid) || pid <= 0)
      continue;
    struct stat st{};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // a live process's, or its pid another's: sweep's part
    found.push_back({st.st_mtim.tv_sec, {pid, PerfMapHere{e.path().string(), st.st_dev, st.st_ino}}});
  }
  if (!found.empty()) {
    const std::set<pid_t> inside = pids_inside_namespaces();  // maybe a container's live process's
    std::erase_if(found, [&](const auto& f) { return inside.contains(f.second.first); });
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [mtime, map] : found) here_.push_back(std::move(map));
  return trim_here();
}

std::size_t StalePerfMaps::sweep(const std::unordered_set<pid_t>& listed) {
  std::size_t removed = trim_here();
  for (auto it = exited_.begin(); it != exited_.end();) {
    const pid_t pid = it->first;
    const bool free = listed.empty() ? ::kill(pid, 0) != 0 && errno == ESRCH : !listed.contains(pid);
    if (free) {  // still free: the map stays for perf report
      ++it;
      continue;
    }
    auto now = read_proc_stat("/proc", pid);
    if (!now || (now->start_time == it->second.start_time && now->image == it->second.image)) {
      ++it;  // unreadable, or the same process (still there, no longer a target)
      continue;
    }
    if (auto r = remove_stale_perf_map(pid, now->start_time)) ++removed;
    else log::debug("perf map of pid {} (a dead process's, the pid now another's): {}", pid, r.error().message());
    it = exited_.erase(it);
  }
  return removed;
}

namespace {

// What dyni removes: a plain file (one link) of `dir`, never one on another
// mount (a FUSE file could stall dynid), `expected`'s file when given.
struct Found {
  int fd = -1;
  struct stat st{};
};
Result<Found> plain_file(int dir, const std::string& name, const PerfMapHere* expected) {
  Found f;
  f.fd = open_in_root(dir, name, O_PATH, 0, RESOLVE_NO_XDEV);
  if (f.fd < 0) return errno == ENOENT ? Found{} : Result<Found>(fail(errno_text()));
  if (::fstat(f.fd, &f.st) != 0 || !S_ISREG(f.st.st_mode) || f.st.st_nlink != 1 ||
      (expected && (f.st.st_dev != expected->dev || f.st.st_ino != expected->ino))) {
    ::close(f.fd);
    return fail("not a plain file, or not the one dyni wrote");
  }
  return f;
}

// Removes `name` in directory `dir` if it is a plain file (`expected`'s
// when given) written before `written_before` (seconds since the epoch)
// whose every line is dyni's. true: removed, or none; false: written since.
// The unlink runs as the file's owner: in the sticky /tmp the kernel then
// refuses an entry that another user swapped in after the checks.
Result<bool> remove_if_dynis(int dir, const std::string& name, double written_before, const PerfMapHere* expected) {
  auto found = plain_file(dir, name, expected);
  if (!found) return std::unexpected(found.error());
  if (found->fd < 0) return true;
  const struct stat& st = found->st;
  Result<bool> out = true;
  if (static_cast<double>(st.st_mtim.tv_sec) >= written_before) out = false;
  else if (auto text = read_file(fmt::format("/proc/self/fd/{}", found->fd), 16 << 20); !text || !only_dynis_lines(*text))
    out = fail("not dyni's alone");
  else if (TargetFsIds as_owner(st.st_uid, st.st_gid); ::unlinkat(dir, name.c_str(), 0) != 0)
    out = fail("unlink: " + errno_text());
  ::close(found->fd);
  return out;
}

double now_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

}  // namespace

Status remove_stale_perf_map(pid_t pid, uint64_t start_time) {
  auto status = read_file(fmt::format("/proc/{}/status", pid), 1 << 16);
  if (!status) return fail("its status: " + status.error().message());
  const std::string name = map_name(*status, pid);
  Result<int> root = process_root(pid, start_time);
  if (!root) return std::unexpected(root.error());
  int dir = open_in_root(*root, "tmp", O_PATH | O_DIRECTORY, 0);
  ::close(*root);
  if (dir < 0) return fail("its /tmp: " + errno_text());
  auto removed = remove_if_dynis(dir, name, started_at(start_time) - 2, nullptr);
  ::close(dir);
  if (!removed) return std::unexpected(removed.error());
  return *removed ? ok() : fail("written for the new process");
}

PerfMapHere perf_map_seen_here(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid), 1 << 16);
  if (!status) return {};
  const std::string name = map_name(*status, pid);
  struct stat theirs{}, ours{};
  const std::string here = "/tmp/" + name;
  if (::lstat(fmt::format("/proc/{}/root/tmp/{}", pid, name).c_str(), &theirs) != 0 || ::lstat(here.c_str(), &ours) != 0)
    return {};
  if (!S_ISREG(ours.st_mode) || ours.st_dev != theirs.st_dev || ours.st_ino != theirs.st_ino) return {};
  return {here, ours.st_dev, ours.st_ino};
}

Result<bool> remove_dead_perf_map(pid_t pid, const PerfMapHere& map) {
  if (::kill(pid, 0) == 0 || errno != ESRCH) return fail("its pid is another process's");  // sweep's part
  const std::size_t slash = map.path.rfind('/');
  if (slash == std::string::npos || slash == 0) return fail("not a path in a directory");
  const int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail("/: " + errno_text());
  int dir = open_in_root(root, map.path.substr(0, slash), O_PATH | O_DIRECTORY, 0);
  ::close(root);
  if (dir < 0) return errno == ENOENT ? Result<bool>(true) : fail("its directory: " + errno_text());
  constexpr double kUnchangedFor = 60;  // seconds: a new process with the pid would have written it just now
  auto out = remove_if_dynis(dir, map.path.substr(slash + 1), now_seconds() - kUnchangedFor, &map);
  ::close(dir);
  return out;
}

std::string perf_map_line(const CopyRange& c) {
  return fmt::format("{:x} {:x} {} [dyni]\n", c.cache_addr, c.size, one_line(c.name));
}

Result<std::string> write_perf_map(pid_t pid, uint64_t start_time, const std::vector<CopyRange>& copies) {
  auto status = read_file(fmt::format("/proc/{}/status", pid), 1 << 16);
  if (!status) return fail("its status: " + status.error().message());
  std::vector<uint64_t> uids = numbers(status_field(*status, "Uid:")), gids = numbers(status_field(*status, "Gid:"));
  if (uids.size() < 2 || gids.size() < 2) return fail("its owner is unknown");
  const uid_t uid = static_cast<uid_t>(uids[1]);  // effective, as a JIT in it would create files
  const gid_t gid = static_cast<gid_t>(gids[1]);
  const std::string path = "tmp/" + map_name(*status, pid);
  Result<int> opened = process_root(pid, start_time);
  if (!opened) return std::unexpected(opened.error());
  const int root = *opened;
  const double started = started_at(start_time);
  Result<int> fd = fail("");
  {
    TargetFsIds as_target(uid, gid);
    fd = open_in_root(root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_NONBLOCK, 0644);
    if (*fd < 0 && errno == EEXIST) {
      fd = open_existing(pid, root, path, uid, started);
      if (fd && *fd < 0) {  // a dead process's: made anew
        int dir = open_in_root(root, "tmp", O_PATH | O_DIRECTORY, 0);
        if (dir >= 0 && ::unlinkat(dir, path.substr(4).c_str(), 0) == 0)
          fd = open_in_root(root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_NONBLOCK, 0644);
        else
          fd = fail("a dead process's map could not be removed: " + errno_text());
        if (dir >= 0) ::close(dir);
      }
    }
    if (fd && *fd < 0) fd = fail(errno_text());
  }
  ::close(root);
  if (!fd) return fail(fmt::format("/{} left alone: {}", path, fd.error().message()));
  std::string text;
  for (const CopyRange& c : copies) text += perf_map_line(c);
  Status written = write_all(*fd, text);
  ::close(*fd);
  if (!written) return fail(fmt::format("/{}: {}", path, written.error().message()));
  return "/" + path;
}

}  // namespace dyni
