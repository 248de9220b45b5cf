// The copies' DWARF (dynid/debug_lines.h) in gdb's symbol file
// (dynid/gdb_symbols.h), read back with LLVM's DWARF reader as
// dynid/source_lines.h reads a module's, in dyni-lines (line_reader.h):
// each address's file and line. A file that crashes LLVM's reader costs the
// lines, not the caller.
#include "dynid/debug_lines.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "dynid/gdb_symbols.h"
#include "dynid/line_reader.h"
#include "dynid/source_lines.h"

namespace dyni {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    char name[] = "/tmp/dyni-debug-lines-XXXXXX";
    int fd = ::mkstemp(name);
    path_ = name;
    if (fd >= 0) {
      (void)!::write(fd, bytes.data(), bytes.size());
      ::close(fd);
    }
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string where(const std::optional<SourceLine>& at) { return at ? at->file + ":" + std::to_string(at->line) : "?"; }

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DebugLines, RowsReadBackAsTheLinesOfEachCopy) {
  const uint64_t a = 0x7f0000001000, b = 0x7f0000001100;
  std::vector<CopyLines> copies = {
      {a, a + 0x40, "f(int) [dyni]", {{a, "/src/a.cpp", 10}, {a + 0x10, "/src/a.cpp", 12}, {a + 0x18, "/src/a.cpp", 12},
                                      {a + 0x20, "/src/b.h", 3}, {a + 0x30, "/src/a.cpp", 7}}},
      {b, b + 0x20, "g() [dyni]", {{b, "/src/b.h", 900}}},
      {b + 0x20, b + 0x30, "h() [dyni]", {}},  // no lines: a subprogram all the same
  };
  DebugSections debug = dwarf_for_copies(copies);
  ASSERT_FALSE(debug.line.empty());
  std::vector<CopyRange> ranges = {{a, 0x40, 0x555500001000, "f(int)", {}}, {b, 0x20, 0x555500002000, "g()", {}}};
  TempFile file(cache_symbol_file(ranges, a, 0x200, 0x7f0000002000, {}, debug));
  auto lines = read_source_lines(file.path(), "",
                                 {a, a + 0xf, a + 0x10, a + 0x1f, a + 0x20, a + 0x3f, b + 0x8, b + 0x28, a + 0x80},
                                 DYNI_LINES_HELPER);
  ASSERT_TRUE(lines) << lines.error().message();
  ASSERT_EQ(lines->size(), 9u);
  EXPECT_EQ(where((*lines)[0]), "/src/a.cpp:10");
  EXPECT_EQ(where((*lines)[1]), "/src/a.cpp:10");
  EXPECT_EQ(where((*lines)[2]), "/src/a.cpp:12");
  EXPECT_EQ(where((*lines)[3]), "/src/a.cpp:12");
  EXPECT_EQ(where((*lines)[4]), "/src/b.h:3");
  EXPECT_EQ(where((*lines)[5]), "/src/a.cpp:7");
  EXPECT_EQ(where((*lines)[6]), "/src/b.h:900");
  EXPECT_EQ(where((*lines)[7]), "?") << "a copy without lines";
  EXPECT_EQ(where((*lines)[8]), "?") << "between copies";
  // The same read in this process agrees.
  auto here = SourceLines::open(file.path(), "");
  ASSERT_TRUE(here) << here.error().message();
  EXPECT_EQ(where(here->at(a + 0x20)), "/src/b.h:3");
}

