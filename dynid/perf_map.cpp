// perf's map for dyni's copies (perf_map.h).
#include "dynid/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/errno_text.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {

// A field of /proc/PID/status ("Uid:", "NSpid:"): its values.
std::vector<uint64_t> status_field(pid_t pid, const std::string& name) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  std::vector<uint64_t> out;
  while (std::getline(in, line))
    if (line.rfind(name, 0) == 0) {
      std::istringstream values(line.substr(name.size()));
      uint64_t v = 0;
      while (values >> v) out.push_back(v);
    }
  return out;
}

// When the process started, in seconds since the epoch (boot time + its start in ticks).
Result<double> started_at(uint64_t start_time) {
  std::ifstream in("/proc/stat");
  std::string key;
  uint64_t btime = 0;
  while (in >> key)
    if (key == "btime" && in >> btime) break;
  if (!btime) return fail("no btime in /proc/stat");
  return static_cast<double>(btime) + static_cast<double>(start_time) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Checks an open map: a regular file with one link, owned by `uid`.
Status plain_file_of(int fd, uid_t uid) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return fail("fstat: " + errno_text());
  if (!S_ISREG(st.st_mode)) return fail("not a regular file");
  if (st.st_nlink != 1) return fail("it has other links");
  if (st.st_uid != uid) return fail(fmt::format("owned by uid {}, not the target's {}", st.st_uid, uid));
  return ok();
}

}  // namespace

std::string perf_map_line(const CopyRange& c) {
  return fmt::format("{:x} {:x} {} [dyni]\n", c.cache_addr, c.size, c.name);
}

Result<std::string> write_perf_map(pid_t pid, uint64_t start_time, const std::vector<CopyRange>& copies) {
  std::vector<uint64_t> uids = status_field(pid, "Uid:"), gids = status_field(pid, "Gid:");
  std::vector<uint64_t> nspids = status_field(pid, "NSpid:");
  if (uids.size() < 2 || gids.size() < 2) return fail("its owner is unknown");
  const uid_t uid = static_cast<uid_t>(uids[1]);  // effective, as a JIT in it would create files
  const gid_t gid = static_cast<gid_t>(gids[1]);
  const uint64_t nspid = nspids.empty() ? static_cast<uint64_t>(pid) : nspids.back();  // perf names it so
  const std::string name = fmt::format("perf-{}.map", nspid);
  // Its /tmp, in its mount namespace (a unit's PrivateTmp= included).
  int dir = ::open(fmt::format("/proc/{}/root/tmp", pid).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return fail("its /tmp: " + errno_text());
  auto close_dir = [&] { ::close(dir); };
  auto started = started_at(start_time);
  if (!started) {
    close_dir();
    return std::unexpected(started.error());
  }
  // A map older than the process is a dead one's with the same pid.
  struct stat old{};
  if (::fstatat(dir, name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode) &&
      static_cast<double>(old.st_mtim.tv_sec) + old.st_mtim.tv_nsec / 1e9 < *started - 1)
    (void)::unlinkat(dir, name.c_str(), 0);
  bool created = true;
  int fd = ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = ::openat(dir, name.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  const int open_errno = errno;
  close_dir();
  if (fd < 0) return fail(fmt::format("/tmp/{}: {}", name, errno_text(open_errno)));
  Status usable = created ? (::fchown(fd, uid, gid) == 0 ? ok() : fail("fchown: " + errno_text())) : ok();
  if (usable) usable = plain_file_of(fd, uid);
  if (!usable) {
    ::close(fd);
    return fail(fmt::format("/tmp/{} left alone: {}", name, usable.error().message()));
  }
  std::string text;
  for (const CopyRange& c : copies) text += perf_map_line(c);
  Status written = ok();
  for (std::size_t at = 0; written && at < text.size();) {  // one write, whole lines, but for a short one
    ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) written = fail("write: " + errno_text());
    else at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (!written) return fail(fmt::format("/tmp/{}: {}", name, written.error().message()));
  return "/tmp/" + name;
}

}  // namespace dyni
