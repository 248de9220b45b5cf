// The frame of a live scenario test: a scenario target (see rounds.h) runs
// once unlisted for a reference, then forever under a listed name next to a
// real dynid; every line it prints must equal the reference's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/dyni_host.h"

namespace dyni::test {

// Options for scenarios: fast scans, a short profile.
std::string scenario_options(int min_samples = 300);

inline constexpr const char* kNeedsRoot = "dynid must run as root; run the tests as root";

class Scenario {
 public:
  // `program`: the built target; `name`: the listed name its copy runs under.
  Scenario(std::string program, std::string name);

  // Runs an unlisted copy for `rounds` rounds; its one line per round. Fails
  // the test (ADD_FAILURE) when the program fails or its rounds disagree.
  std::string reference(const std::vector<std::string>& args = {}, int rounds = 2);
  // Starts dynid with `options`, then the listed copy running forever.
  pid_t start(const std::vector<std::string>& args = {}, const std::string& options = scenario_options());
  // Starts another listed copy (the last one ended), dynid still running.
  pid_t respawn(const std::vector<std::string>& args = {});
  // Waits for `state` ("dynimized"); false with the state seen on timeout.
  bool wait_for_state(const std::string& state, std::chrono::seconds timeout = std::chrono::seconds(60));
  // The target's -status -json entry ({} when not listed).
  nlohmann::json facts() const;
  // The counting phase's facts (-status -json "counting"), printed.
  nlohmann::json counting_facts(const char* name) const;
  // The lines printed so far.
  std::vector<std::string> lines() const;
  // Waits for `count` lines more than now; false on timeout.
  bool wait_for_more_lines(std::size_t count, std::chrono::seconds timeout = std::chrono::seconds(30)) const;
  // "" when every line printed equals `expected` (the last may be cut short
  // by a kill) and the target still runs; else what went wrong, with the log.
  std::string check_output(const std::string& expected) const;

  // The usual course, each step "" or what went wrong:
  //  - dynimize: the reference run (kept as expected()), then the listed
  //    copy started next to dynid, dynimized, and five more rounds printed;
  //  - undo_redo: `rounds` times -undo then -redo, two rounds printed after
  //    each, every line right.
  std::string dynimize(const std::vector<std::string>& args = {}, const std::string& options = scenario_options());
  std::string undo_redo(int rounds);
  const std::string& expected() const { return expected_; }
  // The target's -status -json "dynimized" object, printed with `name`.
  nlohmann::json dynimized_facts(const char* name) const;

  pid_t pid() const { return pid_; }
  std::string output_path() const { return host.dir() + "/" + name_ + ".out"; }

  DyniHost host;

 private:
  pid_t spawn(const std::string& exe, const std::vector<std::string>& args, int rounds, const std::string& out);

  std::string program_;
  std::string name_;
  std::string expected_;
  pid_t pid_ = 0;
};

}  // namespace dyni::test
