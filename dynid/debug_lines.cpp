// Writing the copies' DWARF (debug_lines.h).
#include "dynid/debug_lines.h"

#include <algorithm>
#include <map>

namespace dyni {
namespace {

// DWARF 4 constants (DWARF standard, section 7).
constexpr uint8_t kTagCompileUnit = 0x11, kTagSubprogram = 0x2e;
constexpr uint8_t kAtName = 0x03, kAtStmtList = 0x10, kAtLowPc = 0x11, kAtHighPc = 0x12, kAtLanguage = 0x13,
                  kAtProducer = 0x25, kAtExternal = 0x3f;
constexpr uint8_t kFormAddr = 0x01, kFormData2 = 0x05, kFormData8 = 0x07, kFormString = 0x08, kFormSecOffset = 0x17,
                  kFormFlagPresent = 0x19;
// C, not C++: gdb then prints the copies' names (demangled already) as they are.
constexpr uint16_t kLangC99 = 0x000c;
constexpr uint8_t kLnsCopy = 0x01, kLnsAdvancePc = 0x02, kLnsAdvanceLine = 0x03, kLnsSetFile = 0x04;
constexpr uint8_t kLneEndSequence = 0x01, kLneSetAddress = 0x02;
constexpr uint8_t kOpcodeBase = 13;
constexpr uint8_t kStandardOpcodeLengths[kOpcodeBase - 1] = {0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1};

class Bytes {
 public:
  Bytes() { out_.reserve(4096); }
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    out_.insert(out_.end(), b, b + sizeof(T));
  }
  void uleb(uint64_t v) {
    do {
      uint8_t b = v & 0x7f;
      v >>= 7;
      out_.push_back(v ? b | 0x80 : b);
    } while (v);
  }
  void sleb(int64_t v) {
    for (bool more = true; more;) {
      uint8_t b = v & 0x7f;
      v >>= 7;
      more = !((v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40)));
      out_.push_back(more ? b | 0x80 : b);
    }
  }
  void string(const std::string& s) {
    out_.insert(out_.end(), s.begin(), s.end());
    out_.push_back(0);
  }
  // A 32-bit length field, filled in by `close` with the bytes after it.
  std::size_t open_length() {
    const std::size_t after = out_.size() + 4;
    put<uint32_t>(0);
    return after;
  }
  void close_length(std::size_t after) {
    const auto n = static_cast<uint32_t>(out_.size() - after);
    for (std::size_t i = 0; i < 4; ++i) out_[after - 4 + i] = static_cast<uint8_t>(n >> (8 * i));
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

std::vector<uint8_t> abbreviations() {
  Bytes b;
  b.uleb(1), b.uleb(kTagCompileUnit), b.put<uint8_t>(1);  // has children
  for (auto [at, form] : {std::pair{kAtProducer, kFormString}, {kAtLanguage, kFormData2}, {kAtName, kFormString},
                          {kAtStmtList, kFormSecOffset}, {kAtLowPc, kFormAddr}, {kAtHighPc, kFormData8}})
    b.uleb(at), b.uleb(form);
  b.uleb(0), b.uleb(0);
  b.uleb(2), b.uleb(kTagSubprogram), b.put<uint8_t>(0);
  for (auto [at, form] : {std::pair{kAtName, kFormString}, {kAtLowPc, kFormAddr}, {kAtHighPc, kFormData8},
                          {kAtExternal, kFormFlagPresent}})
    b.uleb(at), b.uleb(form);
  b.uleb(0), b.uleb(0);
  b.uleb(0);
  return std::move(b.bytes());
}

std::vector<uint8_t> compile_unit(const std::vector<CopyLines>& copies, uint64_t lo, uint64_t hi) {
  Bytes b;
  const std::size_t unit = b.open_length();
  b.put<uint16_t>(4), b.put<uint32_t>(0), b.put<uint8_t>(8);  // version, .debug_abbrev offset, address size
  b.uleb(1);
  b.string("dyni"), b.put<uint16_t>(kLangC99), b.string("dyni code cache"), b.put<uint32_t>(0);
  b.put<uint64_t>(lo), b.put<uint64_t>(hi - lo);
  for (const CopyLines& c : copies) {
    b.uleb(2);
    b.string(c.name), b.put<uint64_t>(c.begin), b.put<uint64_t>(c.end - c.begin);
  }
  b.uleb(0);  // the unit's children end
  b.close_length(unit);
  return std::move(b.bytes());
}

// One sequence a copy: its rows, then its end.
void line_program(Bytes& b, const CopyLines& c, const std::map<std::string, uint32_t>& files) {
  uint64_t addr = c.rows.front().addr;
  uint32_t file = 1, line = 1;
  b.put<uint8_t>(0), b.uleb(9), b.put<uint8_t>(kLneSetAddress), b.put<uint64_t>(addr);
  const LineRow* last = nullptr;
  for (const LineRow& r : c.rows) {
    if (last && last->file == r.file && last->line == r.line) continue;  // the row still holds
    if (r.addr < addr) continue;  // out of order: never, by contract
    const uint32_t f = files.at(r.file);
    if (f != file) b.put<uint8_t>(kLnsSetFile), b.uleb(f), file = f;
    if (r.line != line) b.put<uint8_t>(kLnsAdvanceLine), b.sleb(static_cast<int64_t>(r.line) - line), line = r.line;
    if (r.addr != addr) b.put<uint8_t>(kLnsAdvancePc), b.uleb(r.addr - addr), addr = r.addr;
    b.put<uint8_t>(kLnsCopy);
    last = &r;
  }
  if (c.end > addr) b.put<uint8_t>(kLnsAdvancePc), b.uleb(c.end - addr);
  b.put<uint8_t>(0), b.uleb(1), b.put<uint8_t>(kLneEndSequence);
}

std::vector<uint8_t> line_table(const std::vector<CopyLines>& copies) {
  std::map<std::string, uint32_t> files;  // 1-based, in the order first seen
  std::vector<const std::string*> order;
  for (const CopyLines& c : copies)
    for (const LineRow& r : c.rows)
      if (files.emplace(r.file, static_cast<uint32_t>(files.size() + 1)).second) order.push_back(&r.file);
  Bytes b;
  const std::size_t unit = b.open_length();
  b.put<uint16_t>(4);
  const std::size_t header = b.open_length();
  b.put<uint8_t>(1), b.put<uint8_t>(1), b.put<uint8_t>(1);  // min instruction length, max ops, default is_stmt
  b.put<int8_t>(-5), b.put<uint8_t>(14), b.put<uint8_t>(kOpcodeBase);
  for (uint8_t n : kStandardOpcodeLengths) b.put<uint8_t>(n);
  b.put<uint8_t>(0);  // no include directories
  for (const std::string* f : order) b.string(*f), b.uleb(0), b.uleb(0), b.uleb(0);
  b.put<uint8_t>(0);
  b.close_length(header);
  for (const CopyLines& c : copies)
    if (!c.rows.empty()) line_program(b, c, files);
  b.close_length(unit);
  return std::move(b.bytes());
}

}  // namespace

DebugSections dwarf_for_copies(const std::vector<CopyLines>& copies) {
  const bool any = std::any_of(copies.begin(), copies.end(), [](const CopyLines& c) { return !c.rows.empty(); });
  if (!any) return {};
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const CopyLines& c : copies) lo = std::min(lo, c.begin), hi = std::max(hi, c.end);
  return {abbreviations(), compile_unit(copies, lo, hi), line_table(copies)};
}

}  // namespace dyni
