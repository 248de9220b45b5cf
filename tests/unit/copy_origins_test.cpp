// dynid/copy_origins.h: the lines dynid writes for dyni -addr2orig read back
// as written, each address finds its copy and original instruction, and a
// line dynid did not write fails the file (or, read leniently, is left out).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "dynid/adopted_copies.h"
#include "dynid/copy_origins.h"
#include "dynid/proc_reader.h"
#include "dynid/process_files.h"

namespace dyni {
namespace {

CopyOrigin example() {
  return {0x7f0000001000, 0x40, 0x555500002000, "optimized", "f(int)\nsecond line",
          {{0, 0x555500002000}, {0x5, 0x555500002004}, {0x10, 0x555500002030}}};
}

// A restarted dynid reads an adopted cache's copies from its maker's
// origins file: those of its tier within the cache, a line written twice
// (appended again) once, without line tables.
TEST(CopyOrigins, AnAdoptedCachesCopiesComeFromItsOriginsFile) {
  CacheRecord record;
  record.cache_addr = 0x7f0000000000;
  record.cache_length = 0x200000;
  const CopyOrigin f{0x7f0000001000, 0x40, 0x401000, "optimized", "f(int)", {{0, 0x401000}, {8, 0x401010}}};
  const CopyOrigin g{0x7f0000001040, 0x20, 0x402000, "optimized", "g", {}};
  const CopyOrigin counting{0x7f0000001080, 0x20, 0x403000, "counting", "h", {}};
  const CopyOrigin elsewhere{0x7f0000400000, 0x20, 0x404000, "optimized", "k", {}};
  const std::string path = ::testing::TempDir() + "/origins-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << origin_line(f) << origin_line(counting) << origin_line(g) << origin_line(f) << origin_line(elsewhere);
  std::vector<CopyRange> copies = copies_from_origins(path, record, "optimized");
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].cache_addr, f.cache_addr);
  EXPECT_EQ(copies[0].size, f.size);
  EXPECT_EQ(copies[0].original_entry, f.original_entry);
  EXPECT_EQ(copies[0].name, "f(int)");
  EXPECT_TRUE(copies[0].lines.empty());
  EXPECT_EQ(copies[1].name, "g");
  EXPECT_EQ(copies_from_origins(path, record, "counting").size(), 1u);
  EXPECT_TRUE(copies_from_origins(path + ".none", record, "optimized").empty());
  std::filesystem::remove(path);
}

TEST(CopyOrigins, ReadBackAndFindTheOriginalInstruction) {
  CopyOrigin c = example();
  CopyOrigin later{0x7f0000002000, 0x10, 0x555500003000, "counting", "g", {{0, 0x555500003000}}};
  std::string text = origin_line(c) + origin_line(later);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << "one line a copy, whatever the name holds";
  auto back = parse_origins(text);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].lines, c.lines);
  EXPECT_EQ((*back)[0].name, "f(int)?second line");
  EXPECT_EQ((*back)[1].tier, "counting");
  auto at = [&](uint64_t addr) { return origin_of(*back, addr); };
  ASSERT_TRUE(at(0x7f0000001000));
  EXPECT_EQ(at(0x7f0000001000)->original, 0x555500002000u);
  EXPECT_EQ(at(0x7f0000001007)->original, 0x555500002004u) << "inside the second instruction's copy";
  EXPECT_EQ(at(0x7f000000103f)->original, 0x555500002030u);
  EXPECT_FALSE(at(0x7f0000001040)) << "past the copy";
  EXPECT_EQ(at(0x7f0000002004)->copy->name, "g");
  EXPECT_EQ(describe_origin(0x7f0000001007, at(0x7f0000001007)),
            "0x7f0000001007: f(int)?second line+0x4 (original 0x555500002004) in dyni's optimized copy at 0x7f0000001000");
  EXPECT_EQ(describe_origin(0x10, at(0x10)), "0x10: in no copy of dyni's");
}

