// One dynid per host: an flock on <run_dir>/dynid.lock, which holds the pid.
// The kernel drops an flock when its holder dies, so a lock left by a killed
// dynid is never stale: the next start simply takes it.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace dyni {

class InstanceLock {
 public:
  // Takes the lock or fails with "dynid is already running (pid N)".
  // Fails with a message starting kAlreadyRunning when another dynid holds it.
  static Result<InstanceLock> acquire(const std::string& path);
  static constexpr const char* kAlreadyRunning = "dynid is already running";
  // True when some process holds the lock at `path` (dynid is running).
  static bool is_held(const std::string& path);

  InstanceLock(InstanceLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  InstanceLock& operator=(InstanceLock&&) = delete;
  ~InstanceLock();

 private:
  explicit InstanceLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace dyni
