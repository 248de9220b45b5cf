// Files dynid keeps per target process, beyond its life (copy_origins.h,
// gdb_symbols.h): named "PID-START-BOOT...", since pid and start time name
// a process only within one boot (start times count from boot), and pruned
// so that they never grow without bound, nor lose a running process's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace dyni {

// This boot's id (/proc/sys/kernel/random/boot_id), its first 8 hex digits.
std::string boot_id();
// "PID-START-BOOT": the start of every such file's name.
std::string process_file_stem(pid_t pid, uint64_t start_time);
// Whether the file named `name` ("PID-START-BOOT...") is a running process's.
bool of_a_live_process(const std::string& name);
// Removes the oldest files of `dir` whose processes are gone until at most
// `keep` remain; a running process's file is never removed (its crash may
// come after many other processes').
void prune_process_files(const std::string& dir, std::size_t keep);
// Whether `dir` is due for pruning: the first call, then at most once every
// `every` (thread-safe). A prune looks at every file and whether its process
// lives: with hundreds of live processes' files (a server's workers, each
// adopted with its own), pruning at each new file cost a scan of them all.
bool prune_due(const std::string& dir, std::chrono::seconds every = std::chrono::seconds(10));

}  // namespace dyni
