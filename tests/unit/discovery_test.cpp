// Discovery: /proc parsing and matching of [exeList] entries (by path, basename
// or symlink), on real processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "dynid/discovery.h"
#include "dynid/exec_watch.h"
#include "dynid/proc_reader.h"

namespace dyni {
namespace {

// A field of /proc/PID/status is read at a line's start: a thread named
// "TracerPid:1" must not pass for one traced by pid 1.
TEST(ProcStatus, FieldsAreReadAtALinesStartOnly) {
  const std::string status = "Name:\tTracerPid:1\nState:\tR (running)\nTracerPid:\t0\n";
  EXPECT_EQ(status_field(status, "TracerPid:"), "\t0");
  EXPECT_EQ(status_field(status, "Name:"), "\tTracerPid:1");
  EXPECT_EQ(status_field("TracerPid:\t42", "TracerPid:"), "\t42") << "the first line, without a newline";
  EXPECT_EQ(status_field(status, "Uid:"), "");
}

TEST(ProcStat, ParsesCommWithParensAndSpaces) {
  std::string line = "1234 (evil) (x y) R 1 1234 1234 0 -1 4194304 100 0 0 0 "
                     "250 50 0 0 20 0 3 0 98765 1000000 200 18446744073709551615";
  auto st = parse_proc_stat(line);
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->pid, 1234);
  EXPECT_EQ(st->comm, "evil) (x y");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->cpu_ticks, 300u);
  EXPECT_EQ(st->start_time, 98765u);
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->threads, 3u) << "num_threads, field 20";
  EXPECT_EQ(st->image, 0u) << "no startcode and startstack fields";
}

TEST(ProcStat, ReapedChildrensTimeIsCutimePlusCstime) {
  auto st = parse_proc_stat("7 (postgres) S 1 7 7 0 -1 4194304 100 0 0 0 250 50 70 30 20 0 1 0 98765 1000 200");
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->cpu_ticks, 300u);
  EXPECT_EQ(st->children_ticks, 100u);
}

TEST(ProcStat, TheImageMarkerComesFromStartcodeAndStartstack) {
  std::string head = "1234 (x) R 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 98765 1000000 200 "
                     "18446744073709551615 ";
  auto st = parse_proc_stat(head + "4096 8192 65536");
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->image, 4096u ^ (65536u << 1));
  auto exec = parse_proc_stat(head + "4096 8192 131072");  // a new stack: another image
  ASSERT_TRUE(exec);
  EXPECT_NE(exec->image, st->image);
}

TEST(ProcStat, RefusesTruncatedLines) {
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("12 (x"));
  EXPECT_FALSE(parse_proc_stat("12 (x) R 1 2 3"));
  EXPECT_FALSE(parse_proc_stat("abc (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"));
}

TEST(ProcStat, ReadsOwnProcess) {
  auto st = read_proc_stat("/proc", getpid());
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->pid, getpid());
  EXPECT_GT(st->start_time, 0u);
  EXPECT_NE(st->image, 0u);
}

// "entry via" of what `exe` matches, "" when nothing does.
std::string matched(const ExeMatcher& m, const std::string& exe, bool same_mount_ns = true) {
  auto r = match_exe(m, exe, same_mount_ns);
  return r ? r->entry + " via " + r->via : "";
}

TEST(MatchExe, BasenamesAndFullPaths) {
  ExeMatcher m{{"mariadbd", "/opt/app/server"}, {}};
  EXPECT_EQ(matched(m, "/usr/sbin/mariadbd"), "mariadbd via basename");
  EXPECT_EQ(matched(m, "/var/lib/docker/overlay2/x/merged/usr/sbin/mariadbd", false),
            "mariadbd via basename");
  EXPECT_EQ(matched(m, "/opt/app/server"), "/opt/app/server via path");
  EXPECT_EQ(matched(m, "/usr/bin/server"), "");  // path entries match exactly
  EXPECT_EQ(matched(m, "/usr/sbin/mariadbd-safe"), "");
  EXPECT_EQ(matched(m, "/usr/sbin/mariadb"), "");
  EXPECT_EQ(matched({}, "/usr/sbin/mariadbd"), "");
}

TEST(MatchExe, ASymlinkTargetMatchesOnlyInDynidsMountNamespace) {
  ExeMatcher m{{"redis-server"},
               {{"redis-server", "/usr/bin/redis-server", "/usr/bin/redis-check-rdb"}}};
  EXPECT_EQ(matched(m, "/usr/bin/redis-check-rdb"),
            "redis-server via /usr/bin/redis-server -> /usr/bin/redis-check-rdb");
  // In a container that path is another file: the host's link means nothing.
  EXPECT_EQ(matched(m, "/usr/bin/redis-check-rdb", false), "");
  EXPECT_EQ(matched(m, "/usr/bin/redis-server", false), "redis-server via basename");
  EXPECT_EQ(matched(m, "/opt/redis/redis-check-rdb"), "");  // the target's path, not its basename
}

