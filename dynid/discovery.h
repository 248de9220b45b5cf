// Discovery: which running processes are targets. A process is a target when
// its executable (/proc/PID/exe) is listed in [exeList]: by full path, by
// basename, or as the file a listed name links to in a binary directory
// (Debian's /usr/bin/redis-server -> redis-check-rdb: a running redis's exe
// is redis-check-rdb). /proc/PID/exe names the file even when it was deleted
// or replaced by a package upgrade, and for processes in other mount
// namespaces (containers).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dynid/exec_watch.h"
#include "dynid/proc_reader.h"

namespace dyni {

// Which [exeList] entry a process's executable matched, and through what:
// "path" (the entry is its full path), "basename", or "LINK -> TARGET".
struct ExeMatch {
  std::string entry;
  std::string via;
};

// An entry whose file, found through symlinks, has another basename:
// {"redis-server", "/usr/bin/redis-server", "/usr/bin/redis-check-rdb"}.
struct ExeSymlink {
  std::string entry;
  std::string link;    // the path the entry names or was found at
  std::string target;  // canonical path of the file it leads to
};

// [exeList] as matched against processes. Invariant: `symlinks` were resolved
// from `entries` at config load or reload (resolve_exe_list), never later.
struct ExeMatcher {
  std::vector<std::string> entries;
  std::vector<ExeSymlink> symlinks;
};

// Resolves each bare name in each of `bin_dirs` (paths::bin_dirs()), and each
// path entry, through symlinks; keeps those that lead to a file of another
// basename (the basename itself matches anyway).
ExeMatcher resolve_exe_list(const std::vector<std::string>& exe_list,
                            const std::vector<std::string>& bin_dirs);

// How `exe_path` is listed, if it is: its full path, then its basename, then
// a symlink's target. Symlinks count only for a process in dynid's own mount
// namespace (`same_mount_ns`): inside a container the host's links mean
// nothing, and there a bare name matches by basename only.
std::optional<ExeMatch> match_exe(const ExeMatcher& matcher, const std::string& exe_path,
                                  bool same_mount_ns);

struct DiscoveredProcess {
  ProcStat stat;
  ExePath exe;
  std::string name;      // basename of the executable: what -status shows
  std::string mount_ns;  // "mnt:[...]"
  ExeMatch matched_by;
  // The executable file itself (stat of /proc/PID/exe: the file mapped, even
  // deleted); 0/0 when it could not be read. With mount_ns, it names the
  // process's group (process_group.h).
  uint64_t exe_dev = 0, exe_ino = 0;
};

std::string basename_of(const std::string& path);

// What discovery read of one process that does not change while it runs one
// program: its executable, its mount namespace, the file's device and inode.
struct ProcessIdentity {
  std::optional<ExePath> exe;           // none: a kernel thread, or gone
  std::optional<std::string> mount_ns;  // read only for a listed executable
  std::optional<std::pair<uint64_t, uint64_t>> exe_file;  // dev, ino; likewise
  uint64_t start_time = 0, image = 0;   // from its first /proc/PID/stat read: 0 before
  int64_t read_ms = 0;
  std::optional<ProcStat> last_stat;    // its last /proc/PID/stat read
  int stat_skips_left = 0;              // scans that use last_stat before the next read
  // Its /proc/PID/stat, kept open: it names this process for as long as the
  // descriptor lives (reads fail once it is gone, even if its pid is reused).
  struct KeptFd {
    int fd = -1;
    KeptFd() = default;
    KeptFd(KeptFd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
    KeptFd& operator=(KeptFd&& other) noexcept;
    ~KeptFd();
  } stat_fd;
};

// The identities of the host's processes, kept from scan to scan while the
// kernel's process events (exec_watch.h) say that a process is still the
// program it was: a scan then reads /proc/PID/stat (and exe) of the listed
// executables only, not every process's links (with 200 postgres backends that was most
// of dynid's CPU). Without events (`watch` null) nothing is kept.
// Invariant: an identity is used only while no fork, exec or exit of its pid
// was reported since it was read, its pid is listed, and it is younger than
// kRefreshMs (a safety net: a mount namespace may change without an exec, and
// an upgrade deletes the running file); a listed process's stat must still
// show the start time and image it was read with.
class ProcessIdentities {
 public:
  static constexpr int64_t kRefreshMs = 10'000;
  explicit ProcessIdentities(std::unique_ptr<ExecWatch> watch);

  // Forgets what changed since the last scan: call once a scan, first.
  // Returns the pids to look at: /proc listed afresh, unless no process was
  // born or has gone since the last listing.
  const std::vector<pid_t>& begin_scan(const std::string& proc_root, int64_t now_ms);
  // `pid`'s identity, read from `proc_root` unless kept; forget() drops it.
  ProcessIdentity& of(const std::string& proc_root, pid_t pid);
  void forget(pid_t pid) { known_.erase(pid); }
  // Its /proc/PID/stat, through the descriptor kept for it where one is. A
  // process that used no CPU between its last two reads is read every
  // kIdleStatStride scans (200 idle backends each read every 500 ms was
  // most of what dynid did): its stat is then up to that many scans old,
  // except that a fork, exec or exit of its pid makes it read at once.
  Result<ProcStat> stat_of(ProcessIdentity& id, const std::string& proc_root, pid_t pid);
  static constexpr int kIdleStatStride = 4;
  // How many identities were read (not kept) since begin_scan.
  std::size_t read_this_scan() const { return read_; }
  // Whether `id` was read in this scan.
  bool read_this_scan(const ProcessIdentity& id) const { return id.read_ms == now_ms_; }
  // The pids that begin_scan was given: the processes of this scan.
  const std::unordered_set<pid_t>& listed() const { return listed_; }

 private:
  std::unique_ptr<ExecWatch> watch_;
  std::unordered_map<pid_t, ProcessIdentity> known_;
  // Descriptors kept open at most: a server's thousands of workers must not
  // exhaust dynid's, which profiling (one per thread) and windows need: an
  // eighth of RLIMIT_NOFILE, and 512 at most; past it, stat is opened for
  // each read.
  std::size_t max_kept_fds_ = 0;  // set with the watch
  std::size_t kept_fds_ = 0;
  Result<ProcStat> read_stat(ProcessIdentity& id, const std::string& proc_root, pid_t pid);

  std::vector<pid_t> pids_;           // the last listing of /proc
  std::unordered_set<pid_t> listed_;  // the same, to look up
  int64_t listed_ms_ = 0;
  int64_t now_ms_ = 0;
  std::size_t read_ = 0;
};

// Scans `proc_root` (normally "/proc") once; skips `self` and kernel threads.
// With `known`, reads again only the processes that changed.
std::vector<DiscoveredProcess> discover(const ExeMatcher& matcher, const std::string& proc_root,
                                        pid_t self, ProcessIdentities* known = nullptr);

}  // namespace dyni
