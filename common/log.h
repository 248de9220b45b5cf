// Daemon log: one line per event, timestamped, with greppable prefixes
// DYNID-INFO / DYNID-WARN / DYNID-ERROR (and DYNID-DEBUG when enabled).
#pragma once

#include <fmt/format.h>

#include <string>

#include "common/result.h"

namespace dyni::log {

enum class Level { Debug, Info, Warn, Error };

// Where lines go: a file (appended, reopened on reload) or stderr (journald
// adds its own timestamps but ours stay, so lines read the same everywhere).
// Until open_file is called, lines go to stderr. A stderr that is
// journald's stream (JOURNAL_STREAM, as systemd sets it) gets each line's
// syslog priority as a "<N>" prefix, which journald keeps as the entry's
// priority (journalctl -p warning).
Status open_file(const std::string& path);
void use_stderr();
Status reopen();
void set_debug(bool enabled);

void write(Level level, const std::string& text);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dyni::log
