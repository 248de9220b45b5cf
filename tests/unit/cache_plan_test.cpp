// Which targets dyni leaves alone because their hot code is outside the
// executable (dynid/cache_plan.h): the reason names the module.
#include "dynid/cache_plan.h"

#include <gtest/gtest.h>

namespace dyni {
namespace {

TEST(OutsideExecutable, NamesTheHottestOtherModuleWhenTheExecutableHoldsTooLittle) {
  const std::string exe = "/usr/bin/sqlite3";
  std::string why = outside_executable({{"/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6", 0.97},
                                        {"/usr/lib/x86_64-linux-gnu/libc.so.6", 0.02},
                                        {exe, 0.004}},
                                       exe);
  EXPECT_EQ(why, "97 % of samples in /usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6, which dyni does not optimize "
                 "(it optimizes the executable, which holds 0.40 %)");
}

TEST(OutsideExecutable, SaysNothingWhenTheExecutableHoldsEnough) {
  EXPECT_EQ(outside_executable({{"/usr/lib/libc.so.6", 0.60}, {"/usr/sbin/mariadbd", 0.011}}, "/usr/sbin/mariadbd"), "");
  EXPECT_EQ(outside_executable({{"/usr/sbin/mariadbd", 0.54}}, "/usr/sbin/mariadbd"), "");
}

TEST(OutsideExecutable, AProfileOutsideEveryModuleSaysSo) {
  std::string why = outside_executable({}, "/usr/bin/busy");
  EXPECT_NE(why.find("no module holds more"), std::string::npos) << why;
  EXPECT_NE(outside_executable({{"/usr/bin/busy", 0.005}}, "/usr/bin/busy").find("0.50 %"), std::string::npos);
}

}  // namespace
}  // namespace dyni
