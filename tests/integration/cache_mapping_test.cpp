// The code cache's memory in a real target (dynid/cache_mapping.h): mapped
// r-x by a remote mmap within reach of the executable, written and read back
// through /proc/PID/mem while the target runs, refused when the range is not
// the cache, unmapped; the target's own checks see nothing change.
#include "dynid/cache_mapping.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "dynid/cache_huge_pages.h"
#include "dynid/proc_reader.h"
#include "dynid/target_memory.h"
#include "profiler/process_maps.h"
#include "tests/integration/stoppable_target.h"

namespace dyni {
namespace {

using test::StoppableTarget;
using namespace std::chrono_literals;

// The lowest and highest address of the target's executable's mappings.
std::pair<uint64_t, uint64_t> executable_range(const std::vector<profiler::Mapping>& maps) {
  char real[PATH_MAX];
  EXPECT_NE(::realpath(DYNI_TEST_STOPPABLE, real), nullptr);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& m : maps)
    if (m.path == real) lo = std::min(lo, m.start), hi = std::max(hi, m.end);
  return {lo, hi};
}

TEST(TargetMemory, RefusesAWriteThatLeavesItsMapping) {
  profiler::Mapping m;
  m.start = 0x10000, m.end = 0x11000;
  std::vector<uint8_t> bytes(16, 0xcc);
  // No process is needed: the bounds are checked before /proc is opened.
  EXPECT_FALSE(write_in_mapping(::getpid(), m, 0x10ff8, bytes));
  EXPECT_FALSE(write_in_mapping(::getpid(), m, 0xfff8, bytes));
  auto refused = write_in_mapping(::getpid(), m, 0x11000, bytes);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("leaves the mapping"), std::string::npos);
}

// One window's reads and writes through one descriptor (this process stands
// in for a held target): reads across a page boundary, a write seen by the
// next read (its page is not kept stale), the same bounds as write_in_mapping.
TEST(TargetMemory, WindowMemoryReadsPagesOnceAndSeesItsOwnWrites) {
  const std::size_t page = 4096;
  auto* area = static_cast<uint8_t*>(::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  ASSERT_EQ(::munmap(area + 2 * page, page), 0);  // the third page is unmapped
  std::iota(area, area + 2 * page, uint8_t{0});
  const uint64_t at = reinterpret_cast<uint64_t>(area);
  profiler::Mapping m;
  m.start = at, m.end = at + 2 * page;

  WindowMemory memory(::getpid());
  auto across = memory.read(at + page - 3, 6);
  ASSERT_TRUE(across) << across.error().message();
  EXPECT_EQ(std::vector<uint8_t>(area + page - 3, area + page + 3), *across);
  std::vector<uint8_t> five = {0xe9, 1, 2, 3, 4};
  ASSERT_TRUE(memory.write_in_mapping(m, at + 100, five));
  EXPECT_EQ(std::vector<uint8_t>(area + 100, area + 105), five);
  auto back = memory.read(at + 100, 5);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, five) << "a page read before the write must not be served stale";
  EXPECT_FALSE(memory.write_in_mapping(m, at + 2 * page - 2, five));  // leaves the mapping
  EXPECT_FALSE(memory.read(at + 2 * page - 2, 4));                    // runs into the unmapped page
  ::munmap(area, 2 * page);
}

using CacheMappingTest = test::PtraceTest;

