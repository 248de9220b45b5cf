// /proc/PID/maps: which file is mapped where, to turn sampled IPs into
// (module, link-time address).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::profiler {

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  bool readable = false, writable = false, executable = false;
  bool shared = false;  // 's' in the permissions: MAP_SHARED
  uint64_t offset = 0;  // file offset of `start`
  uint64_t dev = 0;     // the file's device, major << 32 | minor (0 for anonymous memory)
  uint64_t inode = 0;
  std::string path;     // "" for anonymous memory; "[vdso]" etc. for special ones
  bool deleted = false; // the file was unlinked or replaced
  bool file_backed() const { return inode != 0 && !path.empty() && path[0] == '/'; }
};

Result<std::vector<Mapping>> parse_maps(const std::string& text);
Result<std::vector<Mapping>> read_maps(pid_t pid);

}  // namespace dyni::profiler
