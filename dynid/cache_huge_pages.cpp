// The cache on transparent huge pages despite the target's PR_SET_THP_DISABLE.
#include "dynid/cache_huge_pages.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/log.h"
#include "common/paths.h"
#include "dynid/cache_placement.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {

constexpr long kThpFullyDisabled = 1;  // PR_GET_THP_DISABLE's answer to PR_SET_THP_DISABLE(1, 0)
constexpr long kThpLifted = 1 | static_cast<long>(kThpDisableExceptAdvised);

// Under the run directory (tmpfs, root's alone): an entry never outlives a
// reboot, when pids and start times begin again.
std::string journal_dir() { return paths::run_dir() + "/thp-lifted"; }

// Step 2, in the window: no fsync (after a SIGKILL the page cache keeps the
// file; after a crash of the host the target is gone too).
Status write_entry(const std::string& entry) {
  if (auto dir = ensure_dir_p(paths::run_dir(), 0700); !dir) return dir;
  if (auto dir = ensure_dir(journal_dir(), 0700); !dir) return dir;
  int fd = ::open(entry.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(fmt::format("{}: {}", entry, std::strerror(errno)));
  static constexpr char kText[] = "PR_SET_THP_DISABLE lifted by dynid; put back to 1 at the next start\n";
  const bool written = ::write(fd, kText, sizeof kText - 1) == static_cast<ssize_t>(sizeof kText - 1);
  ::close(fd);
  return written ? ok() : fail(entry + ": short write");
}

// Gone: /proc has no such pid, or it names a process started at another time.
Result<bool> gone(pid_t pid, uint64_t start_time) {
  auto stat = read_proc_stat("/proc", pid);
  if (stat) return stat->start_time != start_time;
  if (::access(fmt::format("/proc/{}", pid).c_str(), F_OK) != 0 && errno == ENOENT) return true;
  return std::unexpected(stat.error());
}

std::string call_error(long r) { return std::strerror(static_cast<int>(-r)); }
std::string call_error(const Result<long>& r) { return r ? call_error(*r) : r.error().message(); }

Result<long> prctl_in(WorldStop& world, pid_t tid, const SyscallSites& sites, int option, uint64_t arg2,
                      uint64_t arg3) {
  return remote_syscall(world, tid, sites, SYS_prctl, {static_cast<uint64_t>(option), arg2, arg3, 0, 0, 0});
}

bool thp_off_on_host() {
  auto mode = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  return mode && mode->find("[never]") != std::string::npos;
}

// Steps 3 to 6, once the flag read 1 and the entry is written: `step`
// (what needs THP) between lifting the flag and setting it back.
HugeOutcome lift_around(WorldStop& world, const SyscallSites& sites, pid_t tid, const std::string& entry,
                        const HugeStep& step, const std::string& done_note) {
  const pid_t pid = world.pid();
  auto lifted = prctl_in(world, tid, sites, PR_SET_THP_DISABLE, 1, kThpDisableExceptAdvised);
  if (lifted && *lifted == -EINVAL) {  // before 6.18: the call did nothing
    ::unlink(entry.c_str());
    return {"the target disabled THP for itself (PR_SET_THP_DISABLE) and this kernel cannot lift that for one "
            "range (PR_THP_DISABLE_EXCEPT_ADVISED is Linux 6.18's): small pages", false};
  }
  HugeOutcome out;
  bool clean = false;  // every call came back with the kernel's answer
  if (!lifted || *lifted != 0) {
    out.note = "lifting the target's PR_SET_THP_DISABLE failed (" + call_error(lifted) + "): small pages";
  } else if (auto done = step(world, tid); !done) {
    out.note = done.error().message();
  } else {
    out.note = done_note;
    clean = true;
  }
  // Step 5 whatever step 3 answered: a call that failed once armed may have run.
  auto back = prctl_in(world, tid, sites, PR_SET_THP_DISABLE, 1, 0);
  if (back && *back == 0) {
    // A call that failed after it was armed may still run at the resume (the
    // thread holds its chain) and lift the flag again: the entry stays then,
    // for the next start, which acts only on a flag that reads 3.
    if (clean) ::unlink(entry.c_str());
    out.lifted = clean;
    return out;
  }
  log::warn("huge pages: pid {}: PR_SET_THP_DISABLE not set back ({}); {} stays for the next dynid", pid,
            call_error(back), entry);
  out.note += "; the flag could not be set back (" + call_error(back) + "): the next dynid's start does it";
  return out;
}

// Steps 1 to 6 around `step`, for a target whose flag reads 1; nothing for
// the others (their first write faults a huge page in). `done_note`: what a
// lifted step that worked says.
HugeOutcome with_thp_lifted(WorldStop& world, const SyscallSites& sites, const MappedCache& cache,
                            const HugeStep& step, const std::string& done_note) {
  if (!cache.huge_advised) return {"MADV_HUGEPAGE was refused: small pages", false};
  if (thp_off_on_host())
    return {"transparent huge pages are off on this host (transparent_hugepage/enabled): small pages", false};
  const pid_t pid = world.pid();
  auto flag = syscall_in_any_thread(world, sites, SYS_prctl, {PR_GET_THP_DISABLE, 0, 0, 0, 0, 0});
  if (!flag) return {"PR_GET_THP_DISABLE failed (" + flag.error().message() + ")", false};
  const auto [tid, answer] = *flag;
  if (answer < 0) return {"PR_GET_THP_DISABLE failed (" + call_error(answer) + ")", false};
  if (answer != kThpFullyDisabled) return {};
  auto stat = read_proc_stat("/proc", pid);
  if (!stat) return {"the target disabled THP for itself; not lifted: " + stat.error().message(), false};
  const std::string entry = journal_dir() + "/" + lifted_entry_name(pid, stat->start_time);
  // Step 2: the entry exists before the flag changes (I2: recorded, then changed).
  if (auto w = write_entry(entry); !w)
    return {"the target disabled THP for itself; not lifted: " + w.error().message(), false};
  return lift_around(world, sites, tid, entry, step,
                     "the target disabled THP for itself (PR_SET_THP_DISABLE): " + done_note +
                         " with the flag lifted for MADV_HUGEPAGE ranges, then set back");
}

// One journal entry: what restore_lifted_thp logs, or why it could not act.
Result<std::string> restore_one(pid_t pid, uint64_t start_time) {
  const std::string kGone = "the process is gone (its pid is free, or another process's)";
  auto before = gone(pid, start_time);
  if (!before) return std::unexpected(before.error());
  if (*before) return kGone;
  RaisedPriority priority;
  auto world = stop_world(pid);
  if (!world) return std::unexpected(world.error());
  auto now = gone(pid, start_time);  // the pid, reused before the stop?
  if (!now) return std::unexpected(now.error());
  if (*now) return kGone;
  auto sites = find_syscall_sites(pid);
  if (!sites) return std::unexpected(sites.error());
  if (auto allowed = seccomp_allows_all(*world, *sites, {{SYS_prctl, {PR_GET_THP_DISABLE, 0, 0, 0, 0, 0}},
                                                         {SYS_prctl, {PR_SET_THP_DISABLE, 1, 0, 0, 0, 0}}});
      !allowed)
    return std::unexpected(allowed.error());
  auto flag = syscall_in_any_thread(*world, *sites, SYS_prctl, {PR_GET_THP_DISABLE, 0, 0, 0, 0, 0});
  if (!flag) return std::unexpected(flag.error());
  if (flag->second != kThpLifted) return fmt::format("PR_GET_THP_DISABLE reads {}: nothing to put back", flag->second);
  auto back = prctl_in(*world, flag->first, *sites, PR_SET_THP_DISABLE, 1, 0);
  if (!back || *back != 0) return fail("PR_SET_THP_DISABLE(1, 0): " + call_error(back));
  return std::string("PR_SET_THP_DISABLE put back to 1 (a killed dynid had lifted it for MADV_HUGEPAGE ranges)");
}

}  // namespace

