// Prometheus text format (metrics.h): HELP and TYPE once per metric, then
// its samples; label values escaped (\\, \", \n).
#include "dynid/metrics.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/paths.h"

#include <ctime>
#include <vector>

#include "common/errno_text.h"
#include "common/file_io.h"

namespace dyni {
namespace {

std::string escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

struct Sample {
  std::string labels;  // `{a="b"}` or ""
  double value = 0;
};

class Exposition {
 public:
  void add(const std::string& name, const char* type, const char* help, std::vector<Sample> samples) {
    if (samples.empty()) return;
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const Sample& s : samples) text_ += fmt::format("{}{} {}\n", name, s.labels, s.value);
  }
  std::string text() const { return text_; }

 private:
  std::string text_;
};

std::string target_labels(const nlohmann::json& t, const std::string& extra = "") {
  return fmt::format("{{name=\"{}\",pid=\"{}\"{}}}", escaped(t.value("name", "")), t.value("pid", 0), extra);
}

// One sample per target that has `value(t)` (a number; null: none).
template <typename F>
std::vector<Sample> per_target(const nlohmann::json& targets, F value) {
  std::vector<Sample> out;
  for (const auto& t : targets) {
    const nlohmann::json v = value(t);
    if (v.is_number()) out.push_back({target_labels(t), v.get<double>()});
  }
  return out;
}

nlohmann::json at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* p = &j;
  for (const char* key : path) {
    if (!p->is_object() || !p->contains(key)) return nullptr;
    p = &(*p)[key];
  }
  return *p;
}

// `path` in the target's first module's facts (under "dynimized") plus the
// same in each further module's ([options] all_hot_modules: "more_modules"),
// with `working_only` in those that did not fail (whose patches were
// undone, their caches mapped still); null when the first has none.
nlohmann::json summed_over_modules(const nlohmann::json& t, std::initializer_list<const char*> path,
                                   bool working_only = true) {
  const nlohmann::json d = at(t, {"dynimized"});
  nlohmann::json first = at(d, path);
  if (!first.is_number()) return nullptr;
  double sum = first.get<double>();
  for (const nlohmann::json& m : at(d, {"more_modules"}).is_array() ? at(d, {"more_modules"}) : nlohmann::json::array())
    if (nlohmann::json v = at(m, path); v.is_number() && (!working_only || m.value("error", "") == ""))
      sum += v.get<double>();
  return sum;
}

void add_targets(Exposition& e, const nlohmann::json& targets) {
  std::vector<Sample> states;
  for (const auto& t : targets)
    states.push_back({target_labels(t, fmt::format(",state=\"{}\"", escaped(t.value("state", "")))), 1});
  e.add("dyni_target_state", "gauge", "A target of dyni's and its state (1 for the state it is in).", states);
  e.add("dyni_target_cpu_percent", "gauge", "The target's CPU use over dynid's busy window, percent of one CPU.",
        per_target(targets, [](const nlohmann::json& t) { return at(t, {"cpu_percent"}); }));
  e.add("dyni_target_functions_optimized", "gauge", "Functions of the target running as dyni's copies (every module's).",
        per_target(targets, [](const nlohmann::json& t) { return summed_over_modules(t, {"functions_copied"}); }));
  e.add("dyni_target_entries_patched", "gauge", "Function entries patched to jump to the copies (every module's).",
        per_target(targets, [](const nlohmann::json& t) { return summed_over_modules(t, {"functions_patched"}); }));
  e.add("dyni_target_cache_bytes", "gauge", "Bytes of the code caches mapped in the target (every module's).",
        per_target(targets, [](const nlohmann::json& t) { return summed_over_modules(t, {"cache", "bytes"}, false); }));
  e.add("dyni_target_cache_huge_page_bytes", "gauge", "Bytes of the code cache on huge pages (hugetlb included).",
        per_target(targets, [](const nlohmann::json& t) { return at(t, {"dynimized", "cache", "huge_page_bytes"}); }));
  e.add("dyni_target_longest_stop_seconds", "gauge", "The longest time dyni held the target's threads stopped.",
        per_target(targets, [](const nlohmann::json& t) {
          auto ms = at(t, {"dynimized", "longest_stop_ms"});
          return ms.is_number() ? nlohmann::json(ms.get<double>() / 1000) : nlohmann::json(nullptr);
        }));
  e.add("dyni_target_seconds_to_dynimized", "gauge", "Seconds from the start of profiling to the optimized code.",
        per_target(targets, [](const nlohmann::json& t) {
          auto p = at(t, {"dynimized", "seconds_profiling"}), o = at(t, {"dynimized", "seconds_optimizing"});
          return p.is_number() && o.is_number() ? nlohmann::json(p.get<double>() + o.get<double>())
                                                : nlohmann::json(nullptr);
        }));
  e.add("dyni_target_patch_windows_total", "counter", "Stop windows in which dyni patched the target.",
        per_target(targets, [](const nlohmann::json& t) { return at(t, {"dynimized", "patch_windows"}); }));
  e.add("dyni_target_undo_total", "counter", "dyni -undo applied to the target.",
        per_target(targets, [](const nlohmann::json& t) { return at(t, {"dynimized", "undo_count"}); }));
  e.add("dyni_target_redo_total", "counter", "dyni -redo applied to the target.",
        per_target(targets, [](const nlohmann::json& t) { return at(t, {"dynimized", "redo_count"}); }));
}

