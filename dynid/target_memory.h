// A target's memory through /proc/PID/mem. Writes there ignore page
// protections: they go straight through PROT_NONE guard pages and into r-x
// code (DESIGN.md §7). So every write names the mapping it is meant for, and
// is refused unless it lies wholly inside it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "profiler/process_maps.h"

namespace dyni {

Result<std::vector<uint8_t>> read_target(pid_t pid, uint64_t addr, std::size_t length);
// The 8-byte word a read of 8 bytes gave (a GOT slot, a stack word), or
// nullopt when the read failed or came short.
std::optional<uint64_t> word_of(const Result<std::vector<uint8_t>>& bytes);

// Writes `bytes` at `addr` if [addr, addr + size) lies inside `within` (a
// mapping the caller read from /proc/PID/maps and checked is the right one).
Status write_in_mapping(pid_t pid, const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes);

// A held target's memory for one stop window: one descriptor of
// /proc/PID/mem, pages read once and kept (many small reads: live entry
// bytes, stack words), writes bounded like write_in_mapping. Never keep one
// across windows: the target changes its memory whenever it runs.
class WindowMemory {
 public:
  explicit WindowMemory(pid_t pid);
  ~WindowMemory();
  WindowMemory(const WindowMemory&) = delete;
  WindowMemory& operator=(const WindowMemory&) = delete;

  Result<std::vector<uint8_t>> read(uint64_t addr, std::size_t length);
  Status write_in_mapping(const profiler::Mapping& within, uint64_t addr, std::span<const uint8_t> bytes);

 private:
  const uint8_t* page(uint64_t base);  // null: unreadable

  pid_t pid_;
  int fd_;
  std::unordered_map<uint64_t, std::vector<uint8_t>> pages_;  // empty: unreadable
};

// The mapping that holds `addr`, or null.
const profiler::Mapping* mapping_at(const std::vector<profiler::Mapping>& maps, uint64_t addr);

}  // namespace dyni