std::string lifted_entry_name(pid_t pid, uint64_t start_time) { return fmt::format("{}-{}", pid, start_time); }

std::optional<std::pair<pid_t, uint64_t>> parse_lifted_entry(const std::string& name) {
  const char* end = name.data() + name.size();
  pid_t pid = 0;
  uint64_t start = 0;
  auto [dash, e1] = std::from_chars(name.data(), end, pid);
  if (e1 != std::errc() || pid <= 0 || dash == end || *dash != '-' || dash == name.data()) return std::nullopt;
  auto [last, e2] = std::from_chars(dash + 1, end, start);
  if (e2 != std::errc() || last != end || last == dash + 1) return std::nullopt;
  return std::pair{pid, start};
}

std::vector<SeccompCall> huge_page_calls(uint64_t addr, uint64_t length) {
  return {{SYS_prctl, {PR_GET_THP_DISABLE, 0, 0, 0, 0, 0}},
          {SYS_prctl, {PR_SET_THP_DISABLE, 1, kThpDisableExceptAdvised, 0, 0, 0}},
          {SYS_prctl, {PR_SET_THP_DISABLE, 1, 0, 0, 0, 0}},
          {SYS_madvise, {addr, length, kMadvCollapse, 0, 0, 0}}};
}

HugeOutcome fault_in_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache) {
  const pid_t pid = world.pid();
  return with_thp_lifted(world, sites, cache, [&](WorldStop&, pid_t) -> Status {
    // Step 4: one byte in each 2 MiB.
    if (auto touched = touch_cache(pid, cache, kHugePage); !touched)
      return fail("faulting the cache in failed (" + touched.error().message() + ")");
    return ok();
  }, "faulted in");
}

HugeOutcome collapse_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache) {
  return with_thp_lifted(world, sites, cache, [&](WorldStop& w, pid_t tid) -> Status {
    auto r = remote_syscall(w, tid, sites, SYS_madvise, {cache.addr, cache.length, kMadvCollapse, 0, 0, 0});
    if (!r || *r != 0) return fail("MADV_COLLAPSE failed (" + call_error(r) + "): small pages");
    return ok();
  }, "collapsed (MADV_COLLAPSE)");
}

void restore_lifted_thp() {
  std::error_code ec;
  std::filesystem::directory_iterator it(journal_dir(), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto id = parse_lifted_entry(name);
    if (!id) continue;  // not dyni's: left alone
    auto done = restore_one(id->first, id->second);
    if (!done) {
      log::warn("huge pages: pid {}: the flag a killed dynid lifted is not put back yet: {}", id->first,
                done.error().message());
      continue;
    }
    log::info("huge pages: pid {}: {}", id->first, *done);
    ::unlink(it->path().c_str());
  }
}

}  // namespace dyni
