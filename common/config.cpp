// inih-based parser and validator for /etc/dyni.conf.
#include "common/config.h"

#include <fmt/format.h>
#include <ini.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

#include "common/file_io.h"
#include "common/printable.h"

namespace dyni {
namespace {

// Feeds inih one line at a time and remembers which line it is on, so the
// handler can report line numbers (Debian's inih has no INI_HANDLER_LINENO).
// It also turns the bare names of [exeList] ("mysqld") into "mysqld =", because
// Debian's inih is built without INI_ALLOW_NO_VALUE.
// Lines are handed to inih trimmed, so an indented line is never taken as the
// continuation of the value above (inih's multi-line values), which would set
// a key a second time from a line that names no key.
struct LineReader {
  std::istringstream in;
  int line = 0;
  std::string section;
  bool saw_exe_list = false;
  int refused_line = 0;  // first line inih must not see as it is, and why
  std::string refused_why;
};

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

// Drops an inline " ; comment" the way inih does (';' after whitespace).
std::string strip_inline_comment(const std::string& trimmed) {
  for (std::size_t i = 1; i < trimmed.size(); ++i)
    if (trimmed[i] == ';' && (trimmed[i - 1] == ' ' || trimmed[i - 1] == '\t'))
      return trim(trimmed.substr(0, i));
  return trimmed;
}

bool is_bare_name(const std::string& content) {
  return !content.empty() && content.find_first_of("=:;#[") == std::string::npos;
}

// Records the first refused line and replaces it by one inih rejects, so that
// parsing stops there.
void refuse_line(LineReader& reader, std::string& text, const char* why) {
  if (!reader.refused_line) {
    reader.refused_line = reader.line;
    reader.refused_why = why;
  }
  text.assign(1, '[');
}

char* read_line(char* buffer, int size, void* stream) {
  auto* reader = static_cast<LineReader*>(stream);
  std::string raw;
  if (!std::getline(reader->in, raw)) return nullptr;
  ++reader->line;
  std::string text = trim(raw);
  std::string content = strip_inline_comment(text);
  if (text.starts_with("[") && text.find(']') != std::string::npos) {
    reader->section = text.substr(1, text.find(']') - 1);
    if (reader->section == "exeList") reader->saw_exe_list = true;
  } else if (reader->section == "exeList" && is_bare_name(content)) {
    text = content + " =";
  }
  // inih reads C strings: a NUL would silently cut the line short.
  if (raw.find('\0') != std::string::npos) refuse_line(*reader, text, "contains a NUL byte");
  if (text.size() + 2 > static_cast<std::size_t>(size)) refuse_line(*reader, text, "line too long");
  std::memcpy(buffer, text.c_str(), text.size());
  buffer[text.size()] = '\n';
  buffer[text.size() + 1] = '\0';
  return buffer;
}

struct ParseState {
  LineReader* reader;
  Config config;
  std::map<std::string, int> first_line;  // "section\nkey" -> line that set it
  int error_line = 0;
  std::string error;
};

using Setter = std::function<std::string(Config&, const std::string&)>;

// Parses an integer within [lo, hi]; returns an error text or "".
std::string parse_int(const std::string& value, int lo, int hi, int& out) {
  int v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size())
    return "'" + value + "' is not an integer";
  if (v < lo || v > hi)
    return "'" + value + "' out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  out = v;
  return "";
}

std::string parse_percent(const std::string& value, double& out) {
  int v = 0;
  std::string err = parse_int(value, 1, 100000, v);
  if (err.empty()) out = v;
  return err;
}

std::string parse_bool(const std::string& value, bool& out) {
  if (value == "true" || value == "yes" || value == "on" || value == "1") return out = true, "";
  if (value == "false" || value == "no" || value == "off" || value == "0") return out = false, "";
  return "'" + value + "' is not a boolean (true/false)";
}

std::string parse_path(const std::string& value, std::string& out) {
  if (value.empty() || value[0] != '/') return "'" + value + "' is not an absolute path";
  out = value;
  return "";
}

const std::map<std::string, Setter>& option_setters() {
  static const std::map<std::string, Setter> setters = {
      {"busy_threshold_percent",
       [](Config& c, const std::string& v) { return parse_percent(v, c.busy_threshold_percent); }},
      {"busy_window_ms",
       [](Config& c, const std::string& v) { return parse_int(v, 100, 600000, c.busy_window_ms); }},
      {"scan_interval_ms",
       [](Config& c, const std::string& v) { return parse_int(v, 50, 60000, c.scan_interval_ms); }},
      {"profile_frequency_hz",
       [](Config& c, const std::string& v) { return parse_int(v, 1, 100000, c.profile_frequency_hz); }},
      {"profile_max_seconds",
       [](Config& c, const std::string& v) { return parse_int(v, 1, 3600, c.profile_max_seconds); }},
      {"profile_min_samples",
       [](Config& c, const std::string& v) { return parse_int(v, 100, 10000000, c.profile_min_samples); }},
      {"log_file", [](Config& c, const std::string& v) { return parse_path(v, c.log_file); }},
      {"log_debug", [](Config& c, const std::string& v) { return parse_bool(v, c.log_debug); }},
      {"dynimize", [](Config& c, const std::string& v) { return parse_bool(v, c.dynimize); }},
      {"counting", [](Config& c, const std::string& v) { return parse_bool(v, c.counting); }},
      {"counting_min_seconds",
       [](Config& c, const std::string& v) { return parse_int(v, 0, 600, c.counting_min_seconds); }},
      {"counting_max_seconds",
       [](Config& c, const std::string& v) { return parse_int(v, 1, 600, c.counting_max_seconds); }},
      {"counting_duty_percent",
       [](Config& c, const std::string& v) { return parse_int(v, 10, 100, c.counting_duty_percent); }},
      {"copy_usdt_functions", [](Config& c, const std::string& v) { return parse_bool(v, c.copy_usdt_functions); }},
      {"probe_safe_entries", [](Config& c, const std::string& v) { return parse_bool(v, c.probe_safe_entries); }},
      {"entry_pads", [](Config& c, const std::string& v) { return parse_bool(v, c.entry_pads); }},
      {"all_hot_modules", [](Config& c, const std::string& v) { return parse_bool(v, c.all_hot_modules); }},
      {"min_module_percent", [](Config& c, const std::string& v) { return parse_int(v, 1, 100, c.min_module_percent); }},
      {"small_cache_kib", [](Config& c, const std::string& v) { return parse_int(v, 0, 2048, c.small_cache_kib); }},
      {"metrics_textfile",
       [](Config& c, const std::string& v) {
         if (v.empty()) return c.metrics_textfile = "", std::string();
         if (!v.ends_with(".prom")) return "'" + v + "' must end in .prom (node_exporter reads only those)";
         return parse_path(v, c.metrics_textfile);
       }},
      {"loop_alignment",
       [](Config& c, const std::string& v) -> std::string {
         int a = 0;
         std::string err = parse_int(v, 0, 64, a);
         if (err.empty() && a != 0 && a != 16 && a != 32 && a != 64) err = "'" + v + "' must be 0, 16, 32 or 64";
         if (err.empty()) c.loop_alignment = a;
         return err;
       }},
  };
  return setters;
}

// Why a path entry can never equal a path /proc/PID/exe names, or "".
// The kernel names executables by canonical absolute paths.
std::string path_entry_error(const std::string& quoted, const std::string& path) {
  if (path[0] != '/') return quoted + " must be a basename or an absolute path";
  if (path.back() == '/') return quoted + " ends in '/': it names a directory, not an executable";
  for (std::size_t start = 1, end; start <= path.size(); start = end + 1) {
    end = std::min(path.find('/', start), path.size());
    std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return quoted + " is not a canonical path (no '//', '.' or '..'): it would never match";
  }
  return "";
}

// Why `name` cannot be an [exeList] entry, or "": it must be a possible file
// name (a basename) or a canonical absolute path, in UTF-8 without control
// characters, so that logs and -status -json show it as it is. (Too long a
// name is refused earlier: "line too long".)
std::string exe_entry_error(const std::string& name) {
  std::string quoted = fmt::format("'{}'", printable(name));
  if (std::any_of(name.begin(), name.end(), is_control))
    return quoted + " contains a control character";
  if (!valid_utf8(name)) return quoted + " is not valid UTF-8";
  if (name.find('/') != std::string::npos) return path_entry_error(quoted, name);
  if (name == "." || name == "..") return quoted + " is a directory name, not an executable";
  return "";
}

std::string add_exe_entry(ParseState& state, const std::string& name, const std::string& value) {
  if (!value.empty())
    return "[exeList] entries are bare executable names or paths, not 'key = value'";
  if (std::string why = exe_entry_error(name); !why.empty()) return why;
  state.config.exe_list.push_back(name);
  return "";
}

// A key (or [exeList] name) given twice is refused, naming both lines: with
// the last one silently winning, an edit below an old line would look applied.
std::string check_first_time(ParseState& state, const std::string& section, const std::string& name) {
  auto [it, first] = state.first_line.emplace(section + "\n" + name, state.reader->line);
  if (first) return "";
  return fmt::format("'{}' is {} twice (first on line {})", printable(name),
                     section == "exeList" ? "listed" : "set", it->second);
}

std::string handle_entry(ParseState& state, const std::string& section, const std::string& name,
                         const std::string& value) {
  if (section == "exeList" || section == "options" || section == "license") {
    if (std::string twice = check_first_time(state, section, name); !twice.empty()) return twice;
  }
  if (section == "exeList") return add_exe_entry(state, name, value);
  if (section == "options") {
    auto it = option_setters().find(name);
    if (it == option_setters().end()) return fmt::format("unknown key '{}' in [options]", printable(name));
    return it->second(state.config, value);
  }
  if (section == "license") {
    if (name == "public_key") return parse_path(value, state.config.license_public_key);
    return fmt::format("unknown key '{}' in [license]", printable(name));
  }
  // (fmt, not "'" + s: GCC 12's -Wrestrict misfires on the latter here)
  if (section.empty()) return fmt::format("'{}' appears before any [section]", printable(name));
  return fmt::format("unknown section [{}]", printable(section));
}

int on_entry(void* user, const char* section, const char* name, const char* value) {
  auto* state = static_cast<ParseState*>(user);
  std::string error = handle_entry(*state, section, name, value ? value : "");
  if (error.empty()) return 1;
  if (!state->error_line) {
    state->error_line = state->reader->line;
    state->error = error;
  }
  return 0;
}

}  // namespace

Result<Config> parse_config(const std::string& text, const std::string& name) {
  LineReader reader{std::istringstream(text), 0, "", false, 0, ""};
  ParseState state{&reader, Config{}, {}, 0, ""};
  state.config.path = name;
  int syntax_line = ini_parse_stream(read_line, &reader, on_entry, &state);
  if (syntax_line < 0) return fail(name + ": cannot parse");
  if (reader.refused_line && (!state.error_line || reader.refused_line < state.error_line)) {
    state.error_line = reader.refused_line;
    state.error = reader.refused_why;
  }
  if (syntax_line > 0 && (!state.error_line || syntax_line < state.error_line)) {
    state.error_line = syntax_line;
    state.error = "syntax error (expected [section], name, or key = value)";
  }
  if (state.error_line)
    return fail(name + ":" + std::to_string(state.error_line) + ": " + state.error);
  if (!reader.saw_exe_list)
    return fail(name + ": missing [exeList] section (it lists the executables to optimize)");
  return state.config;
}

Result<Config> load_config(const std::string& path) {
  auto text = read_regular_file(path, kMaxConfigBytes, "config");
  if (!text) return std::unexpected(text.error());
  return parse_config(*text, path);
}

}  // namespace dyni
