// /proc/PID/maps lines as dynid reads them (profiler/process_maps.h): the
// file's identity is its device and inode, both read.
#include "profiler/process_maps.h"

#include <gtest/gtest.h>

namespace dyni::profiler {
namespace {

TEST(ProcessMaps, ReadsEachFieldTheFilesDeviceAndInodeIncluded) {
  auto maps = parse_maps(
      "55d3a1200000-55d3a1234000 r-xp 00002000 fd:01 10970209                   /usr/sbin/mariadbd\n"
      "7f12002e0000-7f12002e4000 rw-p 001d5000 103:02 2359340   /usr/lib/x86_64-linux-gnu/libc.so.6 (deleted)\n"
      "7f1200300000-7f1200500000 r-xp 00000000 00:00 0 \n"
      "7f1200600000-7f1200700000 rw-s 00000000 00:01 4096                       /dev/zero (deleted)\n");
  ASSERT_TRUE(maps) << maps.error().message();
  ASSERT_EQ(maps->size(), 4u);
  const Mapping& exe = (*maps)[0];
  EXPECT_EQ(exe.start, 0x55d3a1200000u);
  EXPECT_EQ(exe.offset, 0x2000u);
  EXPECT_EQ(exe.dev, uint64_t{0xfd} << 32 | 0x01);
  EXPECT_EQ(exe.inode, 10970209u);
  EXPECT_TRUE(exe.executable && !exe.writable && !exe.shared && exe.file_backed());
  const Mapping& libc = (*maps)[1];
  EXPECT_EQ(libc.dev, uint64_t{0x103} << 32 | 0x02) << "a major past 0xff (NVMe: 259)";
  EXPECT_TRUE(libc.deleted);
  EXPECT_EQ(libc.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ((*maps)[2].dev, 0u);
  EXPECT_FALSE((*maps)[2].file_backed());
  EXPECT_TRUE((*maps)[3].shared);
}

TEST(ProcessMaps, RefusesAMalformedDevice) {
  EXPECT_FALSE(parse_maps("55d3a1200000-55d3a1234000 r-xp 00000000 fd01 10970209 /usr/sbin/mariadbd\n"));
  EXPECT_FALSE(parse_maps("55d3a1200000-55d3a1234000 r-xp 00000000 zz:01 10970209 /usr/sbin/mariadbd\n"));
}

}  // namespace
}  // namespace dyni::profiler
