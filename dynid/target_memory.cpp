// A target's memory through /proc/PID/mem, writes bounded by a mapping.
#include "dynid/target_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "common/errno_text.h"

namespace dyni {
namespace {

// Opens /proc/PID/mem for one transfer; the descriptor is never kept, so a
// pid reused by another process is never written through a stale one.
class MemFile {
 public:
  MemFile(pid_t pid, int flags) : fd_(::open(fmt::format("/proc/{}/mem", pid).c_str(), flags | O_CLOEXEC)) {}
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<std::vector<uint8_t>> read_target(pid_t pid, uint64_t addr, std::size_t length) {
  MemFile mem(pid, O_RDONLY);
  if (mem.fd() < 0) return fail(sys_error(fmt::format("open /proc/{}/mem", pid)));
  std::vector<uint8_t> bytes(length);
  ssize_t n = ::pread(mem.fd(), bytes.data(), length, static_cast<off_t>(addr));
  int err = errno;
  if (n != static_cast<ssize_t>(length))
    return fail(sys_error(fmt::format("read of {} bytes at {:#x} in process {}", length, addr, pid), err));
  return bytes;
}

Status write_in_mapping(pid_t pid, const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes) {
  if (addr < within.start || addr > within.end || bytes.size() > within.end - addr)
    return fail(fmt::format("refused: a write of {} bytes at {:#x} leaves the mapping {:#x}-{:#x}", bytes.size(), addr,
                            within.start, within.end));
  MemFile mem(pid, O_RDWR);
  if (mem.fd() < 0) return fail(sys_error(fmt::format("open /proc/{}/mem", pid)));
  ssize_t n = ::pwrite(mem.fd(), bytes.data(), bytes.size(), static_cast<off_t>(addr));
  int err = errno;
  if (n != static_cast<ssize_t>(bytes.size()))
    return fail(sys_error(fmt::format("write of {} bytes at {:#x} in process {}", bytes.size(), addr, pid), err));
  return ok();
}

const profiler::Mapping* mapping_at(const std::vector<profiler::Mapping>& maps, uint64_t addr) {
  for (const auto& m : maps)
    if (m.start <= addr && addr < m.end) return &m;
  return nullptr;
}

}  // namespace dyni
