// The cache on transparent huge pages, even in a target that turned THP off
// for itself as mariadbd does (prctl(PR_SET_THP_DISABLE, 1) since 10.6.17,
// MDEV-33279). The mechanism, and why (issue 20 item 2; measured on 6.18):
//  - with the flag set, no THP fault happens anywhere in the process,
//    MADV_HUGEPAGE or not, and MADV_COLLAPSE fails with EINVAL;
//  - hugetlb would take pages from a host-wide pool that may be sized for the
//    database's own huge_pages, and a private hugetlb page written after a
//    fork lets the child die of SIGBUS when no spare page is left: not used;
//  - Linux 6.18's PR_THP_DISABLE_EXCEPT_ADVISED keeps THP off except in
//    MADV_HUGEPAGE ranges, and a huge page once faulted in stays mapped when
//    the flag is set back (copy-on-write after a fork, as any anonymous page).
// So, in a window (every thread held):
//   1. PR_GET_THP_DISABLE must answer 1 (0, or 3 = "except advised": nothing
//      to lift, the first write faults a huge page in);
//   2. a journal entry <run_dir>/thp-lifted/<pid>-<start time> is written
//      (tmpfs: it never outlives a reboot, when pids and start times repeat);
//   3. PR_SET_THP_DISABLE(1, PR_THP_DISABLE_EXCEPT_ADVISED);
//   4. the step that needs THP:
//      - in the window that maps the cache, one byte per 2 MiB written
//        through /proc/PID/mem faults each 2 MiB in: on a huge page where
//        the kernel has one free, else on small pages (the same code);
//      - after an optimized cache is written, if the lift gave it huge
//        pages and a fork meanwhile shared one (a write into it then splits
//        it into small pages, copied on write), MADV_COLLAPSE puts it back
//        together in a window of its own (the children keep their copies; a
//        page was free moments before, so the allocation rarely compacts);
//   5. PR_SET_THP_DISABLE(1, 0): the flag as the target set it;
//   6. the journal entry is removed, if every call came back with the
//      kernel's answer (a call that failed once armed may still run when the
//      thread resumes: the entry stays then, for the next start).
// While every thread is held, the target's threads fault nothing (a vfork
// child or an io_uring worker could); khugepaged may collapse another advised
// range meanwhile. Either changes memory use, never a result. A dynid killed
// between 3 and 5 leaves the flag "except advised", a change that is
// recorded: the next dynid puts it back at its start (restore_lifted_thp).
// Accepted: children the target forks or execs before then inherit
// "except advised" and keep it (THP only where they advise it themselves).
// A target whose flag is 0 needs no lift: its first write faults a huge page
// in (and khugepaged collapses what a fork split). A kernel older than 6.18
// refuses step 3 (EINVAL): the cache keeps small pages, and says why.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "dynid/cache_mapping.h"
#include "dynid/remote_syscall.h"
#include "dynid/world_stop.h"

namespace dyni {

// include/uapi/linux/prctl.h of Linux 6.18 and mman-common.h of 6.1 (Debian
// 12's glibc headers predate both).
constexpr uint64_t kThpDisableExceptAdvised = uint64_t{1} << 1;
constexpr uint64_t kMadvCollapse = 25;

// What needs THP, run in held thread `tid` of the window.
using HugeStep = std::function<Status(WorldStop& world, pid_t tid)>;

// What a step did: for the operator ("" when there is nothing to say), and
// whether it ran with the flag lifted and set back cleanly. Never a failure
// of the injection: small pages run the same code.
struct HugeOutcome {
  std::string note;
  bool lifted = false;
};

// Steps 1 to 6 for a cache just mapped and advised (map_cache), in the window
// that mapped it.
HugeOutcome fault_in_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache);

// The collapse of step 4, in a window of its own, for a written cache whose
// huge pages, faulted in by a lift, a fork split.
HugeOutcome collapse_huge(WorldStop& world, const SyscallSites& sites, const MappedCache& cache);

// Every system call the two above may make for a cache at [addr, addr +
// length), for the seccomp check before the first (seccomp_allows_all).
std::vector<SeccompCall> huge_page_calls(uint64_t addr, uint64_t length);

// The journal entry's name, and back (pure; unit-tested). A name that is not
// exactly "<pid>-<start time>" is not dyni's.
std::string lifted_entry_name(pid_t pid, uint64_t start_time);
std::optional<std::pair<pid_t, uint64_t>> parse_lifted_entry(const std::string& name);

// At dynid's start: every target that a killed dynid left with its flag
// lifted gets it back (PR_SET_THP_DISABLE(1, 0), when the flag still reads
// 3), and its entry is removed; entries of processes that are gone are
// removed. An entry that could not be acted on stays, with a DYNID-WARN.
void restore_lifted_thp();

}  // namespace dyni
