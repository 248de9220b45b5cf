// The CFI interpreter against binutils' own: `readelf -wF` prints the rows of
// every FDE of a binary; each must match ours (CFA rule and every register it
// lists) — over all of libc's FDEs. Plus the interpreter's refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "elf/cfi.h"
#include "elf/elf_file.h"

namespace dyni::elf {
namespace {

const std::map<std::string, uint32_t> kRegs = {
    {"rax", 0}, {"rdx", 1}, {"rcx", 2}, {"rbx", 3}, {"rsi", 4}, {"rdi", 5}, {"rbp", 6}, {"rsp", 7},
    {"r8", 8},  {"r9", 9},  {"r10", 10}, {"r11", 11}, {"r12", 12}, {"r13", 13}, {"r14", 14}, {"r15", 15}, {"ra", 16}};

// readelf's spelling of a register rule.
std::string spell(const RegisterRule& r) {
  using K = RegisterRule::Kind;
  switch (r.kind) {
    case K::Unspecified:
    case K::Undefined: return "u";
    case K::Same: return "s";
    case K::AtCfa: return fmt::format("c{:+d}", r.value);
    case K::ValCfa: return fmt::format("v{:+d}", r.value);
    case K::InRegister: return fmt::format("r{}", r.value);  // readelf adds " (name)"

    case K::Expression: return "exp";
    case K::ValExpression: return "vexp";
  }
  return "?";
}

std::string spell(const CfaRule& c) {
  if (c.expression) return "exp";
  for (const auto& [name, n] : kRegs)
    if (n == c.reg) return fmt::format("{}{:+d}", name, c.offset);
  return "?";
}

TEST(Cfi, AgreesWithReadelfOnEveryFdeOfLibc) {
  const std::string path = "/lib/x86_64-linux-gnu/libc.so.6";
  FILE* p = popen(("readelf -wF " + path + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[65536];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  pclose(p);  // readelf exits 1 over unrelated warnings; its output is what counts
  if (text.empty()) GTEST_SKIP() << "readelf not available (apt-get install binutils)";

  auto file = ElfFile::open(path);
  ASSERT_TRUE(file) << file.error().message();
  const Section* eh = file->find_section(".eh_frame");
  ASSERT_NE(eh, nullptr);
  auto bytes = file->contents(*eh);
  ASSERT_TRUE(bytes);
  auto fdes = parse_eh_frame(*bytes, eh->addr);
  ASSERT_TRUE(fdes) << fdes.error().message();
  std::map<uint64_t, const Fde*> by_begin;
  for (const Fde& f : *fdes) by_begin[f.begin] = &f;

  std::istringstream lines(text);
  std::string line;
  const Fde* fde = nullptr;
  std::vector<CfiRow> rows;
  std::vector<std::string> columns;
  std::size_t fdes_checked = 0, rows_checked = 0;
  while (std::getline(lines, line)) {
    if (line.find(" CIE") != std::string::npos) fde = nullptr;  // a CIE's own rows: not an FDE's
    if (auto at = line.find(" FDE cie="); at != std::string::npos) {
      uint64_t begin = std::stoull(line.substr(line.find("pc=") + 3, 16), nullptr, 16);
      ASSERT_TRUE(by_begin.count(begin)) << line;
      fde = by_begin[begin];
      auto r = cfi_rows(*bytes, *fde);
      ASSERT_TRUE(r) << line << ": " << r.error().message();
      rows = std::move(*r);
      ++fdes_checked;
      continue;
    }
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "LOC") {
      columns.clear();
      for (std::string w; words >> w;) columns.push_back(w);
      continue;
    }
    if (!fde || first.size() != 16) continue;  // not a row of an FDE
    uint64_t loc = std::stoull(first, nullptr, 16);
    auto state = cfi_state_at(rows, fde->end, loc);
    ASSERT_TRUE(state) << line;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      std::string want, name;
      words >> want;
      if (want.size() > 1 && want[0] == 'r' && std::isdigit(static_cast<unsigned char>(want[1]))) words >> name;
      std::string got = columns[c] == "CFA" ? spell(state->cfa) : spell(state->regs[kRegs.at(columns[c])]);
      ASSERT_EQ(got, want) << "column " << columns[c] << " of: " << line;
    }
    ++rows_checked;
  }
  EXPECT_GT(fdes_checked, 3000u);
  EXPECT_GT(rows_checked, 10000u);
}

// An FDE whose program is `bytes`, after an empty CIE program (rsp+8 initial state).
Result<std::vector<CfiRow>> run(std::vector<uint8_t> program) {
  Fde fde;
  fde.begin = 0x1000;
  fde.end = 0x1100;
  fde.program = 0;
  fde.program_size = program.size();
  static std::vector<uint8_t> keep;
  keep = std::move(program);
  return cfi_rows(keep, fde);
}

TEST(Cfi, RunsAndRefusesPrograms) {
  // advance_loc 1; def_cfa_offset 16; offset r16 (ra) at cfa-8 (1 * -8)
  auto ok = run({0x41, 0x0e, 0x10, 0x90, 0x01});
  ASSERT_TRUE(ok) << ok.error().message();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ(ok->at(1).addr, 0x1001u);
  EXPECT_EQ(ok->at(1).state.cfa.offset, 16);
  EXPECT_EQ(ok->at(1).state.regs[16].kind, RegisterRule::Kind::AtCfa);
  EXPECT_EQ(ok->at(1).state.regs[16].value, -8);
  EXPECT_FALSE(run({0x0b}));                    // restore_state with nothing remembered
  EXPECT_FALSE(run({0x04, 0xff, 0xff, 0, 0}));  // advance past the FDE's end
  EXPECT_FALSE(run({0x0e}));                    // truncated operand
  EXPECT_FALSE(run({0x08, 0x40}));              // register 64
  EXPECT_FALSE(run({0x3f}));                    // unknown opcode
  std::vector<uint8_t> deep(100, 0x0a);         // remember_state, 100 deep
  EXPECT_FALSE(run(deep));
}

}  // namespace
}  // namespace dyni::elf
