// The kernel's process events (the proc connector, CONFIG_PROC_EVENTS): which
// processes forked, exec'd or exited since the last look. Discovery keeps what
// it read of each process (its executable, mount namespace) across scans, and
// forgets a process here when it may have become another program; so a scan
// reads only the processes that changed, not every process every 500 ms.
//
// Invariant: events only ever make discovery read a process again, never skip
// one. A lost event (the socket's buffer overran) says so (`all`), and a
// message from anyone but the kernel counts as a change of everything.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

class ExecWatch {
 public:
  // Subscribes to process events. Fails without CAP_NET_ADMIN, outside the
  // initial network namespace (the kernel sends them there only), or on a
  // kernel built without them; discovery then reads every process each scan.
  static Result<std::unique_ptr<ExecWatch>> open();
  ~ExecWatch();
  ExecWatch(const ExecWatch&) = delete;
  ExecWatch& operator=(const ExecWatch&) = delete;

  struct Changes {
    bool all = false;           // events were lost: forget every process
    std::vector<pid_t> pids;    // processes (tgids) born, exec'd or exited
  };
  // Every event queued since the last call; never blocks.
  Changes drain();

 private:
  explicit ExecWatch(int fd) : fd_(fd) {}
  static Status hears_a_child(ExecWatch& watch);
  int fd_;
};

}  // namespace dyni
