// The code cache's memory in a target: map, write, read back, unmap.
#include "dynid/cache_mapping.h"

#include <sys/mman.h>
#include <sys/syscall.h>

#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "common/file_io.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"

namespace dyni {
namespace {

// The code is private: each process's entries and copies are its own after
// a fork. The counters are private too, or shared where the work is in what
// the target forks (a group's leading parent, process_group.h): a process
// forked while counting then counts into its parent's pages, where dynid
// reads them.
constexpr int kCacheFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
int counter_flags(bool shared) { return (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE; }

std::array<uint64_t, 6> mmap_args(uint64_t addr, uint64_t length, int prot, int flags) {
  return {addr, length, static_cast<uint64_t>(prot), static_cast<uint64_t>(flags), static_cast<uint64_t>(-1), 0};
}

bool is_the_cache(const profiler::Mapping& m, const MappedCache& cache) {
  return m.start == cache.addr && m.end == cache.addr + cache.length && m.readable && !m.writable && m.executable &&
         !m.shared && m.path.empty();
}

// Private anonymous memory has no name in maps; shared, "/dev/zero (deleted)".
bool is_the_counters(const profiler::Mapping& m, const MappedCache& counters) {
  const bool anonymous = m.shared ? m.path == "/dev/zero" && m.deleted : m.path.empty();
  return m.start == counters.addr && m.end == counters.addr + counters.length && m.readable && m.writable &&
         !m.executable && anonymous;
}

// An anonymous mapping of exactly [addr, addr + length).
Result<MappedCache> map_exactly(WorldStop& world, const SyscallSites& sites, uint64_t addr, uint64_t length, int prot,
                                int flags) {
  auto mapped = syscall_in_any_thread(world, sites, SYS_mmap, mmap_args(addr, length, prot, flags));
  if (!mapped) return std::unexpected(mapped.error());
  auto [tid, result] = *mapped;
  if (result < 0 && result > -4096)
    return fail(fmt::format("remote mmap at {:#x}: {}", addr, std::strerror(static_cast<int>(-result))));
  if (static_cast<uint64_t>(result) != addr) {
    // A kernel without MAP_FIXED_NOREPLACE (< 4.17) treats it as a hint.
    remote_syscall(world, tid, sites, SYS_munmap, {static_cast<uint64_t>(result), length, 0, 0, 0, 0});
    return fail(fmt::format("remote mmap returned {:#x}, not {:#x}", static_cast<uint64_t>(result), addr));
  }
  return MappedCache{addr, length, tid, false, {}};
}

}  // namespace

Result<MappedCache> map_counters(WorldStop& world, const SyscallSites& sites, uint64_t addr, uint64_t length,
                                 bool shared) {
  return map_exactly(world, sites, addr, length, PROT_READ | PROT_WRITE, counter_flags(shared));
}

Status write_counters(pid_t pid, const MappedCache& counters, std::span<const uint8_t> bytes) {
  WindowMemory memory(pid);  // opened first: see write_cache
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  const profiler::Mapping* m = mapping_at(*maps, counters.addr);
  if (!m || !is_the_counters(*m, counters) || bytes.size() > counters.length)
    return fail(fmt::format("the counters at {:#x} are no longer the mapping dyni made", counters.addr));
  return memory.write_in_mapping(*m, counters.addr, bytes);
}

Result<std::vector<uint64_t>> read_counters(pid_t pid, const MappedCache& counters) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  const profiler::Mapping* m = mapping_at(*maps, counters.addr);
  if (!m || !is_the_counters(*m, counters))
    return fail(fmt::format("the counters at {:#x} are no longer the mapping dyni made", counters.addr));
  auto bytes = read_target(pid, counters.addr, counters.length);
  if (!bytes) return std::unexpected(bytes.error());
  std::vector<uint64_t> out(bytes->size() / 8);
  std::memcpy(out.data(), bytes->data(), out.size() * 8);
  return out;
}

std::vector<SeccompCall> cache_mapping_calls(const CachePlacement& place, uint64_t counters_addr,
                                             uint64_t counters_length, bool shared_counters) {
  std::vector<SeccompCall> calls = {{SYS_mmap, mmap_args(place.addr, place.length, PROT_READ | PROT_EXEC, kCacheFlags)},
                                    {SYS_munmap, {place.addr, place.length, 0, 0, 0, 0}}};
  if (place.huge)
    calls.push_back({SYS_madvise, {place.addr, place.length, MADV_HUGEPAGE, 0, 0, 0}});
  if (counters_length) {
    calls.push_back(
        {SYS_mmap, mmap_args(counters_addr, counters_length, PROT_READ | PROT_WRITE, counter_flags(shared_counters))});
    calls.push_back({SYS_munmap, {counters_addr, counters_length, 0, 0, 0, 0}});
  }
  return calls;
}

Result<MappedCache> map_cache(WorldStop& world, const SyscallSites& sites, const CachePlacement& place) {
  auto mapped = map_exactly(world, sites, place.addr, place.length, PROT_READ | PROT_EXEC, kCacheFlags);
  if (!mapped) return mapped;
  MappedCache cache = *mapped;
  const pid_t tid = cache.thread;
  if (!place.huge) return cache;  // a small cache: small pages
  auto advised = remote_syscall(world, tid, sites, SYS_madvise, {place.addr, place.length, MADV_HUGEPAGE, 0, 0, 0});
  cache.huge_advised = advised && *advised == 0;  // refused (THP off, old kernel): small pages, same code
  return cache;
}

namespace {

// The cache's mapping as /proc/PID/maps has it now, if it is still exactly
// the one map_cache made. Read after `memory` is opened: if the target execs
// or exits and its pid is reused after the check, that descriptor still
// names the old memory, and a write goes nowhere instead of into the new image.
Result<profiler::Mapping> checked_cache_mapping(pid_t pid, const MappedCache& cache) {
  auto maps = profiler::read_maps(pid);
  if (!maps) return std::unexpected(maps.error());
  const profiler::Mapping* m = mapping_at(*maps, cache.addr);
  if (!m || !is_the_cache(*m, cache))
    return fail(fmt::format("the cache mapping at {:#x} is no longer the one dyni made", cache.addr));
  return *m;
}

}  // namespace

Status write_cache(pid_t pid, const MappedCache& cache, std::span<const uint8_t> bytes, uint64_t offset) {
  WindowMemory memory(pid);  // opened first: see checked_cache_mapping
  auto m = checked_cache_mapping(pid, cache);
  if (!m) return std::unexpected(m.error());
  if (offset > cache.length) return fail("write past the cache's end");
  return memory.write_in_mapping(*m, cache.addr + offset, bytes);
}

Status touch_cache(pid_t pid, const MappedCache& cache, uint64_t stride) {
  WindowMemory memory(pid);  // opened first: see checked_cache_mapping
  auto m = checked_cache_mapping(pid, cache);
  if (!m) return std::unexpected(m.error());
  const uint8_t zero = 0;
  for (uint64_t offset = 0; offset < cache.length; offset += stride)
    if (auto r = memory.write_in_mapping(*m, cache.addr + offset, {&zero, 1}); !r) return r;
  return ok();
}

namespace {

// A "Name:   N kB" field of one smaps entry (from `at` to its VmFlags line).
Result<uint64_t> smaps_kib(const std::string& smaps, std::size_t at, const char* name) {
  std::size_t field = smaps.find(fmt::format("\n{}:", name), at);
  std::size_t next = smaps.find("\nVmFlags:", at);
  if (field == std::string::npos || (next != std::string::npos && field > next))
    return fail(fmt::format("no {} for the cache mapping", name));
  std::istringstream in(smaps.substr(field + std::strlen(name) + 2, 32));
  uint64_t kib = 0;
  in >> kib;
  return kib;
}

}  // namespace

Result<uint64_t> huge_page_bytes(pid_t pid, const MappedCache& cache) {
  auto smaps = read_file(fmt::format("/proc/{}/smaps", pid), 64 << 20);
  if (!smaps) return std::unexpected(smaps.error());
  // As the kernel prints them: at least 8 hex digits (a cache at 0x200000 is 00200000).
  std::string head = fmt::format("{:08x}-{:08x} ", cache.addr, cache.addr + cache.length);
  std::size_t at = smaps->find(head);
  if (at == std::string::npos || (at != 0 && (*smaps)[at - 1] != '\n'))
    return fail(fmt::format("no mapping {}in smaps", head));
  auto anon = smaps_kib(*smaps, at, "AnonHugePages");
  if (!anon) return std::unexpected(anon.error());
  auto hugetlb = smaps_kib(*smaps, at, "Private_Hugetlb");
  return (*anon + (hugetlb ? *hugetlb : 0)) * 1024;
}

Status unmap_cache(WorldStop& world, const SyscallSites& sites, const MappedCache& cache) {
  auto r = syscall_in_any_thread(world, sites, SYS_munmap, {cache.addr, cache.length, 0, 0, 0, 0});
  if (!r) return std::unexpected(r.error());
  if (r->second != 0) return fail(fmt::format("remote munmap of {:#x}: {}", cache.addr, std::strerror(static_cast<int>(-r->second))));
  return ok();
}

}  // namespace dyni