// A binary directory laid out the way Debian's redis-server package does it:
// the listed name is a relative symlink to the file that actually runs.
class BinDirWithSymlink : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::canonical(std::filesystem::temp_directory_path()) /
          ("dyni-bin-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "bin");
    std::ofstream(dir / "bin" / "dyni-check-rdb") << "not run\n";
    std::filesystem::create_symlink("dyni-check-rdb", dir / "bin" / "dyni-server");
    std::filesystem::create_directory_symlink("bin", dir / "bin-link");  // like /bin -> usr/bin
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string bin() const { return (dir / "bin").string(); }
  std::filesystem::path dir;
};

TEST_F(BinDirWithSymlink, ResolvesBareNamesThroughLinksOnce) {
  auto m = resolve_exe_list({"dyni-server", "dyni-check-rdb", "absent"},
                            {(dir / "nowhere").string(), bin(), (dir / "bin-link").string()});
  EXPECT_EQ(m.entries, (std::vector<std::string>{"dyni-server", "dyni-check-rdb", "absent"}));
  ASSERT_EQ(m.symlinks.size(), 1u) << "bin-link/dyni-server leads to the same file";
  EXPECT_EQ(m.symlinks[0].entry, "dyni-server");
  EXPECT_EQ(m.symlinks[0].link, bin() + "/dyni-server");
  EXPECT_EQ(m.symlinks[0].target, bin() + "/dyni-check-rdb");
  EXPECT_TRUE(resolve_exe_list({"dyni-server"}, {}).symlinks.empty());
}

TEST_F(BinDirWithSymlink, ResolvesPathEntriesThroughLinks) {
  auto m = resolve_exe_list({bin() + "/dyni-server"}, {});
  ASSERT_EQ(m.symlinks.size(), 1u);
  EXPECT_EQ(matched(m, bin() + "/dyni-check-rdb"),
            bin() + "/dyni-server via " + bin() + "/dyni-server -> " + bin() + "/dyni-check-rdb");
}

// A copy of the idle test program under a unique name, run as a real process.
class DiscoverRealProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::canonical(std::filesystem::temp_directory_path()) /
          ("dyni-disc-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    exe = dir / name;
    std::filesystem::copy_file(DYNI_TEST_IDLE, exe);
    std::filesystem::create_symlink(name, dir / link_name);
    child = fork();
    if (child == 0) {
      execl(exe.c_str(), exe.c_str(), "20", nullptr);
      _exit(127);
    }
    usleep(100 * 1000);  // let it exec
  }
  void TearDown() override {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    std::filesystem::remove_all(dir);
  }
  const std::string name = "dyni-disc-target-" + std::to_string(getpid());
  const std::string link_name = "dyni-disc-link-" + std::to_string(getpid());
  std::filesystem::path dir, exe;
  pid_t child = -1;
};

ExeMatcher listing(const std::vector<std::string>& entries) { return {entries, {}}; }

TEST_F(DiscoverRealProcess, FindsItByBasenameAndByPath) {
  for (const std::string& entry : {name, exe.string()}) {
    auto found = discover(listing({entry}), "/proc", getpid());
    ASSERT_EQ(found.size(), 1u) << entry;
    EXPECT_EQ(found[0].stat.pid, child);
    EXPECT_EQ(found[0].name, name);
    EXPECT_EQ(found[0].exe.path, exe.string());
    EXPECT_FALSE(found[0].exe.deleted);
    EXPECT_TRUE(found[0].mount_ns.starts_with("mnt:[")) << found[0].mount_ns;
    EXPECT_EQ(found[0].matched_by.entry, entry);
    EXPECT_EQ(found[0].matched_by.via, entry == name ? "basename" : "path");
  }
  EXPECT_TRUE(discover(listing({"no-such-exe-name"}), "/proc", getpid()).empty());
}

TEST_F(DiscoverRealProcess, FindsItByTheNameOfASymlinkToIt) {
  EXPECT_TRUE(discover(listing({link_name}), "/proc", getpid()).empty()) << "unresolved";
  auto found = discover(resolve_exe_list({link_name}, {dir.string()}), "/proc", getpid());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].stat.pid, child);
  EXPECT_EQ(found[0].name, name);
  EXPECT_EQ(found[0].matched_by.entry, link_name);
  EXPECT_EQ(found[0].matched_by.via, (dir / link_name).string() + " -> " + exe.string());
}

