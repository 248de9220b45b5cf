// Where dyni's copies came from, kept on disk for `dyni -addr2orig`
// (issue 23 item 3): a crash dump, glibc's backtrace() or a core file shows
// cache addresses, which mean nothing once the process is gone. After each
// injection dynid appends one line per copy to
// <state_dir>/origins/PID-STARTTIME-BOOT.txt (root's, 0600; BOOT: the first
// 8 digits of the boot id, since start times count from boot): the copy's place,
// its original function's entry and name, its tier, and where each of its
// instructions came from. Start time with pid names the process, so a new
// process with an old pid is never explained by the old one's copies.
// Files outlive their processes; beyond kMaxOriginFiles the oldest files
// of processes that are gone are removed, never a running process's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace dyni {

inline constexpr std::size_t kMaxOriginFiles = 64;

struct CopyOrigin {
  uint64_t cache_addr = 0, size = 0;  // run-time
  uint64_t original_entry = 0;        // run-time
  std::string tier;                   // "counting" or "optimized"
  std::string name;                   // for people: demangled, or func_<hex>
  // (offset in the copy, the run-time original instruction it stands for),
  // where that changes; counter code and added jumps stand for the
  // instruction they run before or continue at. Empty for a copy rebuilt
  // from an adopted process's memory (dynid/adopted_copies.h): "-" on disk.
  std::vector<std::pair<uint32_t, uint64_t>> lines;
};

std::string origins_dir();  // <state_dir>/origins
std::string origins_path(pid_t pid, uint64_t start_time);

// One line of the file: "ADDR SIZE ENTRY TIER OFF:ORIG,... NAME" (hex; each
// ORIG less ENTRY).
std::string origin_line(const CopyOrigin& c);
// Reads the lines back. A line that does not parse fails the file, or with
// `skipped` is counted there and left out (a dynid killed while writing
// leaves one line cut short).
Result<std::vector<CopyOrigin>> parse_origins(const std::string& text, std::size_t* skipped = nullptr);

// Appends `copies` to the file of process (pid, start_time), then (at most
// every 10 s: prune_due) removes all but the newest kMaxOriginFiles files.
Status append_origins(pid_t pid, uint64_t start_time, const std::vector<CopyOrigin>& copies);

// The file that explains process `pid`: its own while it runs (start time
// read from /proc), else the newest one for that pid; `gone` says which.
struct OriginsFile {
  std::string path;
  bool gone = false;
};
Result<OriginsFile> origins_file_for(pid_t pid);

// What cache address `addr` was: the copy holding it and the original
// instruction it stands for; none when no copy holds it.
struct Origin {
  const CopyOrigin* copy = nullptr;
  uint64_t original = 0;
  bool exact = true;  // false: the copy has no instructions recorded; `original` is its entry
};
std::optional<Origin> origin_of(const std::vector<CopyOrigin>& copies, uint64_t addr);

// "0xADDR: NAME+0xOFF (original 0x…) in dyni's TIER copy at 0x…", or
// "0xADDR: in no copy of dyni's".
std::string describe_origin(uint64_t addr, const std::optional<Origin>& origin);

}  // namespace dyni
