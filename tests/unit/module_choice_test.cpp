// Which module of a target dyni optimizes (dynid/cache_plan.h
// choose_module): the hottest it can, and otherwise why not, by module.
#include "dynid/module_choice.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>

namespace dyni {
namespace {

const std::string kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
const std::string kSqlite = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6";

// libc stays as it is; every other module can be optimized.
std::string libc_stays(const std::string& path) { return path == kLibc ? "libc.so.6 stays as it is" : ""; }

TEST(ChooseModule, TheHottestLibraryWhenTheExecutableHoldsLess) {
  const std::string exe = "/usr/bin/sqlite3";
  ModuleChoice c = choose_module({{kSqlite, 0.90}, {kLibc, 0.06}, {exe, 0.04}}, exe, libc_stays);
  EXPECT_EQ(c.path, kSqlite);
  EXPECT_FALSE(c.executable);
  EXPECT_TRUE(c.passed_over.empty());
}

TEST(ChooseModule, TheExecutableWhenItIsTheHottest) {
  const std::string exe = "/usr/sbin/mariadbd";
  ModuleChoice c = choose_module({{exe, 0.85}, {kLibc, 0.10}}, exe, libc_stays);
  EXPECT_EQ(c.path, exe);
  EXPECT_TRUE(c.executable);
}

TEST(ChooseModule, PassesOverAHotterModuleThatStaysAndSaysSo) {
  const std::string exe = "/usr/bin/busy";
  ModuleChoice c = choose_module({{kLibc, 0.60}, {exe, 0.011}}, exe, libc_stays);
  EXPECT_EQ(c.path, exe);
  ASSERT_EQ(c.passed_over.size(), 1u);
  EXPECT_EQ(c.passed_over[0], kLibc + " (60 %): libc.so.6 stays as it is");
}

TEST(ChooseModule, NoneWhenEveryHotModuleStaysNamingTheHottestAndWhy) {
  const std::string exe = "/usr/bin/sqlite3";
  auto nothing_goes = [](const std::string& path) { return "it has no build-id (" + path + ")"; };
  ModuleChoice c = choose_module({{kSqlite, 0.97}, {kLibc, 0.02}, {exe, 0.004}}, exe, nothing_goes);
  EXPECT_EQ(c.path, "");
  EXPECT_EQ(c.why_none, "97 % of samples in " + kSqlite + ", which dyni does not optimize: it has no build-id (" +
                            kSqlite + "); the executable holds 0.40 %");
  EXPECT_EQ(c.passed_over.size(), 2u);
}

TEST(ChooseModule, AModuleUnderTheMinimumShareIsNeverChosenNorAsked) {
  const std::string exe = "/usr/bin/busy";
  std::set<std::string> asked;
  auto ask = [&](const std::string& path) {
    asked.insert(path);
    return std::string();
  };
  ModuleChoice c = choose_module({{kOutsideModules, 0.99}, {exe, 0.005}}, exe, ask);
  EXPECT_EQ(c.path, "");
  EXPECT_TRUE(asked.empty()) << "a module under the minimum share, and code outside every module, are never asked";
  EXPECT_NE(c.why_none.find("which dyni does not optimize: dyni optimizes code from files"), std::string::npos)
      << c.why_none;
  EXPECT_NE(c.why_none.find("the executable holds 0.50 %"), std::string::npos) << c.why_none;
}

// all_hot_modules: every other module that can be optimized and holds the
// minimum share, hottest first; without it the colder ones are not asked.
TEST(ChooseModule, AllHotModulesAlsoNamesEveryOtherThatCanGoHottestFirst) {
  const std::string exe = "/usr/sbin/mariadbd", libm = "/usr/lib/x86_64-linux-gnu/libm.so.6";
  const std::string plugin = "/usr/lib/mysql/plugin/ha_x.so", ld = "/usr/lib64/ld-linux-x86-64.so.2";
  std::set<std::string> asked;
  auto ld_stays = [&](const std::string& path) {
    asked.insert(path);
    return path == ld ? std::string("ld.so stays") : std::string();
  };
  const std::vector<std::pair<std::string, double>> shares = {
      {exe, 0.70}, {kLibc, 0.15}, {ld, 0.08}, {libm, 0.05}, {plugin, 0.005}};
  ModuleChoice all = choose_module(shares, exe, ld_stays, true);
  EXPECT_EQ(all.path, exe);
  EXPECT_EQ(all.also, (std::vector<std::string>{kLibc, libm}));
  ASSERT_EQ(all.passed_over.size(), 1u);
  EXPECT_EQ(all.passed_over[0], ld + " (8 %): ld.so stays");
  EXPECT_FALSE(asked.count(plugin)) << "under the minimum share: never asked";

  asked.clear();
  ModuleChoice hottest = choose_module(shares, exe, ld_stays);
  EXPECT_EQ(hottest.path, exe);
  EXPECT_TRUE(hottest.also.empty());
  EXPECT_EQ(asked, (std::set<std::string>{exe})) << "without all_hot_modules the colder modules are not read";

  // The minimum share ([options] min_module_percent): at 6 % libm (5 %) is
  // too cold; at 0.5 % the plugin is hot enough; at 80 % nothing is.
  ModuleChoice six = choose_module(shares, exe, ld_stays, true, 0.06);
  EXPECT_EQ(six.also, (std::vector<std::string>{kLibc}));
  asked.clear();
  ModuleChoice half = choose_module(shares, exe, ld_stays, true, 0.005);
  EXPECT_EQ(half.also, (std::vector<std::string>{kLibc, libm, plugin}));
  EXPECT_TRUE(asked.count(plugin));
  ModuleChoice none = choose_module({{exe, 0.70}}, exe, ld_stays, true, 0.8);
  EXPECT_EQ(none.path, "");
  EXPECT_EQ(none.why_none, "no module holds 80 % of samples (the executable holds 70.00 %)");
}

TEST(ChooseModule, AnEmptyProfileSaysNoModuleHoldsEnough) {
  ModuleChoice c = choose_module({}, "/usr/bin/busy", libc_stays);
  EXPECT_EQ(c.path, "");
  EXPECT_EQ(c.why_none, "no module holds 1 % of samples (the executable holds 0.00 %)");
}

// The allocator a module defines, read from its function table: libc's
// malloc, and none in this test's own executable.
TEST(AllocatorDefined, LibcDefinesMallocThisTestDoesNot) {
  auto symbols = profiler::Symbolizer::for_process(::getpid());
  ASSERT_TRUE(symbols) << symbols.error().message();
  bool saw_libc = false, saw_self = false;
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  for (const profiler::Module& m : symbols->modules()) {
    if (m.path.find("/libc.so.6") != std::string::npos) {
      saw_libc = true;
      EXPECT_FALSE(allocator_defined(m).empty()) << m.path;
    }
    if (m.path == self) {
      saw_self = true;
      EXPECT_EQ(allocator_defined(m), "") << m.path;
    }
  }
  EXPECT_TRUE(saw_libc);
  EXPECT_TRUE(saw_self);
}

}  // namespace
}  // namespace dyni
