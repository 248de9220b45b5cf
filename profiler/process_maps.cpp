// Parsing /proc/PID/maps lines.
#include "profiler/process_maps.h"

#include <charconv>
#include <sstream>

#include "common/file_io.h"

namespace dyni::profiler {
namespace {

bool parse_hex(std::string_view s, uint64_t& out) {
  return !s.empty() && std::from_chars(s.data(), s.data() + s.size(), out, 16).ec == std::errc();
}

// "start-end perms offset dev inode   path"
Result<Mapping> parse_line(const std::string& line) {
  std::istringstream in(line);
  std::string range, perms, offset, dev, inode;
  if (!(in >> range >> perms >> offset >> dev >> inode) || perms.size() < 4)
    return fail("malformed maps line: " + line);
  Mapping m;
  std::size_t dash = range.find('-');
  if (dash == std::string::npos || !parse_hex(std::string_view(range).substr(0, dash), m.start) ||
      !parse_hex(std::string_view(range).substr(dash + 1), m.end) || !parse_hex(offset, m.offset) ||
      std::from_chars(inode.data(), inode.data() + inode.size(), m.inode).ec != std::errc())
    return fail("malformed maps line: " + line);
  // "fd:01": major and minor in hex.
  uint64_t major = 0, minor = 0;
  std::size_t colon = dev.find(':');
  if (colon == std::string::npos || !parse_hex(std::string_view(dev).substr(0, colon), major) ||
      !parse_hex(std::string_view(dev).substr(colon + 1), minor))
    return fail("malformed maps line: " + line);
  m.dev = major << 32 | minor;
  m.readable = perms[0] == 'r';
  m.writable = perms[1] == 'w';
  m.executable = perms[2] == 'x';
  m.shared = perms[3] == 's';
  std::getline(in >> std::ws, m.path);
  constexpr std::string_view kDeleted = " (deleted)";
  if (m.path.ends_with(kDeleted)) {
    m.path.resize(m.path.size() - kDeleted.size());
    m.deleted = true;
  }
  return m;
}

}  // namespace

Result<std::vector<Mapping>> parse_maps(const std::string& text) {
  std::vector<Mapping> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto m = parse_line(line);
    if (!m) return std::unexpected(m.error());
    out.push_back(*m);
  }
  return out;
}

Result<std::vector<Mapping>> read_maps(pid_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/maps", 64 << 20);
  if (!text) return std::unexpected(text.error());
  return parse_maps(*text);
}

}  // namespace dyni::profiler
