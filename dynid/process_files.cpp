// Per-process files of dynid's (process_files.h).
#include "dynid/process_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "common/file_io.h"
#include "dynid/proc_reader.h"

namespace dyni {

std::string boot_id() {
  // One boot's: read once it has been read; a read that failed (no file
  // descriptor left, for a moment) is tried again next time, never kept.
  static std::mutex mutex;
  static std::string id;
  std::lock_guard lock(mutex);
  if (!id.empty()) return id;
  auto text = read_file("/proc/sys/kernel/random/boot_id", 64);
  if (!text || text->size() < 8) return "noboot00";
  id = text->substr(0, 8);
  return id;
}

bool of_a_live_process(const std::string& name) {
  pid_t pid = 0;
  unsigned long long start = 0;
  char boot[9] = {};
  if (std::sscanf(name.c_str(), "%d-%llu-%8[0-9a-f]", &pid, &start, boot) != 3) return false;
  auto stat = read_proc_stat("/proc", pid);
  return stat && stat->start_time == start && boot_id() == boot;
}

bool prune_due(const std::string& dir, std::chrono::seconds every) {
  static std::mutex mutex;
  static std::map<std::string, std::chrono::steady_clock::time_point> last;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex);
  auto [it, first] = last.try_emplace(dir, now);
  if (!first && now - it->second < every) return false;
  it->second = now;
  return true;
}

void prune_process_files(const std::string& dir, std::size_t keep) {
  std::error_code ec;
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) files.emplace_back(e.last_write_time(ec), e.path());
  if (files.size() <= keep) return;
  std::sort(files.begin(), files.end());
  std::size_t excess = files.size() - keep;
  for (std::size_t i = 0; i < files.size() && excess > 0; ++i)
    if (!of_a_live_process(files[i].second.filename().string())) std::filesystem::remove(files[i].second, ec), --excess;
}

std::string process_file_stem(pid_t pid, uint64_t start_time) {
  return fmt::format("{}-{}-{}", pid, start_time, boot_id());
}

}  // namespace dyni