TEST_F(CacheMappingTest, MapsWritesAndUnmapsACacheInALiveTarget) {
  StoppableTarget target(false);
  ASSERT_EQ(target.read_line(), "ready");
  std::this_thread::sleep_for(100ms);
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps) << maps.error().message();
  auto [lo, hi] = executable_range(*maps);
  ASSERT_LT(lo, hi);
  std::vector<uint8_t> code(300 * 1024);
  std::iota(code.begin(), code.end(), 0);
  auto place = place_cache(*maps, {lo, hi, code.size(), 0});
  ASSERT_TRUE(place) << place.error().message();
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();

  Result<MappedCache> cache = fail("not mapped");
  {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    cache = map_cache(*w, *sites, *place);
  }  // the window ends here: writing needs no stop
  ASSERT_TRUE(cache) << cache.error().message();
  EXPECT_EQ(cache->addr, place->addr);
  auto after = profiler::read_maps(target.pid());
  ASSERT_TRUE(after);
  const profiler::Mapping* m = mapping_at(*after, cache->addr);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->readable && m->executable && !m->writable && m->path.empty());
  EXPECT_EQ(m->end - m->start, place->length);

  ASSERT_TRUE(write_cache(target.pid(), *cache, code));
  auto back = read_target(target.pid(), cache->addr, code.size());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, code);
  auto huge = huge_page_bytes(target.pid(), *cache);
  ASSERT_TRUE(huge) << huge.error().message();
  std::printf("cache %#llx, %llu KiB, MADV_HUGEPAGE %s, huge pages: %llu KiB\n",
              static_cast<unsigned long long>(cache->addr), static_cast<unsigned long long>(cache->length >> 10),
              cache->huge_advised ? "taken" : "refused", static_cast<unsigned long long>(*huge >> 10));

  // A range that is not exactly the cache is refused, and nothing is written.
  MappedCache wrong = *cache;
  wrong.length += kHugePage;
  EXPECT_FALSE(write_cache(target.pid(), wrong, code));

  {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    ASSERT_TRUE(unmap_cache(*w, *sites, *cache));
  }
  auto gone = profiler::read_maps(target.pid());
  ASSERT_TRUE(gone);
  EXPECT_EQ(mapping_at(*gone, cache->addr), nullptr);
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// A private DYNI_RUN_DIR (where the THP journal lives) for a test's life.
class PrivateRunDir {
 public:
  PrivateRunDir() {
    char tmpl[] = "/tmp/dyni-run-XXXXXX";
    dir_ = ::mkdtemp(tmpl) ? tmpl : "";
    ::setenv("DYNI_RUN_DIR", dir_.c_str(), 1);
  }
  ~PrivateRunDir() {
    ::unsetenv("DYNI_RUN_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string journal() const { return dir_ + "/thp-lifted"; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(journal(), ec), end; !ec && it != end; it.increment(ec))
      names.push_back(it->path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string dir_;
};

// Why this host cannot lift a process's PR_SET_THP_DISABLE for one range
// ("" when it can): THP off, or a kernel before 6.18 (asked in a child).
std::string cannot_lift_thp() {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(mode, line);
  if (line.find("[never]") != std::string::npos || line.empty()) return "transparent huge pages are off on this host";
  pid_t child = ::fork();
  if (child == 0) _exit(::prctl(PR_SET_THP_DISABLE, 1, kThpDisableExceptAdvised, 0, 0) == 0 ? 0 : 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "this kernel has no PR_THP_DISABLE_EXCEPT_ADVISED (6.18)";
}

TEST(CacheHugePages, JournalEntriesAreNamedByPidAndStartTime) {
  EXPECT_EQ(lifted_entry_name(1234, 5678), "1234-5678");
  auto back = parse_lifted_entry("1234-5678");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->first, 1234);
  EXPECT_EQ(back->second, 5678u);
  for (const char* foreign : {"", "-", "1234", "1234-", "-5678", "0-5", "12x-5", "12-5x", "12-5-6", "notes.txt", "+1-2"})
    EXPECT_FALSE(parse_lifted_entry(foreign)) << foreign;
}

// Like mariadbd, the target turned THP off for itself: the cache still gets a
// huge page, the flag reads 1 again after, the journal is left empty; a second
// cache mapped without the lift, the control, gets none.
TEST_F(CacheMappingTest, PutsTheCacheOnAHugePageInATargetThatTurnedThpOff) {
  if (std::string why = cannot_lift_thp(); !why.empty()) GTEST_SKIP() << why;
  PrivateRunDir state;
  StoppableTarget target("nothp");
  ASSERT_EQ(target.read_line(), "ready");
  ASSERT_EQ(target.ask("thp"), "thp 1");
  auto maps = profiler::read_maps(target.pid());
  ASSERT_TRUE(maps) << maps.error().message();
  auto [lo, hi] = executable_range(*maps);
  auto sites = find_syscall_sites(target.pid());
  ASSERT_TRUE(sites) << sites.error().message();
  std::vector<uint8_t> code(300 * 1024);
  std::iota(code.begin(), code.end(), 0);
  Result<MappedCache> lifted = fail("not mapped"), control = fail("not mapped");
  {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    auto place = place_cache(*maps, {lo, hi, code.size(), 0});
    ASSERT_TRUE(place) << place.error().message();
    lifted = map_cache(*w, *sites, *place);
    ASSERT_TRUE(lifted) << lifted.error().message();
    lifted->huge_note = fault_in_huge(*w, *sites, *lifted).note;
    auto now = profiler::read_maps(target.pid());
    ASSERT_TRUE(now);
    auto other = place_cache(*now, {lo, hi, code.size(), 0});
    ASSERT_TRUE(other) << other.error().message();
    control = map_cache(*w, *sites, *other);
    ASSERT_TRUE(control) << control.error().message();
  }
  EXPECT_NE(lifted->huge_note.find("lifted"), std::string::npos) << lifted->huge_note;
  EXPECT_EQ(target.ask("thp"), "thp 1") << "the flag is set back";
  EXPECT_TRUE(state.entries().empty()) << "the journal entry stays after the flag was set back";
  for (const MappedCache* cache : {&*lifted, &*control}) {
    ASSERT_TRUE(write_cache(target.pid(), *cache, code));
    auto back = read_target(target.pid(), cache->addr, code.size());
    ASSERT_TRUE(back) << back.error().message();
    EXPECT_EQ(*back, code);
  }
  auto huge = huge_page_bytes(target.pid(), *lifted);
  auto none = huge_page_bytes(target.pid(), *control);
  ASSERT_TRUE(huge && none);
  EXPECT_EQ(*huge, kHugePage) << "the kernel may have had no free 2 MiB page";
  EXPECT_EQ(*none, 0u) << "without the lift the flag keeps THP off: the test shows nothing";
  {
    auto w = WorldStop::stop(target.pid(), 1000ms);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_TRUE(unmap_cache(*w, *sites, *lifted));
    EXPECT_TRUE(unmap_cache(*w, *sites, *control));
  }
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

// A dynid killed between lifting the flag and setting it back leaves the
// flag "except advised" and its journal entry: the next dynid's start puts
// the flag back, and drops the entries of processes that are gone; a file
// that is not an entry is left alone.
TEST_F(CacheMappingTest, TheNextDynidPutsBackAFlagThatAKilledOneLeftLifted) {
  if (std::string why = cannot_lift_thp(); !why.empty()) GTEST_SKIP() << why;
  PrivateRunDir state;
  StoppableTarget target("nothp");
  ASSERT_EQ(target.read_line(), "ready");
  ASSERT_EQ(target.ask("lift"), "thp 3");
  auto stat = read_proc_stat("/proc", target.pid());
  ASSERT_TRUE(stat) << stat.error().message();
  pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ::waitpid(gone, nullptr, 0);
  ASSERT_TRUE(ensure_dir(state.journal(), 0700));
  const std::string mine = lifted_entry_name(target.pid(), stat->start_time);
  const std::string reused = lifted_entry_name(target.pid(), stat->start_time + 1);  // the pid of another process
  for (const std::string& name : {mine, lifted_entry_name(gone, 1), std::string("notes.txt")})
    ASSERT_TRUE(write_file_atomic(state.journal() + "/" + name, "x\n", 0600));
  restore_lifted_thp();
  EXPECT_EQ(target.ask("thp"), "thp 1");
  EXPECT_EQ(state.entries(), std::vector<std::string>{"notes.txt"});
  // An entry whose start time is not the process's names another process: the flag stays.
  ASSERT_EQ(target.ask("lift"), "thp 3");
  ASSERT_TRUE(write_file_atomic(state.journal() + "/" + reused, "x\n", 0600));
  restore_lifted_thp();
  EXPECT_EQ(target.ask("thp"), "thp 3");
  EXPECT_EQ(state.entries(), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(target.ask("ping"), "got ping usr1=0 rt=0");
  EXPECT_EQ(target.finish(), 0);
}

}  // namespace
}  // namespace dyni
