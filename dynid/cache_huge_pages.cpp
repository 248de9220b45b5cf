// The cache on transparent huge pages despite the target's PR_SET_THP_DISABLE.
#include "dynid/cache_huge_pages.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
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

using namespace std::chrono_literals;

constexpr long kThpFullyDisabled = 1;  // PR_GET_THP_DISABLE's answer to PR_SET_THP_DISABLE(1, 0)
constexpr long kThpLifted = 1 | static_cast<long>(kThpDisableExceptAdvised);

std::string journal_dir() { return paths::state_dir() + "/thp-lifted"; }

std::string call_error(long r) { return std::strerror(static_cast<int>(-r)); }
std::string call_error(const Result<long>& r) { return r ? call_error(*r) : r.error().message(); }

Result<long> prctl_in(WorldStop& world, pid_t tid, const SyscallSites& sites, int option, uint64_t arg2,
                      uint64_t arg3) {
  return remote_syscall(world, tid, sites, SYS_prctl, {static_cast<uint64_t>(option), arg2, arg3, 0, 0, 0});
}

// Step 4: one byte in each 2 MiB (the cache is fresh: nothing there yet).
Status touch_each_huge_page(pid_t pid, const MappedCache& cache) {
  const uint8_t zero = 0;
  for (uint64_t offset = 0; offset < cache.length; offset += kHugePage)
    if (auto r = write_cache(pid, cache, {&zero, 1}, offset); !r) return r;
  return ok();
}

bool thp_off_on_host() {
  auto mode = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  return mode && mode->find("[never]") != std::string::npos;
}

// Steps 3 to 6, once the flag read 1 and the entry is written: `step`
// (what needs THP) between lifting the flag and setting it back.
std::string lift_around(WorldStop& world, const SyscallSites& sites, pid_t tid, const std::string& entry,
                        const HugeStep& step, const std::string& done_note) {
  const pid_t pid = world.pid();
  auto lifted = prctl_in(world, tid, sites, PR_SET_THP_DISABLE, 1, kThpDisableExceptAdvised);
  if (lifted && *lifted == -EINVAL) {  // before 6.18: the call did nothing
    ::unlink(entry.c_str());
    return "the target disabled THP for itself (PR_SET_THP_DISABLE) and this kernel cannot lift that for one "
           "range (PR_THP_DISABLE_EXCEPT_ADVISED is Linux 6.18's): small pages";
  }
  std::string note;
  if (!lifted || *lifted != 0)
    note = "lifting the target's PR_SET_THP_DISABLE failed (" + call_error(lifted) + "): small pages";
  else if (auto done = step(world, tid); !done)
    note = done.error().message();
  else
    note = done_note;
  // Step 5 whatever step 3 answered: a call that failed once armed may have run.
  auto back = prctl_in(world, tid, sites, PR_SET_THP_DISABLE, 1, 0);
  if (back && *back == 0) {
    ::unlink(entry.c_str());
    return note;
  }
  log::warn("huge pages: pid {}: PR_SET_THP_DISABLE not set back ({}); {} stays for the next dynid", pid,
            call_error(back), entry);
  return note + "; the flag could not be set back (" + call_error(back) + "): the next dynid's start does it";
}

// Steps 1 to 6 around `step`; a target whose flag is not 1 gets `step` alone
// when `always`, else nothing.
// `done_note`: what a lifted step that worked says.
std::string with_thp_lifted(WorldStop& world, const SyscallSites& sites, const MappedCache& cache,
                            const HugeStep& step, bool always, const std::string& done_note) {
  if (!cache.huge_advised) return "MADV_HUGEPAGE was refused: small pages";
  if (thp_off_on_host()) return "transparent huge pages are off on this host (transparent_hugepage/enabled): small pages";
  const pid_t pid = world.pid();
  auto flag = syscall_in_any_thread(world, sites, SYS_prctl, {PR_GET_THP_DISABLE, 0, 0, 0, 0, 0});
  if (!flag) return "PR_GET_THP_DISABLE failed (" + flag.error().message() + ")";
  const auto [tid, answer] = *flag;
  if (answer < 0) return "PR_GET_THP_DISABLE failed (" + call_error(answer) + ")";
  if (answer != kThpFullyDisabled) {
    if (!always) return "";
    auto done = step(world, tid);
    return done ? done_note : done.error().message();
  }
  auto stat = read_proc_stat("/proc", pid);
  if (!stat) return "the target disabled THP for itself; not lifted: " + stat.error().message();
  const std::string entry = journal_dir() + "/" + lifted_entry_name(pid, stat->start_time);
  // Step 2: the entry exists before the flag changes (I2: recorded, then changed).
  if (auto dir = ensure_dir_p(journal_dir(), 0700); !dir)
    return "the target disabled THP for itself; not lifted: " + dir.error().message();
  if (auto w = write_file_atomic(entry, "PR_SET_THP_DISABLE lifted by dynid; put back to 1 at the next start\n", 0600); !w)
    return "the target disabled THP for itself; not lifted: " + w.error().message();
  return lift_around(world, sites, tid, entry, step,
                     "the target disabled THP for itself (PR_SET_THP_DISABLE): " + done_note +
                         " with the flag lifted for MADV_HUGEPAGE ranges, then set back");
}

// One journal entry: what restore_lifted_thp logs, or why it could not act.
Result<std::string> restore_one(pid_t pid, uint64_t start_time) {
  auto stat = read_proc_stat("/proc", pid);
  if (!stat || stat->start_time != start_time) return std::string("the process is gone (its pid is free, or another process's)");
  auto world = WorldStop::stop(pid, 2000ms);
  if (!world) return std::unexpected(world.error());
  auto now = read_proc_stat("/proc", pid);  // the pid, reused before the stop?
  if (!now || now->start_time != start_time) return std::string("the process is gone (its pid is free, or another process's)");
  auto sites = find_syscall_sites(pid);
  if (!sites) return std::unexpected(sites.error());
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

std::string fault_in_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache) {
  const pid_t pid = world.pid();
  return with_thp_lifted(world, sites, cache, [&](WorldStop&, pid_t) -> Status {
    if (auto touched = touch_each_huge_page(pid, cache); !touched)
      return fail("faulting the cache in failed (" + touched.error().message() + ")");
    return ok();
  }, false, "faulted in");
}

std::string collapse_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache) {
  return with_thp_lifted(world, sites, cache, [&](WorldStop& w, pid_t tid) -> Status {
    auto r = remote_syscall(w, tid, sites, SYS_madvise, {cache.addr, cache.length, kMadvCollapse, 0, 0, 0});
    if (!r || *r != 0) return fail("MADV_COLLAPSE failed (" + call_error(r) + "): small pages");
    return ok();
  }, true, "collapsed (MADV_COLLAPSE)");
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
