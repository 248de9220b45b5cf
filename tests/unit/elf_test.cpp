// elf/: reading real binaries, and surviving malformed ones (I9).
#include <gtest/gtest.h>

#include <elf.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "elf/byte_reader.h"
#include "elf/eh_frame.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "elf/usdt.h"

namespace dyni::elf {
namespace {

extern "C" __attribute__((noinline)) int dyni_elf_test_marker(int x) { return x * 3 + 1; }

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(ElfFile, ReadsThisTestBinary) {
  auto f = ElfFile::open("/proc/self/exe");
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_TRUE(f->find_section(".text"));
  EXPECT_TRUE(f->find_section(".eh_frame"));
  auto text = f->find_section(".text");
  auto bytes = f->contents(*text);
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->size(), text->size);
}

TEST(FunctionTable, FindsAKnownFunctionByAddress) {
  auto f = ElfFile::open("/proc/self/exe");
  ASSERT_TRUE(f);
  auto table = FunctionTable::build(*f);
  ASSERT_TRUE(table) << table.error().message();
  const Function* marker = nullptr;
  for (const auto& fn : table->functions())
    if (fn.name == "dyni_elf_test_marker") marker = &fn;
  ASSERT_NE(marker, nullptr);
  EXPECT_TRUE(marker->has_fde);
  EXPECT_EQ(table->find(marker->addr), marker);
  EXPECT_EQ(table->find(marker->addr + marker->size - 1), marker);
  EXPECT_EQ(table->find(marker->addr + marker->size), table->find(marker->addr + marker->size))
      << "lookups are stable";
  EXPECT_NE(table->find(marker->addr + marker->size), marker);
  EXPECT_EQ(dyni_elf_test_marker(2), 7);
}

TEST(FunctionTable, DemanglesForPeople) {
  EXPECT_EQ(demangle("_ZN3foo3barEi"), "foo::bar(int)");
  EXPECT_EQ(demangle("_ZNK4dyni3elf13FunctionTable4findEm"),
            "dyni::elf::FunctionTable::find(unsigned long) const");
  EXPECT_EQ(demangle("main"), "main");
  EXPECT_EQ(demangle("_Zgarbage"), "_Zgarbage");
  EXPECT_EQ(display_name(Function{0x1234, 8, "", true, 0}), "func_1234");
}

TEST(FunctionTable, StrippedLibcStillHasFdeBoundedFunctions) {
  const char* libc = "/lib/x86_64-linux-gnu/libc.so.6";
  auto f = ElfFile::open(libc);
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_EQ(f->find_section(".symtab"), nullptr) << "Debian's libc is stripped";
  auto table = FunctionTable::build(*f);
  ASSERT_TRUE(table) << table.error().message();
  std::size_t named = 0, unnamed = 0;
  for (const auto& fn : table->functions()) (fn.name.empty() ? unnamed : named)++;
  EXPECT_GT(named, 1000u);
  EXPECT_GT(unnamed, 100u) << "local functions are known from FDEs alone";
}

TEST(FunctionTable, NamesAliasesLikePerfAndReadsDetachedDebugSymbols) {
  auto libc = ElfFile::open("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(libc);
  auto plain = FunctionTable::build(*libc);
  ASSERT_TRUE(plain);
  std::map<std::string, const Function*> by_name;
  for (const auto& fn : plain->functions()) by_name[fn.name] = &fn;
  // send is a weak alias of the global __send: perf shows __send, and so do we.
  EXPECT_TRUE(by_name.count("__send"));
  EXPECT_FALSE(by_name.count("send"));
  std::string id = libc->build_id();
  ASSERT_EQ(id.size(), 40u) << "Debian's libc has a 20-byte build-id";
  std::string debug_path = debug_file_path(id);
  if (access(debug_path.c_str(), R_OK) != 0) GTEST_SKIP() << debug_path << " missing (apt-get install libc6-dbg)";
  auto debug = ElfFile::open_symbols(debug_path);
  ASSERT_TRUE(debug) << debug.error().message();
  EXPECT_LT(debug->bytes().size(), 8u << 20) << "only symbol tables are read";
  auto rich = FunctionTable::build(*libc, &*debug);
  ASSERT_TRUE(rich);
  std::size_t unnamed_plain = 0, unnamed_rich = 0;
  for (const auto& fn : plain->functions()) unnamed_plain += fn.name.empty();
  for (const auto& fn : rich->functions()) unnamed_rich += fn.name.empty();
  EXPECT_LT(unnamed_rich, unnamed_plain / 4) << "debug symbols name local functions";
  bool found = false;
  for (const auto& fn : rich->functions()) found |= fn.name == "__memmove_avx512_unaligned_erms";
  EXPECT_TRUE(found);
}

// Stock Debian mariadbd (MEASUREMENTS.md): stripped, ~21.4k .dynsym functions,
// ~35.5k FDEs. run_all.sh installs mariadb-server, so this runs in CI.
TEST(FunctionTable, StockMariadbd) {
  const char* path = "/usr/sbin/mariadbd";
  if (access(path, R_OK) != 0) GTEST_SKIP() << path << " not installed (apt-get install mariadb-server)";
  auto f = ElfFile::open(path);
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_TRUE(f->is_pie());
  auto table = FunctionTable::build(*f);
  ASSERT_TRUE(table) << table.error().message();
  std::size_t named = 0, with_fde = 0;
  for (const auto& fn : table->functions()) {
    named += !fn.name.empty();
    with_fde += fn.has_fde;
  }
  EXPECT_GT(named, 18000u);  // distinct addresses: aliases (C1/C2 ctors, ...) share one
  EXPECT_GT(with_fde, 35000u);
}

TEST(ElfFile, RefusesNonElfAndForeignElf) {
  EXPECT_EQ(ElfFile::from_bytes({}).error().message(), "truncated ELF: ELF header");
  EXPECT_EQ(ElfFile::from_bytes(std::vector<uint8_t>(64, 'A')).error().message(), "not an ELF file");
  auto bytes = file_bytes("/proc/self/exe");
  bytes[EI_CLASS] = ELFCLASS32;
  EXPECT_EQ(ElfFile::from_bytes(bytes).error().message(), "not a 64-bit ELF file");
  bytes = file_bytes("/proc/self/exe");
  bytes[18] = 0xb7;  // e_machine = EM_AARCH64
  bytes[19] = 0;
  EXPECT_EQ(ElfFile::from_bytes(bytes).error().message(), "not an x86-64 ELF file");
  EXPECT_FALSE(ElfFile::open("/nonexistent"));
  EXPECT_FALSE(ElfFile::open("/proc/self"));  // a directory
}

TEST(ElfFile, SectionTablePastTheEndIsRefused) {
  auto bytes = file_bytes("/proc/self/exe");
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  eh.e_shoff = bytes.size() - 10;
  std::memcpy(bytes.data(), &eh, sizeof eh);
  EXPECT_EQ(ElfFile::from_bytes(bytes).error().message(), "bad section header table");
}

// Deterministic mutation fuzzing of a real binary's headers and .eh_frame:
// every variant must parse or fail cleanly (run under ASan for the full effect).
TEST(ElfFile, SurvivesMutatedBinaries) {
  // A small stock binary (this test binary is tens of MB: 300 copies are slow).
  auto original = file_bytes("/usr/bin/ls");
  auto clean = ElfFile::from_bytes(original);
  ASSERT_TRUE(clean);
  const Section* eh = clean->find_section(".eh_frame");
  ASSERT_NE(eh, nullptr);
  std::mt19937_64 rng(42);
  int parsed = 0, refused = 0;
  for (int round = 0; round < 300; ++round) {
    auto bytes = original;
    for (int k = 0; k < 8; ++k) {
      bool in_header = rng() % 2;
      std::size_t at = in_header ? rng() % 64
                                 : eh->offset + rng() % std::max<uint64_t>(eh->size, 1);
      bytes[at] = static_cast<uint8_t>(rng());
    }
    auto f = ElfFile::from_bytes(std::move(bytes));
    if (!f) {
      ++refused;
      continue;
    }
    auto table = FunctionTable::build(*f);
    (table ? parsed : refused)++;
    if (table) {
      for (const auto& fn : table->functions()) ASSERT_LE(fn.addr, fn.addr + fn.size);
    }
  }
  EXPECT_EQ(parsed + refused, 300);
  EXPECT_GT(refused, 0);
}

TEST(EhFrame, ParsesHandWrittenRecordsAndRejectsBrokenOnes) {
  // CIE: version 1, "zR", code align 1, data align -8, RA 16, aug len 1, enc pcrel|sdata4.
  std::vector<uint8_t> cie = {0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b,
                              0x0c, 7, 8, 0x90, 1, 0, 0};
  // FDE: CIE pointer, pc_begin (pcrel) = +0x100 from its field, range 0x20, aug len 0.
  std::vector<uint8_t> fde = {0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0x00, 0x01, 0, 0, 0x20, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> section = cie;
  section.insert(section.end(), fde.begin(), fde.end());
  section.insert(section.end(), {0, 0, 0, 0});
  auto fdes = parse_eh_frame(section, 0x1000);
  ASSERT_TRUE(fdes) << fdes.error().message();
  ASSERT_EQ(fdes->size(), 1u);
  // pc_begin field sits at 0x1000 + 24 + 8.
  EXPECT_EQ((*fdes)[0].begin, 0x1000u + 32 + 0x100);
  EXPECT_EQ((*fdes)[0].end, (*fdes)[0].begin + 0x20);
  auto broken = section;
  broken[24 + 4] = 0xff;  // CIE pointer to nowhere
  EXPECT_FALSE(parse_eh_frame(broken, 0x1000));
  auto overlong = section;
  overlong[0] = 0xf0;  // record length past the section
  EXPECT_FALSE(parse_eh_frame(overlong, 0x1000));
}

// Regression inputs found by tests/fuzz/elf_fuzzer.
TEST(EhFrame, FuzzerFindings) {
  // A record whose length (1) cannot even hold its id: read past the record.
  std::vector<uint8_t> tiny = {0x01, 0, 0, 0, 0, 0, 0, 0};
  auto r = parse_eh_frame(tiny, 0x400000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), ".eh_frame: record too short for its id");
}

// USDT probes (usdt.h) of a stock Debian binary that has some: python3.11's
// 8 probes, each inside one of its functions; the note section mutated or
// cut short, every variant parses or fails cleanly.
TEST(Usdt, ReadsPythonsProbesAndSurvivesMutatedNotes) {
  const std::string python = "/usr/bin/python3.11";
  if (access(python.c_str(), R_OK) != 0) GTEST_SKIP() << python << " is not installed (package python3.11)";
  auto original = file_bytes(python);
  auto file = ElfFile::from_bytes(original);
  ASSERT_TRUE(file) << file.error().message();
  auto probes = usdt_probes(*file);
  ASSERT_TRUE(probes) << probes.error().message();
  ASSERT_EQ(probes->size(), 8u);
  auto table = FunctionTable::build(*file);
  ASSERT_TRUE(table);
  std::set<std::string> names;
  for (const UsdtProbe& p : *probes) {
    EXPECT_EQ(p.provider, "python");
    names.insert(p.name);
    const Function* f = table->find(p.pc);
    ASSERT_NE(f, nullptr) << p.name << " at " << p.pc << " in no function";
  }
  EXPECT_TRUE(names.count("function__entry")) << "CPython's documented probe";
  EXPECT_TRUE(usdt_probes(*ElfFile::from_bytes(file_bytes("/usr/bin/ls"))).value().empty()) << "no notes: no probes";

  const Section* notes = file->find_section(".note.stapsdt");
  ASSERT_NE(notes, nullptr);
  std::mt19937_64 rng(7);
  int read = 0, refused = 0;
  for (int round = 0; round < 200; ++round) {
    auto bytes = original;
    for (int k = 0; k < 4; ++k) bytes[notes->offset + rng() % notes->size] = static_cast<uint8_t>(rng());
    auto mutated = ElfFile::from_bytes(std::move(bytes));
    ASSERT_TRUE(mutated);  // the headers are untouched
    (usdt_probes(*mutated) ? read : refused)++;
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(read + refused, 200);
  auto cut = original;  // the first note's desc size past the section's end
  const uint32_t huge = static_cast<uint32_t>(notes->size);
  std::memcpy(cut.data() + notes->offset + 4, &huge, 4);
  auto refused_file = ElfFile::from_bytes(std::move(cut));
  ASSERT_TRUE(refused_file);
  auto r = usdt_probes(*refused_file);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("runs past the section"), std::string::npos) << r.error().message();
}

TEST(ByteReader, Leb128EdgeCases) {
  // sleb128 of INT64_MIN: sign extension at shift 63 must not overflow.
  std::vector<uint8_t> min = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f};
  ByteReader r(min);
  auto v = r.sleb128();
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, std::numeric_limits<int64_t>::min());
  std::vector<uint8_t> minus_one = {0x7f};
  EXPECT_EQ(ByteReader(minus_one).sleb128(), -1);
  std::vector<uint8_t> endless(12, 0x80);
  EXPECT_FALSE(ByteReader(endless).uleb128());
  // A start position past the end is clamped, not trusted.
  std::vector<uint8_t> four = {1, 2, 3, 4};
  ByteReader past(four, 100);
  EXPECT_FALSE(past.read<uint8_t>());
  EXPECT_FALSE(past.cstring());
  std::vector<uint8_t> empty;
  EXPECT_FALSE(ByteReader(empty).cstring());
}