// Found by tests/fuzz/debug_line_fuzzer: LLVM 16's reader dies of SIGSEGV in
// DWARFUnit::getVariableForAddress on this mutated executable. In the
// helper, that is an error for the copies' lines.
TEST(DebugLines, AFileThatCrashesLlvmsReaderCostsTheLinesNotTheCaller) {
  if (::geteuid() != 0) GTEST_SKIP() << "the debug file must be root's alone; run the tests as root";
  TempFile file(file_bytes(DYNI_SOURCE_DIR "/tests/fuzz/regressions/debug_line-segv-in-DWARFUnit-getVariableForAddress"));
  std::vector<uint64_t> addrs;
  for (uint64_t addr = 0x1000; addr < 0x3000; addr += 0x10) addrs.push_back(addr);
  auto lines = read_source_lines(file.path(), "", addrs, DYNI_LINES_HELPER);
  ASSERT_FALSE(lines) << "LLVM 16 read it after all: this regression input no longer crashes it";
  EXPECT_NE(lines.error().message().find("killed by signal 11"), std::string::npos) << lines.error().message();
  // A helper that is not there is an error too.
  auto missing = read_source_lines(file.path(), "", addrs, "/nonexistent/dyni-lines");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("cannot start the line reader"), std::string::npos) << missing.error().message();
}

TEST(DebugLines, TheHelpersAnswerIsCheckedAsUntrusted) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto parse = [](const std::string& s, std::size_t n) {
    return parse_line_answers({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, n);
  };
  auto good = parse("k" + u32(1) + u32(7) + u32(3) + "a.c", 2);
  ASSERT_TRUE(good) << good.error().message();
  EXPECT_FALSE((*good)[0]);
  EXPECT_EQ(where((*good)[1]), "a.c:7");
  EXPECT_TRUE(parse("k", 5)) << "no lines at all";
  EXPECT_FALSE(parse("", 1));
  EXPECT_FALSE(parse("x", 1));
  EXPECT_FALSE(parse("k" + u32(2) + u32(7) + u32(3) + "a.c", 2)) << "an index past the addresses";
  EXPECT_FALSE(parse("k" + u32(0) + u32(0) + u32(3) + "a.c", 1)) << "line 0";
  EXPECT_FALSE(parse("k" + u32(0) + u32(7) + u32(9) + "a.c", 1)) << "a name longer than the answer";
  EXPECT_FALSE(parse("k" + u32(0) + u32(7) + u32(1) + "a" + u32(0) + u32(7) + u32(1) + "b", 1)) << "twice";
  EXPECT_FALSE(parse("k" + u32(0) + u32(7), 1)) << "cut short";
  auto error = parse("eno .debug_line", 1);
  ASSERT_FALSE(error);
  EXPECT_EQ(error.error().message(), "no .debug_line");
}

TEST(DebugLines, NoRowsNoSections) {
  EXPECT_TRUE(dwarf_for_copies({{0x1000, 0x1010, "f", {}}}).info.empty());
  EXPECT_TRUE(dwarf_for_copies({}).line.empty());
}

// Only files root alone may write are parsed (I9).
TEST(DebugLines, DebugInfoIsReadOnlyFromFilesRootAloneMayWrite) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the files must be root's";
  TempFile file(std::vector<uint8_t>(64, 0));
  EXPECT_TRUE(trusted_debug_file(file.path()));
  ASSERT_EQ(::chmod(file.path().c_str(), 0666), 0);
  EXPECT_FALSE(trusted_debug_file(file.path()));
  ASSERT_EQ(::chmod(file.path().c_str(), 0644), 0);
  ASSERT_EQ(::chown(file.path().c_str(), 65534, 65534), 0);
  EXPECT_FALSE(trusted_debug_file(file.path()));
  EXPECT_FALSE(trusted_debug_file("/tmp"));
  // Root's file in a directory someone else may change: not read.
  char dir[] = "/tmp/dyni-debug-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string inside = std::string(dir) + "/exe";
  { std::ofstream(inside) << "x"; }
  ASSERT_EQ(::chmod(dir, 0755), 0);
  EXPECT_TRUE(trusted_debug_file(inside));
  ASSERT_EQ(::chown(dir, 65534, 65534), 0);
  auto refused = trusted_debug_file(inside);
  EXPECT_FALSE(refused);
  if (!refused) {
    EXPECT_NE(refused.error().message().find("not root's alone on the way"), std::string::npos);
  }
  ::unlink(inside.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace dyni
