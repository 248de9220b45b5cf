// The copies' DWARF (dynid/debug_lines.h) in gdb's symbol file
// (dynid/gdb_symbols.h), read back with LLVM's DWARF reader as
// dynid/source_lines.h reads a module's: each address's file and line.
#include "dynid/debug_lines.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "dynid/gdb_symbols.h"
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

std::string where(const SourceLines& lines, uint64_t addr) {
  auto at = lines.at(addr);
  return at ? at->file + ":" + std::to_string(at->line) : "?";
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
  auto lines = SourceLines::open(file.path(), "");
  ASSERT_TRUE(lines) << lines.error().message();
  EXPECT_EQ(where(*lines, a), "/src/a.cpp:10");
  EXPECT_EQ(where(*lines, a + 0xf), "/src/a.cpp:10");
  EXPECT_EQ(where(*lines, a + 0x10), "/src/a.cpp:12");
  EXPECT_EQ(where(*lines, a + 0x1f), "/src/a.cpp:12");
  EXPECT_EQ(where(*lines, a + 0x20), "/src/b.h:3");
  EXPECT_EQ(where(*lines, a + 0x3f), "/src/a.cpp:7");
  EXPECT_EQ(where(*lines, b + 0x8), "/src/b.h:900");
  EXPECT_EQ(where(*lines, b + 0x28), "?") << "a copy without lines";
  EXPECT_EQ(where(*lines, a + 0x80), "?") << "between copies";
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
