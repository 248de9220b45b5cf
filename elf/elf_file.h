// An ELF64 x86-64 file read as untrusted input: headers, sections, segments
// and function symbols. Every offset and size is checked against the file
// before use; anything malformed is an Error naming what is wrong (I9).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace dyni::elf {

struct Section {
  std::string name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t addr = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;  // for symbol tables: index of their string table
  uint64_t entsize = 0;  // of a table's entries (PLT stubs, symbols), 0: not a table
};

struct Segment {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

struct Symbol {
  std::string name;
  uint64_t addr = 0;
  uint64_t size = 0;
  bool global = false;
  bool weak = false;
  bool from_symtab = false;  // else from .dynsym
};

class ElfFile {
 public:
  static constexpr std::size_t kMaxFileBytes = 2ull << 30;

  static Result<ElfFile> from_bytes(std::vector<uint8_t> bytes);
  static Result<ElfFile> open(const std::string& path);
  // Reads only the headers and symbol tables of a (possibly huge) file, such
  // as a detached debug file: the other sections keep their headers but no bytes.
  static Result<ElfFile> open_symbols(const std::string& path);
  // Reads only the headers (program headers too), the notes and the section
  // names: enough for build_id() and segments(), a few KiB of a 26 MB
  // executable (an adopted child's check).
  static Result<ElfFile> open_notes(const std::string& path);

  bool is_pie() const { return type_ == 3; }  // ET_DYN
  uint16_t type() const { return type_; }
  const std::vector<Section>& sections() const { return sections_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const Section* find_section(std::string_view name) const;
  // The file bytes of a section (not SHT_NOBITS); checked to lie in the file.
  Result<std::span<const uint8_t>> contents(const Section& section) const;
  std::span<const uint8_t> bytes() const { return bytes_; }

  // Defined function symbols (STT_FUNC / STT_GNU_IFUNC) of .symtab and .dynsym.
  Result<std::vector<Symbol>> function_symbols() const;
  // The GNU build-id as lowercase hex ("" when there is none).
  std::string build_id() const;

 private:
  ElfFile() = default;
  Status parse();
  Status parse_sections();
  Status parse_segments();
  Status read_symbols(const Section& table, bool is_symtab, std::vector<Symbol>& out) const;

  std::vector<uint8_t> bytes_;
  uint16_t type_ = 0;
  std::vector<Section> sections_;
  std::vector<Segment> segments_;
};

}  // namespace dyni::elf