// An adopted child's check reads the build-id alone: the notes and the
// section names, not the code (ElfFile::open_notes).
TEST(ElfNotes, TheBuildIdFromANotesOnlyImage) {
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  auto whole = ElfFile::open(libc);
  auto notes = ElfFile::open_notes(libc);
  ASSERT_TRUE(whole) << whole.error().message();
  ASSERT_TRUE(notes) << notes.error().message();
  ASSERT_FALSE(whole->build_id().empty());
  EXPECT_EQ(notes->build_id(), whole->build_id());
  EXPECT_LT(notes->bytes().size(), 64u << 10) << "only headers, notes and section names";
  EXPECT_GT(whole->bytes().size(), 1u << 20);
  // The program headers as the whole file has them: a mapping's bias (an
  // adopted library's cache, dynid/cache_scan.h) is read from them.
  ASSERT_EQ(notes->segments().size(), whole->segments().size());
  ASSERT_FALSE(whole->segments().empty());
  for (std::size_t i = 0; i < whole->segments().size(); ++i) {
    EXPECT_EQ(notes->segments()[i].type, whole->segments()[i].type) << i;
    EXPECT_EQ(notes->segments()[i].vaddr, whole->segments()[i].vaddr) << i;
    EXPECT_EQ(notes->segments()[i].offset, whole->segments()[i].offset) << i;
    EXPECT_EQ(notes->segments()[i].flags, whole->segments()[i].flags) << i;
  }
}

}  // namespace
}  // namespace dyni::elf
