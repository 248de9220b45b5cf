// /proc parsing for discovery: stat fields, exe link, namespaces, pid list.
#include "dynid/proc_reader.h"

#include <unistd.h>

#include <charconv>
#include <sstream>

#include "common/errno_text.h"
#include "common/file_io.h"

namespace dyni {
namespace {

constexpr std::string_view kDeletedSuffix = " (deleted)";

Result<std::string> read_link(const std::string& path) {
  std::string buf(4096, '\0');
  ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  if (n < 0) return fail(sys_error("readlink " + path));
  if (static_cast<std::size_t>(n) == buf.size()) return fail(path + ": link target too long");
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

std::string pid_dir(const std::string& proc_root, pid_t pid) {
  return proc_root + "/" + std::to_string(pid);
}

}  // namespace

Result<ProcStat> parse_proc_stat(const std::string& text) {
  // "pid (comm) state ppid ..." — comm is whatever the process chose, so the
  // fields after it are found from the *last* ')'.
  std::size_t open = text.find('(');
  std::size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return fail("malformed /proc stat line");
  ProcStat st;
  std::string_view head(text.data(), open);
  while (!head.empty() && head.back() == ' ') head.remove_suffix(1);
  if (std::from_chars(head.data(), head.data() + head.size(), st.pid).ec != std::errc())
    return fail("malformed /proc stat pid");
  st.comm = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 1));
  // Fields from 3 (state) on; utime=14, stime=15, cutime=16, cstime=17, num_threads=20, starttime=22, startcode=26,
  // startstack=28 (proc(5)).
  std::vector<std::string> fields;
  for (std::string f; rest >> f && fields.size() < 26;) fields.push_back(f);
  if (fields.size() < 20) return fail("malformed /proc stat: too few fields");
  st.state = fields[0].empty() ? '?' : fields[0][0];
  uint64_t utime = 0, stime = 0;
  auto num = [](const std::string& s, uint64_t& out) {
    return std::from_chars(s.data(), s.data() + s.size(), out).ec == std::errc();
  };
  if (!num(fields[11], utime) || !num(fields[12], stime) || !num(fields[19], st.start_time))
    return fail("malformed /proc stat numbers");
  st.cpu_ticks = utime + stime;
  uint64_t cutime = 0, cstime = 0;  // signed in the kernel's type, never negative in its values
  if (num(fields[13], cutime) && num(fields[14], cstime)) st.children_ticks = cutime + cstime;
  uint64_t ppid = 0;
  if (num(fields[1], ppid)) st.ppid = static_cast<pid_t>(ppid);
  (void)num(fields[17], st.threads);
  uint64_t start_code = 0, start_stack = 0;
  // Hidden (no ptrace access), the kernel prints startcode 1 and startstack
  // 0; in the middle of an exec start_code is still 0: no marker then.
  if (fields.size() >= 26 && num(fields[23], start_code) && num(fields[25], start_stack) && start_code > 1 &&
      start_stack != 0)
    st.image = start_code ^ (start_stack << 1);
  return st;
}

Result<ProcStat> read_proc_stat(const std::string& proc_root, pid_t pid) {
  auto text = read_file(pid_dir(proc_root, pid) + "/stat", 64 * 1024);
  if (!text) return std::unexpected(text.error());
  return parse_proc_stat(*text);
}

Result<ExePath> read_exe(const std::string& proc_root, pid_t pid) {
  auto link = read_link(pid_dir(proc_root, pid) + "/exe");
  if (!link) return std::unexpected(link.error());
  ExePath exe{*link, false};
  if (exe.path.ends_with(kDeletedSuffix)) {
    exe.path.resize(exe.path.size() - kDeletedSuffix.size());
    exe.deleted = true;
  }
  return exe;
}

std::string read_mount_namespace(const std::string& proc_root, pid_t pid) {
  auto link = read_link(pid_dir(proc_root, pid) + "/ns/mnt");
  return link ? *link : "";
}

std::vector<pid_t> list_pids(const std::string& proc_root) { return list_numeric_entries(proc_root); }

std::string status_field(const std::string& status, std::string_view name) {
  // At a line's start only: a thread may name itself "TracerPid:1" (Name: comes first).
  for (std::size_t at = 0; at < status.size();) {
    const std::size_t eol = std::min(status.find('\n', at), status.size());
    const std::string_view line(status.data() + at, eol - at);
    if (line.starts_with(name)) return std::string(line.substr(name.size()));
    at = eol + 1;
  }
  return "";
}

}  // namespace dyni
