// A target's memory through /proc/PID/mem, writes bounded by a mapping.
#include "dynid/target_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

constexpr uint64_t kPage = 4096;

// The bounded write both write_in_mapping and WindowMemory do.
Status write_bounded(pid_t pid, int fd, const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes) {
  if (addr < within.start || addr > within.end || bytes.size() > within.end - addr)
    return fail(fmt::format("refused: a write of {} bytes at {:#x} leaves the mapping {:#x}-{:#x}", bytes.size(), addr,
                            within.start, within.end));
  if (fd < 0) return fail(sys_error(fmt::format("open /proc/{}/mem", pid)));
  ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(addr));
  int err = errno;
  if (n != static_cast<ssize_t>(bytes.size()))
    return fail(sys_error(fmt::format("write of {} bytes at {:#x} in process {}", bytes.size(), addr, pid), err));
  return ok();
}

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

std::optional<uint64_t> word_of(const Result<std::vector<uint8_t>>& bytes) {
  if (!bytes || bytes->size() != 8) return std::nullopt;
  uint64_t v = 0;
  std::memcpy(&v, bytes->data(), 8);
  return v;
}

Status write_in_mapping(pid_t pid, const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes) {
  MemFile mem(pid, O_RDWR);
  return write_bounded(pid, mem.fd(), within, addr, bytes);
}

WindowMemory::WindowMemory(pid_t pid)
    : pid_(pid), fd_(::open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDWR | O_CLOEXEC)) {}

WindowMemory::~WindowMemory() {
  if (fd_ >= 0) ::close(fd_);
}

const uint8_t* WindowMemory::page(uint64_t base) {
  auto it = pages_.find(base);
  if (it != pages_.end()) return it->second.empty() ? nullptr : it->second.data();
  std::vector<uint8_t>& bytes = pages_[base];
  bytes.resize(kPage);
  if (fd_ < 0 || ::pread(fd_, bytes.data(), kPage, static_cast<off_t>(base)) != static_cast<ssize_t>(kPage)) bytes.clear();
  return bytes.empty() ? nullptr : bytes.data();
}

Result<std::vector<uint8_t>> WindowMemory::read(uint64_t addr, std::size_t length) {
  if (length == 0 || addr + length < addr) return fail(fmt::format("read of {} bytes at {:#x}: out of range", length, addr));
  std::vector<uint8_t> out;
  out.reserve(length);
  for (uint64_t at = addr; at < addr + length;) {
    uint64_t base = at & ~(kPage - 1);
    const uint8_t* p = page(base);
    if (!p) return fail(fmt::format("read of {} bytes at {:#x} in process {}: unreadable", length, addr, pid_));
    uint64_t n = std::min<uint64_t>(addr + length - at, base + kPage - at);
    out.insert(out.end(), p + (at - base), p + (at - base) + n);
    at += n;
  }
  return out;
}

Status WindowMemory::write_in_mapping(const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes) {
  for (uint64_t base = addr & ~(kPage - 1); base < addr + bytes.size(); base += kPage) pages_.erase(base);
  return write_bounded(pid_, fd_, within, addr, bytes);
}

const profiler::Mapping* mapping_at(const std::vector<profiler::Mapping>& maps, uint64_t addr) {
  for (const auto& m : maps)
    if (m.start <= addr && addr < m.end) return &m;
  return nullptr;
}

}  // namespace dyni