TEST_F(DiscoverRealProcess, FindsItAfterItsFileIsDeleted) {
  std::filesystem::remove(exe);
  auto found = discover(listing({name}), "/proc", getpid());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].exe.path, exe.string());
  EXPECT_TRUE(found[0].exe.deleted);
}

TEST_F(DiscoverRealProcess, SkipsSelfAndZombies) {
  EXPECT_TRUE(discover(listing({name}), "/proc", child).empty());  // "self" is never a target
  kill(child, SIGKILL);
  usleep(100 * 1000);  // now a zombie until reaped
  EXPECT_TRUE(discover(listing({name}), "/proc", getpid()).empty());
}

// A forked child held until release(), then exec'ing `path` with `arg`.
struct HeldChild {
  pid_t pid = -1;
  int go = -1;
  bool release() {
    const bool sent = write(go, "x", 1) == 1;
    close(go);
    return sent;
  }
};
HeldChild fork_held(const std::string& path, const char* arg) {
  int go[2];
  if (pipe(go) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    char byte;
    close(go[1]);
    if (read(go[0], &byte, 1) == 1) execl(path.c_str(), path.c_str(), arg, nullptr);
    _exit(127);
  }
  close(go[0]);
  return {pid, go[1]};
}

// A process that runs another program is read again at once: here a child
// that was no target at the first scans execs the listed file. Without the
// kernel's exec event it would keep its first identity for 5-10 s
// (ProcessIdentities::kRefreshMs).
TEST_F(DiscoverRealProcess, AProcessThatExecsAListedFileIsFoundAtTheNextScan) {
  auto watch = ExecWatch::open();
  if (!watch) GTEST_SKIP() << "no process events here (" << watch.error().message() << "): discovery reads every process";
  ProcessIdentities known(std::move(*watch));
  HeldChild held = fork_held(exe.string(), "20");
  ASSERT_GT(held.pid, 0);
  const pid_t late = held.pid;
  auto pids_of = [](const std::vector<DiscoveredProcess>& found) {
    std::set<pid_t> pids;
    for (const auto& p : found) pids.insert(p.stat.pid);
    return pids;
  };
  EXPECT_EQ(pids_of(discover(listing({name}), "/proc", getpid(), &known)), std::set<pid_t>{child});
  const std::size_t first_read = known.read_this_scan();
  EXPECT_EQ(pids_of(discover(listing({name}), "/proc", getpid(), &known)), std::set<pid_t>{child});
  EXPECT_LT(known.read_this_scan() * 4, first_read) << "a second scan reads again only what changed";
  ASSERT_TRUE(held.release());
  // The kernel queues the exec event just after the new executable shows
  // in /proc: a scan that comes between finds it at the next one.
  std::set<pid_t> found;
  for (int scan = 0; scan < 50 && found.size() < 2; ++scan, usleep(10 * 1000))
    found = pids_of(discover(listing({name}), "/proc", getpid(), &known));
  EXPECT_EQ(found, (std::set<pid_t>{child, late})) << "within half a second, not the 5-10 s of a refresh";
  kill(late, SIGKILL);
  waitpid(late, nullptr, 0);
}

// The kernel reports a child's birth, its exec and its end by its pid.
TEST(ExecWatch, ReportsAChildsForkExecAndExit) {
  auto watch = ExecWatch::open();
  if (!watch) GTEST_SKIP() << "no process events here (" << watch.error().message() << ")";
  auto seen = [&](pid_t pid) {
    bool found = false;
    for (int i = 0; i < 100 && !found; ++i) {
      ExecWatch::Changes changes = (*watch)->drain();
      EXPECT_FALSE(changes.all) << "no event lost";
      found = std::find(changes.pids.begin(), changes.pids.end(), pid) != changes.pids.end();
      if (!found) usleep(10 * 1000);
    }
    return found;
  };
  HeldChild held = fork_held("/bin/sleep", "0.2");
  ASSERT_GT(held.pid, 0);
  const pid_t child = held.pid;
  EXPECT_TRUE(seen(child)) << "fork";
  EXPECT_FALSE(seen(getpid())) << "nothing about a process that did nothing";
  ASSERT_TRUE(held.release());
  EXPECT_TRUE(seen(child)) << "exec";
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(seen(child)) << "exit";
}

TEST(Discover, MissingProcRootFindsNothing) {
  EXPECT_TRUE(discover(listing({"init"}), "/nonexistent-proc", getpid()).empty());
}

}  // namespace
}  // namespace dyni
