// BusyWindow: CPU percentage over a sliding window of tick readings.
#include <gtest/gtest.h>
#include <unistd.h>

#include "dynid/busy_window.h"

namespace dyni {
namespace {

const uint64_t hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));

TEST(BusyWindow, UnknownUntilTheWindowIsSpanned) {
  BusyWindow w;
  EXPECT_LT(w.percent(1000), 0);
  w.add(0, 0);
  EXPECT_LT(w.percent(1000), 0);
  w.add(500, hz / 2);
  EXPECT_LT(w.percent(1000), 0);
  w.add(1000, hz);
  EXPECT_NEAR(w.percent(1000), 100.0, 0.5);
}

TEST(BusyWindow, MeasuresOnlyTheLastWindow) {
  BusyWindow w;
  w.add(0, 0);
  w.add(1000, 2 * hz);    // two cores busy for the first second
  w.add(2000, 2 * hz);    // idle in the next
  EXPECT_NEAR(w.percent(1000), 0.0, 0.5);
  EXPECT_NEAR(w.percent(2000), 100.0, 0.5);
}

TEST(BusyWindow, ClearForgetsReadings) {
  BusyWindow w;
  w.add(0, 0);
  w.add(1000, hz);
  w.clear();
  EXPECT_LT(w.percent(1000), 0);
}

}  // namespace
}  // namespace dyni
