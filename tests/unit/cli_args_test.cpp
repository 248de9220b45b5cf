// dyni's flags: accepted combinations and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "dyni-cli/cli_args.h"

namespace dyni::cli {
namespace {

Result<Command> parse(std::vector<std::string> args) { return parse_args(args); }

// The commands in the first column of README.md's "### Commands" table
// ("`dyni -profile=PID [-json]`"), which dyni(8)'s SYNOPSIS is made from
// (tools/docs/manpage.sh), as argument lists with example values.
std::vector<std::vector<std::string>> readme_commands() {
  std::ifstream readme(DYNI_SOURCE_DIR "/README.md");
  std::vector<std::vector<std::string>> out;
  bool inside = false;
  for (std::string line; std::getline(readme, line);) {
    if (line.starts_with("#")) {
      if (inside) break;
      inside = line == "### Commands";
      continue;
    }
    if (!inside || !line.starts_with("| `")) continue;
    std::string cell = line.substr(2, line.find(" | ", 2) - 2);
    for (std::size_t at = 0; (at = cell.find('`', at)) != std::string::npos;) {
      std::size_t end = cell.find('`', at + 1);
      std::istringstream words(cell.substr(at + 1, end - at - 1));
      std::vector<std::string> args;
      for (std::string w; words >> w;) {
        if (w == "dyni") continue;
        if (w.front() == '[') w = w.substr(1, w.size() - 2);
        for (auto [name, value] : {std::pair{"PID", "4242"}, {"ADDR...", "0x1000"}, {"TOKEN", "abc"}})
          if (std::size_t p = w.find(name); p != std::string::npos) w.replace(p, std::string(name).size(), value);
        args.push_back(w);
      }
      out.push_back(args);
      at = end + 1;
    }
  }
  return out;
}

// The README's table (and so the man page's SYNOPSIS) names every command
// dyni takes, each as dyni parses it, and the usage text names each too.
TEST(CliArgs, TheReadmeAndTheUsageNameEveryCommand) {
  std::set<Action> documented;
  const std::vector<std::vector<std::string>> commands = readme_commands();
  ASSERT_GE(commands.size(), 10u) << "README.md's ### Commands table was not found";
  for (const auto& args : commands) {
    auto c = parse(args);
    ASSERT_TRUE(c) << args.front() << ": " << c.error().message();
    documented.insert(c->action);
    const std::string& first = args.front();  // "-status", or "-profile=" of "-profile=4242"
    const std::string flag = first.substr(0, std::min(first.size(), first.find('=') + 1));
    EXPECT_NE(std::string(kUsage).find("  " + flag), std::string::npos) << flag << " is not in dyni's usage text";
  }
  for (int a = 0; a <= static_cast<int>(Action::Help); ++a)
    EXPECT_TRUE(documented.count(static_cast<Action>(a))) << "README.md's Commands table lacks action " << a;
}

TEST(CliArgs, AcceptsEachCommand) {
  EXPECT_EQ(parse({"-start"})->action, Action::Start);
  EXPECT_EQ(parse({"-stop"})->action, Action::Stop);
  EXPECT_EQ(parse({"-undo"})->action, Action::Undo);
  EXPECT_EQ(parse({"-redo"})->action, Action::Redo);
  EXPECT_EQ(parse({"-reload"})->action, Action::Reload);
  EXPECT_EQ(parse({"-caches"})->action, Action::Caches);
  EXPECT_FALSE(parse({"-caches", "-json"})) << "-json goes with -status or -profile";
  EXPECT_EQ(parse({"-version"})->action, Action::Version);
  EXPECT_EQ(parse({"-help"})->action, Action::Help);
  EXPECT_EQ(parse({"-license=status"})->action, Action::LicenseStatus);
  auto status = parse({"-status", "-json"});
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->json);
  auto lic = parse({"-token=abc", "-license=start"});
  ASSERT_TRUE(lic);
  EXPECT_EQ(lic->action, Action::LicenseStart);
  EXPECT_EQ(lic->token, "abc");
  EXPECT_EQ(parse({"-license=stop", "-token=abc"})->action, Action::LicenseStop);
  auto profile = parse({"-profile=4242", "-json"});
  ASSERT_TRUE(profile);
  EXPECT_EQ(profile->action, Action::Profile);
  EXPECT_EQ(profile->pid, 4242);
  EXPECT_TRUE(profile->json);
}

// -addr2orig=PID takes hex addresses, with or without 0x, at least one.
TEST(CliArgs, Addr2OrigTakesAPidAndHexAddresses) {
  auto c = parse({"-addr2orig=77", "0x7f00dead", "55aa"});
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->action, Action::Addr2Orig);
  EXPECT_EQ(c->pid, 77);
  EXPECT_EQ(c->addresses, (std::vector<uint64_t>{0x7f00dead, 0x55aa}));
  EXPECT_FALSE(parse({"-addr2orig=77"})) << "no address";
  EXPECT_FALSE(parse({"-addr2orig=x", "0x1"}));
  EXPECT_FALSE(parse({"-addr2orig=4294967297", "0x1"})) << "beyond any pid (it would wrap to pid 1)";
  EXPECT_FALSE(parse({"-profile=4294967297"}));
  EXPECT_FALSE(parse({"-addr2orig=77", "0xzz"}));
  EXPECT_FALSE(parse({"-addr2orig=77", "0x1ffffffffffffffff"})) << "more than 64 bits";
  EXPECT_FALSE(parse({"0x1"})) << "an address alone";
  EXPECT_FALSE(parse({"-status", "0x1"})) << "an address goes with -addr2orig only";
}

TEST(CliArgs, RefusesMalformedOrUnknownFlags) {
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {}, {"start"}, {"--start"}, {"-bogus"}, {"-start", "-stop"}, {"-json"},
           {"-start", "-json"}, {"-license=start"}, {"-license=start", "-token="},
           {"-license=pause", "-token=x"}, {"-status", "-token=x"},
           {"-license=stop", "-token=a", "-token=b"}, {"-profile="}, {"-profile=abc"},
           {"-profile=-5"}, {"-profile=12x"}, {"-profile=1", "-status"}}) {
    EXPECT_FALSE(parse(bad)) << ::testing::PrintToString(bad);
  }
}

}  // namespace
}  // namespace dyni::cli