// A copy rebuilt from an adopted process (no instructions recorded) reads
// back as its function and entry, and says the instruction is not known.
TEST(CopyOrigins, ACopyWithoutInstructionsNamesItsFunctionOnly) {
  CopyOrigin c{0x7f0000001000, 0x80, 0x555500001234, "optimized", "hot_work<3>(unsigned long)", {}};
  const std::string line = origin_line(c);
  EXPECT_NE(line.find(" optimized - hot_work<3>"), std::string::npos) << line;
  auto back = parse_origins(line);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_TRUE((*back)[0].lines.empty());
  auto origin = origin_of(*back, 0x7f0000001040);
  ASSERT_TRUE(origin);
  EXPECT_FALSE(origin->exact);
  EXPECT_EQ(origin->original, 0x555500001234u);
  EXPECT_EQ(describe_origin(0x7f0000001040, origin),
            "0x7f0000001040: hot_work<3>(unsigned long) (original 0x555500001234; which instruction is not recorded) "
            "at +0x40 in dyni's optimized copy at 0x7f0000001000");
  EXPECT_FALSE(origin_of(*back, 0x7f0000001080)) << "past the copy";
}

TEST(CopyOrigins, ALineDynidDidNotWriteFailsTheFile) {
  const std::string good = origin_line(example());
  for (const std::string& bad : {std::string("x 40 1 optimized 0:1 f\n"), std::string("1000 0 1 optimized 0:1 f\n"),
                                std::string("1000 40 1 optimized 4:1 f\n"), std::string("1000 40 1 optimized 0:1,0:2 f\n"),
                                std::string("1000 40 1 optimized 0:1,50:2 f\n"), std::string("1000 40 1 optimized\n"),
                                std::string("1000 40 1 optimized 0-1 f\n")}) {
    auto r = parse_origins(good + bad);
    EXPECT_FALSE(r) << bad;
    std::size_t skipped = 0;
    auto lenient = parse_origins(good + bad + good, &skipped);  // as dyni -addr2orig reads
    ASSERT_TRUE(lenient) << bad;
    EXPECT_EQ(lenient->size(), 2u) << bad;
    EXPECT_EQ(skipped, 1u) << bad;
    if (!r) {
      EXPECT_EQ(r.error().message().rfind("line 2: ", 0), 0u) << r.error().message();
    }
  }
}

// Pruning keeps the newest files, and a running process's however old.
TEST(ProcessFiles, PruningNeverRemovesARunningProcesssFile) {
  const std::string dir = std::filesystem::temp_directory_path() / ("dyni-prune-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto self = read_proc_stat("/proc", ::getpid());
  ASSERT_TRUE(self);
  const std::string mine = dir + "/" + process_file_stem(::getpid(), self->start_time) + ".txt";
  std::vector<std::string> dead;
  for (int i = 0; i < 5; ++i) dead.push_back(dir + "/" + process_file_stem(999999 - i, 7) + "-optimized.elf");
  auto when = std::filesystem::file_time_type::clock::now() - std::chrono::hours(10);
  for (const std::string& f : {mine, dead[0], dead[1], dead[2], dead[3], dead[4]}) {
    std::ofstream(f) << "x";
    std::filesystem::last_write_time(f, when += std::chrono::minutes(1));  // mine the oldest
  }
  EXPECT_TRUE(of_a_live_process(std::filesystem::path(mine).filename()));
  EXPECT_FALSE(of_a_live_process(std::filesystem::path(dead[0]).filename()));
  prune_process_files(dir, 3);
  EXPECT_TRUE(std::filesystem::exists(mine)) << "the oldest, but its process runs";
  EXPECT_FALSE(std::filesystem::exists(dead[0]));
  EXPECT_FALSE(std::filesystem::exists(dead[1]));
  EXPECT_FALSE(std::filesystem::exists(dead[2]));
  EXPECT_TRUE(std::filesystem::exists(dead[3]) && std::filesystem::exists(dead[4])) << "the newest stay";
  std::filesystem::remove_all(dir);
}

// A directory is pruned on its first file, then at most once an interval,
// each directory on its own.
TEST(ProcessFiles, PruningIsDueAtMostOnceAnInterval) {
  const std::string a = "/nonexistent/dyni-prune-a-" + std::to_string(::getpid());
  const std::string b = "/nonexistent/dyni-prune-b-" + std::to_string(::getpid());
  EXPECT_TRUE(prune_due(a, std::chrono::seconds(1)));
  EXPECT_FALSE(prune_due(a, std::chrono::seconds(1)));
  EXPECT_TRUE(prune_due(b, std::chrono::seconds(1))) << "another directory";
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(prune_due(a, std::chrono::seconds(1)));
  EXPECT_FALSE(prune_due(a, std::chrono::seconds(1)));
}

}  // namespace
}  // namespace dyni
