// The frame of a live scenario test (scenario.h).
#include "tests/live/scenario.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace dyni::test {

using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string quoted(const std::string& s) {
  std::string q(1, '\'');
  q.append(s).push_back('\'');
  return q;
}

}  // namespace

std::string scenario_options(int min_samples) {
  return std::string(kFastOptions) + "profile_min_samples = " + std::to_string(min_samples) +
         "\nprofile_max_seconds = 10\n";
}

Scenario::Scenario(std::string program, std::string name) : program_(std::move(program)), name_(std::move(name)) {}

pid_t Scenario::spawn(const std::string& exe, const std::vector<std::string>& args, int rounds,
                      const std::string& out) {
  std::string command = "exec " + quoted(exe) + " " + std::to_string(rounds);
  for (const auto& a : args) command.append(" ").append(quoted(a));
  command.append(" > ").append(quoted(out)).append(" 2>&1");
  return host.spawn({"/bin/sh", "-c", command});
}

std::string Scenario::reference(const std::vector<std::string>& args, int rounds) {
  std::string out = host.dir() + "/reference.out";
  pid_t pid = spawn(host.install_program(program_, "plain-" + name_), args, rounds, out);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::vector<std::string> lines = lines_of(out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || lines.size() != static_cast<std::size_t>(rounds) ||
      lines.front() != lines.back()) {
    ADD_FAILURE() << "the reference run failed (status " << status << "): " << testing::PrintToString(lines);
    return "";
  }
  return lines.front();
}

pid_t Scenario::start(const std::vector<std::string>& args, const std::string& options) {
  host.write_config({name_}, options);
  host.license_this_host();
  RunResult r = host.dyni({"-start"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  pid_ = spawn(host.install_program(program_, name_), args, 0, output_path());
  return pid_;
}

pid_t Scenario::respawn(const std::vector<std::string>& args) {
  pid_ = spawn(host.dir() + "/" + name_, args, 0, output_path());
  return pid_;
}

bool Scenario::wait_for_state(const std::string& state, std::chrono::seconds timeout) {
  return host.wait_for_state(pid_, state, timeout);
}

nlohmann::json Scenario::facts() const {
  for (const auto& t : host.status_json().value("targets", nlohmann::json::array()))
    if (t.value("pid", 0) == pid_) return t;
  return nlohmann::json::object();
}

std::vector<std::string> Scenario::lines() const { return lines_of(output_path()); }

bool Scenario::wait_for_more_lines(std::size_t count, std::chrono::seconds timeout) const {
  std::size_t target = lines().size() + count;
  auto until = std::chrono::steady_clock::now() + timeout;
  while (lines().size() < target) {
    if (std::chrono::steady_clock::now() > until || !DyniHost::alive(pid_)) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

std::string Scenario::check_output(const std::string& expected) const {
  std::vector<std::string> all = lines();
  std::string why;
  if (!DyniHost::alive(pid_)) why = "the target ended";
  for (std::size_t i = 0; why.empty() && i + 1 < all.size(); ++i)
    if (all[i] != expected) why = "line " + std::to_string(i) + " is '" + all[i] + "', not '" + expected + "'";
  if (!why.empty() && !all.empty()) why += " (last line: '" + all.back() + "')";
  return why.empty() ? "" : why + "\ndynid's log:\n" + host.log();
}

std::string Scenario::dynimize(const std::vector<std::string>& args, const std::string& options) {
  expected_ = reference(args);
  if (expected_.empty()) return "no reference";
  start(args, options);
  if (!wait_for_state("dynimized")) return "not dynimized: " + host.state_of(pid_) + "\n" + host.log();
  if (!wait_for_more_lines(5)) return "too few rounds once dynimized: " + check_output(expected_);
  return "";
}

std::string Scenario::undo_redo(int rounds) {
  for (int i = 0; i < rounds; ++i)
    for (const char* flag : {"-undo", "-redo"}) {
      RunResult r = host.dyni({flag});
      if (r.exit_code != 0) return std::string(flag) + " failed: " + r.out + r.err;
      if (!wait_for_more_lines(2)) return std::string("after ") + flag + ": " + check_output(expected_);
    }
  return check_output(expected_);
}

nlohmann::json Scenario::counting_facts(const char* name) const {
  nlohmann::json c = facts().value("counting", nlohmann::json::object());
  std::printf("%s, counting: %s\n", name, c.dump().c_str());
  return c;
}

nlohmann::json Scenario::dynimized_facts(const char* name) const {
  nlohmann::json d = facts().value("dynimized", nlohmann::json::object());
  std::printf("%s: %s\n", name, d.dump().c_str());
  return d;
}

}  // namespace dyni::test
