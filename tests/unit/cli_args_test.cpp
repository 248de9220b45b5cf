// dyni's flags: accepted combinations and refusals.
#include <gtest/gtest.h>

#include "dyni-cli/cli_args.h"

namespace dyni::cli {
namespace {

Result<Command> parse(std::vector<std::string> args) { return parse_args(args); }

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
