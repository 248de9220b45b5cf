// Turns a target's instruction pointers into (module, function, offset).
// Modules are the file-backed executable mappings of /proc/PID/maps, read
// through /proc/PID/map_files so deleted or replaced files still resolve.
// Only file-backed ELF code is ever named; anonymous executable memory (JITs)
// is reported as such and never touched (DESIGN.md §7).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "profiler/process_maps.h"

namespace dyni::profiler {

struct Module {
  std::string path;           // as the target maps it
  bool deleted = false;
  uint64_t bias = 0;          // runtime address - link-time address
  std::string error;          // why it could not be read, if it could not
  std::shared_ptr<const elf::FunctionTable> functions;  // null when unreadable
  uint64_t inode = 0;         // of the file, as the target maps it
  uint64_t dev = 0;           // its device (Mapping::dev)
};

struct Location {
  int module = -1;                         // index into modules(); -1: not file-backed code
  const elf::Function* function = nullptr; // null when no function covers the address
  uint64_t link_addr = 0;                  // address in the module's own numbering
};

// The bias (run-time less link-time address) of code mapping `m` of `file`:
// the PT_LOAD segment that holds its file offset tells (PIE, non-PIE and
// shared objects alike).
Result<uint64_t> mapping_bias(const elf::ElfFile& file, const Mapping& m);

class Symbolizer {
 public:
  // Reads the target's maps and every executable module it maps.
  static Result<Symbolizer> for_process(pid_t pid);

  Location locate(uint64_t ip) const;
  const std::vector<Module>& modules() const { return modules_; }

 private:
  struct Range {
    uint64_t start, end;
    int module;
  };
  std::vector<Module> modules_;
  std::vector<Range> ranges_;  // executable mappings, sorted
};

}  // namespace dyni::profiler
