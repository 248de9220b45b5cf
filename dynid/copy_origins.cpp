// The origins file (copy_origins.h).
#include "dynid/copy_origins.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/paths.h"
#include "common/printable.h"
#include "dynid/proc_reader.h"
#include "dynid/process_files.h"

namespace dyni {
namespace {

std::optional<uint64_t> hex(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

Result<std::vector<std::pair<uint32_t, uint64_t>>> parse_lines(std::string_view s) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  while (!s.empty()) {
    std::size_t comma = s.find(',');
    std::string_view pair = s.substr(0, comma);
    std::size_t colon = pair.find(':');
    auto off = colon == std::string_view::npos ? std::nullopt : hex(pair.substr(0, colon));
    auto orig = colon == std::string_view::npos ? std::nullopt : hex(pair.substr(colon + 1));
    if (!off || !orig || *off > UINT32_MAX || (!out.empty() && *off <= out.back().first))
      return fail(fmt::format("bad instruction pair '{}'", pair));
    out.emplace_back(static_cast<uint32_t>(*off), *orig);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
  }
  return out;
}

Result<CopyOrigin> parse_line(const std::string& line) {
  std::istringstream in(line);
  std::string addr, size, entry, tier, lines;
  if (!(in >> addr >> size >> entry >> tier >> lines)) return fail("too few fields");
  CopyOrigin c;
  auto a = hex(addr), n = hex(size), e = hex(entry);
  if (!a || !n || !e || *n == 0 || *a + *n < *a) return fail("bad address, size or entry");
  c.cache_addr = *a, c.size = *n, c.original_entry = *e, c.tier = tier;
  if (lines != "-") {  // "-": no instructions recorded (a copy rebuilt for an adopted process)
    auto pairs = parse_lines(lines);
    if (!pairs) return std::unexpected(pairs.error());
    if (pairs->empty() || pairs->front().first != 0 || pairs->back().first >= *n) return fail("pairs outside the copy");
    c.lines = std::move(*pairs);
  }
  for (auto& line : c.lines) line.second += c.original_entry;
  std::getline(in >> std::ws, c.name);
  return c;
}

}  // namespace

std::string origins_dir() { return paths::state_dir() + "/origins"; }

std::string origins_path(pid_t pid, uint64_t start_time) {
  return fmt::format("{}/{}.txt", origins_dir(), process_file_stem(pid, start_time));
}

std::string origin_line(const CopyOrigin& c) {
  std::string pairs;
  // The original as an offset from the entry (modulo 2^64): half the bytes.
  for (const auto& [off, orig] : c.lines)
    pairs += fmt::format("{}{:x}:{:x}", pairs.empty() ? "" : ",", off, orig - c.original_entry);
  return fmt::format("{:x} {:x} {:x} {} {} {}\n", c.cache_addr, c.size, c.original_entry, c.tier,
                     pairs.empty() ? "-" : pairs,
                     one_line(c.name));
}

Result<std::vector<CopyOrigin>> parse_origins(const std::string& text, std::size_t* skipped) {
  std::vector<CopyOrigin> out;
  std::istringstream in(text);
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    auto c = parse_line(line);
    if (c) out.push_back(std::move(*c));
    else if (skipped) ++*skipped;  // cut short by a dynid killed while writing it
    else return fail(fmt::format("line {}: {}", number, c.error().message()));
  }
  return out;
}

Status append_origins(pid_t pid, uint64_t start_time, const std::vector<CopyOrigin>& copies) {
  if (auto dir = ensure_dir_p(origins_dir(), 0700); !dir) return dir;
  const std::string path = origins_path(pid, start_time);
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(path + ": " + errno_text());
  // A line cut short by a killed dynid ends here, not inside the next one.
  char last = '\n';
  if (const off_t end = ::lseek(fd, 0, SEEK_END); end > 0 && ::pread(fd, &last, 1, end - 1) != 1) last = '\n';
  std::string text;
  if (last != '\n') text.push_back('\n');
  for (const CopyOrigin& c : copies) text += origin_line(c);
  Status written = write_all(fd, text);
  ::close(fd);
  if (!written) return fail(path + ": " + written.error().message());
  if (prune_due(origins_dir())) prune_process_files(origins_dir(), kMaxOriginFiles);
  return ok();
}

Result<OriginsFile> origins_file_for(pid_t pid) {
  if (auto stat = read_proc_stat("/proc", pid)) {
    std::string path = origins_path(pid, stat->start_time);
    if (::access(path.c_str(), R_OK) == 0) return OriginsFile{path, false};
  }
  // Gone (or its file is from an earlier process with this pid): the newest for the pid.
  std::error_code ec;
  std::optional<std::pair<std::filesystem::file_time_type, std::string>> newest;
  const std::string prefix = std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator(origins_dir(), ec)) {
    if (!e.path().filename().string().starts_with(prefix)) continue;
    auto when = e.last_write_time(ec);
    if (!newest || when > newest->first) newest = {when, e.path().string()};
  }
  if (!newest) return fail(fmt::format("no copies of dyni's were recorded for process {} (in {})", pid, origins_dir()));
  if (auto stat = read_proc_stat("/proc", pid))
    return fail(fmt::format("process {} has no copies of dyni's ({} is an earlier process's with that pid)", pid,
                            newest->second));
  return OriginsFile{newest->second, true};
}

std::optional<Origin> origin_of(const std::vector<CopyOrigin>& copies, uint64_t addr) {
  // The newest copy holding it (a later injection may reuse a place).
  for (auto c = copies.rbegin(); c != copies.rend(); ++c) {
    if (addr < c->cache_addr || addr - c->cache_addr >= c->size) continue;
    const uint64_t off = addr - c->cache_addr;
    if (c->lines.empty()) return Origin{&*c, c->original_entry, false};
    auto line = std::upper_bound(c->lines.begin(), c->lines.end(), off,
                                 [](uint64_t o, const auto& l) { return o < l.first; });
    return Origin{&*c, std::prev(line)->second};  // lines start at offset 0 (parse_line)
  }
  return std::nullopt;
}

std::string describe_origin(uint64_t addr, const std::optional<Origin>& origin) {
  if (!origin) return fmt::format("{:#x}: in no copy of dyni's", addr);
  const CopyOrigin& c = *origin->copy;
  if (!origin->exact)
    return fmt::format("{:#x}: {} (original {:#x}; which instruction is not recorded) at +{:#x} in dyni's {} copy at {:#x}",
                       addr, c.name, c.original_entry, addr - c.cache_addr, c.tier, c.cache_addr);
  return fmt::format("{:#x}: {}+{:#x} (original {:#x}) in dyni's {} copy at {:#x}", addr, c.name,
                     origin->original - c.original_entry, origin->original, c.tier, c.cache_addr);
}

}  // namespace dyni
