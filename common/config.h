// /etc/dyni.conf: which executables to optimize and how dynid behaves.
// Parsed with inih; anything unknown or malformed is an error naming file,
// line and reason, because a silently ignored typo in a root daemon's config
// is worse than a refusal to start.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace dyni {

struct Config {
  std::string path;  // the file it was read from, for messages

  // [exeList]: executable basenames ("mariadbd") or absolute paths.
  std::vector<std::string> exe_list;

  // [options]
  double busy_threshold_percent = 50.0;  // CPU of one core, averaged over the window
  int busy_window_ms = 3000;             // window for the busy test
  int scan_interval_ms = 500;            // how often /proc is rescanned
  int profile_frequency_hz = 500;        // samples per second per CPU
  int profile_max_seconds = 30;          // upper bound on one profiling phase
  int profile_min_samples = 1500;        // before the hot set may be called stable
  std::string log_file = "/var/log/dyni/dynid.log";
  bool log_debug = false;
  bool dynimize = true;  // false: profile and plan only, never write to a target
  // Count before laying out (issue 19): counting copies of the hot set run
  // until their counts are stable, at most this long; false: lay out from
  // the profile alone (original block order without LBR).
  bool counting = true;
  int counting_min_seconds = 1;  // before the counts may be called stable (the ceiling wins)
  int counting_max_seconds = 5;
  // The share of the counting phase the counting copies run; the rest, in
  // pauses between bursts, the original code (issue 19: cost while counting).
  int counting_duty_percent = 33;
  // Copy functions that hold a USDT probe site (issue 23): a tracer's
  // probe there then fires only where the original code runs.
  bool copy_usdt_functions = false;
  // Only entry patches that a uprobe or breakpoint at any of the function's
  // instructions leaves whole (jit/patch_plan.h, jit/entry_pads.h); false:
  // also those after a kept first instruction, which a uprobe at the second
  // instruction (uprobe:FUNC+N) breaks. True by default since session 30:
  // with pads, the functions it leaves unpatched cost mariadbd 0 to 3 % of
  // TPS (docs/levers.md), and no uprobe can break an entry that this dynid
  // patched (a cache an older dynid made, adopted, keeps its own spots).
  bool probe_safe_entries = true;
  // Entries with no spot for the 5-byte jmp whole enter through a 2-byte
  // jump to 5 bytes of padding between functions (jit/entry_pads.h), also
  // left whole by a uprobe at any instruction; false: for measurements.
  bool entry_pads = true;
  // Every module that holds at least min_module_percent of the samples and
  // can be copied (issue 22: the executable and libc, say), each its own
  // cache after the hottest one's; false: the hottest alone.
  bool all_hot_modules = true;
  // The share of the samples (percent) a module must hold to be optimized:
  // the hottest, and with all_hot_modules each other one.
  int min_module_percent = 1;
  // A cache whose code, frames, record and counters take less (KiB) goes on small pages
  // in 64 KiB steps, not a 2 MiB huge page of its own (libc's hot functions,
  // a small program's); 0: every cache on a huge page.
  int small_cache_kib = 256;
  // Hot loop tops in the optimized copies on this boundary (0: none; 16, 32, 64).
  int loop_alignment = 32;
  // dyni's metrics as a node_exporter textfile, rewritten every 15 s when
  // its directory exists (Debian's prometheus-node-exporter reads this one);
  // "" (`metrics_textfile =`): none.
  std::string metrics_textfile = "/var/lib/prometheus/node-exporter/dyni.prom";

  // [license]
  std::string license_public_key;  // PEM file to trust; empty = built-in vendor key
};

// A config larger than this is refused (a config is a few KiB; a path to
// /dev/zero or a huge file must not make dyni -start read forever).
inline constexpr std::size_t kMaxConfigBytes = 1 << 20;

// Parses INI text; `name` is used in messages ("name:line: reason").
Result<Config> parse_config(const std::string& text, const std::string& name);
// Reads and parses a config file; it must be a regular file of at most
// kMaxConfigBytes.
Result<Config> load_config(const std::string& path);

}  // namespace dyni