// The directory of `path`, opened without following a link at its last step.
int open_parent(const std::string& path) {
  const std::string dir = path.substr(0, path.rfind('/'));
  return ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

}  // namespace

Status write_textfile(const std::string& path, const std::string& text) {
  const int dir = open_parent(path);
  if (dir < 0) return errno == ENOENT ? ok() : fail(path + ": its directory: " + errno_text());
  uint64_t random = 0;
  if (::getrandom(&random, sizeof random, 0) != sizeof random) random = static_cast<uint64_t>(::getpid()) << 20 ^ ::time(nullptr);
  const std::string name(paths::file_name(path));
  const std::string tmp = fmt::format(".{}.{:016x}", name, random);
  const int fd = ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string why = errno_text();
    ::close(dir);
    return fail(path + ": " + why);
  }
  // Readable by node_exporter whatever dynid's umask.
  Status content = ::fchmod(fd, 0644) == 0 ? write_all(fd, text) : fail("fchmod: " + errno_text());
  bool written = content.has_value();
  std::string why = written ? "" : content.error().message();
  ::close(fd);
  if (written && ::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0) written = false, why = errno_text();
  if (!written) ::unlinkat(dir, tmp.c_str(), 0);
  ::close(dir);
  return written ? ok() : fail(path + ": " + why);
}

void remove_textfile(const std::string& path) {
  const int dir = open_parent(path);
  if (dir < 0) return;
  ::unlinkat(dir, std::string(paths::file_name(path)).c_str(), 0);
  ::close(dir);
}

std::string prometheus_metrics(const nlohmann::json& status, int64_t now_unix) {
  Exposition e;
  const nlohmann::json daemon = at(status, {"daemon"}), license = at(status, {"license"});
  e.add("dyni_daemon_up", "gauge", "1: dynid answers.", {{"", daemon.is_object() ? 1.0 : 0.0}});
  if (auto cpu = at(daemon, {"cpu_seconds"}); cpu.is_number())
    e.add("dyni_daemon_cpu_seconds_total", "counter", "dynid's CPU time, user and system.", {{"", cpu.get<double>()}});
  if (auto rss = at(daemon, {"rss_bytes"}); rss.is_number())
    e.add("dyni_daemon_resident_bytes", "gauge", "dynid's resident memory.", {{"", rss.get<double>()}});
  if (license.is_object())  // none without a daemon: unknown then, not inactive
    e.add("dyni_license_active", "gauge", "1: this host's license is active.",
          {{"", at(license, {"active"}).is_boolean() && at(license, {"active"}).get<bool>() ? 1.0 : 0.0}});
  if (auto expires = at(license, {"expires_unix"}); expires.is_number())
    e.add("dyni_license_days_left", "gauge", "Days until this host's license expires.",
          {{"", static_cast<double>(expires.get<int64_t>() - now_unix) / 86400}});
  add_targets(e, status.value("targets", nlohmann::json::array()));
  return e.text();
}

}  // namespace dyni
