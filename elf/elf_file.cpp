// ELF64 header, section, segment and symbol-table parsing with bounds checks.
#include "elf/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/errno_text.h"
#include "elf/byte_reader.h"

namespace dyni::elf {
namespace {

constexpr std::size_t kMaxSections = 1 << 16;
constexpr std::size_t kMaxSegments = 1 << 12;

// True when [offset, offset + size) lies inside a buffer of `total` bytes.
bool fits(uint64_t offset, uint64_t size, std::size_t total) {
  return offset <= total && size <= total - offset;
}

template <typename T>
Result<T> read_struct(std::span<const uint8_t> bytes, uint64_t offset, const char* what) {
  ByteReader r(bytes);
  if (!r.seek(offset)) return fail(std::string("truncated ELF: ") + what);
  auto v = r.read<T>();
  if (!v) return fail(std::string("truncated ELF: ") + what);
  return *v;
}

std::string string_at(std::span<const uint8_t> table, uint64_t offset) {
  ByteReader r(table);
  if (!r.seek(offset)) return "";
  return r.cstring().value_or("");
}

}  // namespace

Result<ElfFile> ElfFile::from_bytes(std::vector<uint8_t> bytes) {
  ElfFile file;
  file.bytes_ = std::move(bytes);
  if (auto parsed = file.parse(); !parsed) return std::unexpected(parsed.error());
  return file;
}

namespace {

// An open regular file, closed when it goes out of scope.
struct RegularFile {
  int fd = -1;
  uint64_t size = 0;
  RegularFile(const RegularFile&) = delete;
  RegularFile(RegularFile&& o) noexcept : fd(o.fd), size(o.size) { o.fd = -1; }
  RegularFile(int f, uint64_t s) : fd(f), size(s) {}
  ~RegularFile() {
    if (fd >= 0) ::close(fd);
  }
};

Result<RegularFile> open_regular(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(sys_error("cannot open " + path));
  RegularFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail(path + " is not a regular file");
  file.size = static_cast<uint64_t>(st.st_size);
  return file;
}

}  // namespace

Result<ElfFile> ElfFile::open(const std::string& path) {
  auto f = open_regular(path);
  if (!f) return std::unexpected(f.error());
  if (f->size > kMaxFileBytes) return fail(path + " is too large to analyse");
  // Read, not mmap: a file truncated under us must not SIGBUS the daemon.
  std::vector<uint8_t> bytes(static_cast<std::size_t>(f->size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(f->fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  auto file = from_bytes(std::move(bytes));
  if (!file) return fail(path + ": " + file.error().message());
  return file;
}

namespace {

// Reads `size` bytes at `offset` of fd, all or nothing.
bool pread_all(int fd, uint8_t* out, std::size_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (n <= 0) return false;
    out += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

bool is_symbol_section(std::size_t, uint32_t type, std::size_t) {
  return type == SHT_SYMTAB || type == SHT_DYNSYM || type == SHT_STRTAB;
}

// The notes and the section names (whatever the names' section's type).
bool is_note_section(std::size_t index, uint32_t type, std::size_t names_index) {
  return type == SHT_NOTE || index == names_index;
}

// A compact image of the file: header, section headers, program headers,
// then the bytes of the sections `keep` names (by index, type and the names' section's index)
// only, with section offsets rewritten to match; never more bytes than the
// file has (overlapping sections of a hostile file are not read twice over).
Result<std::vector<uint8_t>> read_section_image(int fd, uint64_t file_size,
                                                bool (*keep)(std::size_t index, uint32_t type, std::size_t names_index)) {
  std::vector<uint8_t> image(sizeof(Elf64_Ehdr));
  if (file_size < image.size() || !pread_all(fd, image.data(), image.size(), 0))
    return fail("truncated ELF: ELF header");
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum > kMaxSections ||
      !fits(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), file_size))
    return fail("bad section header table");
  std::vector<Elf64_Shdr> shdrs(eh.e_shnum);
  if (!pread_all(fd, reinterpret_cast<uint8_t*>(shdrs.data()), shdrs.size() * sizeof(Elf64_Shdr), eh.e_shoff))
    return fail("bad section header table");
  eh.e_shoff = sizeof eh;
  image.resize(sizeof eh + shdrs.size() * sizeof(Elf64_Shdr));
  // The program headers too (a mapping's bias, profiler/symbolizer.h): small,
  // and only where the header describes a table that fits the file.
  if (eh.e_phnum && eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum <= kMaxSegments &&
      fits(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), file_size)) {
    std::size_t at = image.size();
    image.resize(at + eh.e_phnum * sizeof(Elf64_Phdr));
    if (!pread_all(fd, image.data() + at, eh.e_phnum * sizeof(Elf64_Phdr), eh.e_phoff))
      return fail("truncated program header table");
    eh.e_phoff = at;
  } else {
    eh.e_phnum = 0;
  }
  const std::size_t limit = std::min<uint64_t>(ElfFile::kMaxFileBytes, image.size() + file_size);
  for (std::size_t i = 0; i < shdrs.size(); ++i) {
    Elf64_Shdr& sh = shdrs[i];
    if (!keep(i, sh.sh_type, eh.e_shstrndx) || !fits(sh.sh_offset, sh.sh_size, file_size) ||
        sh.sh_size > limit - image.size()) {
      sh.sh_size = sh.sh_type == SHT_NOBITS ? sh.sh_size : 0;
      sh.sh_offset = 0;
      continue;
    }
    std::size_t at = image.size();
    image.resize(at + sh.sh_size);
    if (!pread_all(fd, image.data() + at, sh.sh_size, sh.sh_offset)) return fail("truncated section");
    sh.sh_offset = at;
  }
  std::memcpy(image.data(), &eh, sizeof eh);
  std::memcpy(image.data() + sizeof eh, shdrs.data(), shdrs.size() * sizeof(Elf64_Shdr));
  return image;
}

}  // namespace

namespace {

Result<ElfFile> open_sections(const std::string& path, bool (*keep)(std::size_t, uint32_t, std::size_t)) {
  auto f = open_regular(path);
  if (!f) return std::unexpected(f.error());
  auto image = read_section_image(f->fd, f->size, keep);
  if (!image) return fail(path + ": " + image.error().message());
  auto file = ElfFile::from_bytes(std::move(*image));
  if (!file) return fail(path + ": " + file.error().message());
  return file;
}

}  // namespace

Result<ElfFile> ElfFile::open_symbols(const std::string& path) { return open_sections(path, is_symbol_section); }

Result<ElfFile> ElfFile::open_notes(const std::string& path) { return open_sections(path, is_note_section); }

std::string ElfFile::build_id() const {
  for (const auto& s : sections_) {
    if (s.type != SHT_NOTE || s.name != ".note.gnu.build-id") continue;
    auto bytes = contents(s);
    if (!bytes) return "";
    ByteReader r(*bytes);
    auto namesz = r.read<uint32_t>(), descsz = r.read<uint32_t>(), type = r.read<uint32_t>();
    if (!namesz || !descsz || !type || *type != NT_GNU_BUILD_ID || *descsz > 64) return "";
    if (!r.skip((*namesz + 3) & ~3u)) return "";
    std::string hex;
    for (uint32_t i = 0; i < *descsz; ++i) {
      auto b = r.read<uint8_t>();
      if (!b) return "";
      hex += fmt::format("{:02x}", *b);
    }
    return hex;
  }
  return "";
}

Status ElfFile::parse() {
  auto eh = read_struct<Elf64_Ehdr>(bytes_, 0, "ELF header");
  if (!eh) return std::unexpected(eh.error());
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return fail("not an ELF file");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64) return fail("not a 64-bit ELF file");
  if (eh->e_ident[EI_DATA] != ELFDATA2LSB) return fail("not a little-endian ELF file");
  if (eh->e_machine != EM_X86_64) return fail("not an x86-64 ELF file");
  if (eh->e_type != ET_EXEC && eh->e_type != ET_DYN) return fail("not an executable or shared object");
  type_ = eh->e_type;
  if (auto s = parse_segments(); !s) return s;
  return parse_sections();
}

Status ElfFile::parse_segments() {
  auto eh = *read_struct<Elf64_Ehdr>(bytes_, 0, "ELF header");
  if (eh.e_phnum == 0) return ok();
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > kMaxSegments ||
      !fits(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), bytes_.size()))
    return fail("bad program header table");
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    auto ph = *read_struct<Elf64_Phdr>(bytes_, eh.e_phoff + i * sizeof(Elf64_Phdr), "phdr");
    segments_.push_back({ph.p_type, ph.p_flags, ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz});
  }
  return ok();
}

Status ElfFile::parse_sections() {
  auto eh = *read_struct<Elf64_Ehdr>(bytes_, 0, "ELF header");
  if (eh.e_shnum == 0) return ok();  // sections are optional at run time
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum > kMaxSections ||
      !fits(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), bytes_.size()))
    return fail("bad section header table");
  std::vector<Elf64_Shdr> headers;
  for (unsigned i = 0; i < eh.e_shnum; ++i)
    headers.push_back(*read_struct<Elf64_Shdr>(bytes_, eh.e_shoff + i * sizeof(Elf64_Shdr), "shdr"));
  std::span<const uint8_t> names;
  if (eh.e_shstrndx < headers.size()) {
    const auto& s = headers[eh.e_shstrndx];
    if (!fits(s.sh_offset, s.sh_size, bytes_.size())) return fail("bad section name table");
    names = std::span(bytes_).subspan(s.sh_offset, s.sh_size);
  }
  for (const auto& h : headers)
    sections_.push_back({string_at(names, h.sh_name), h.sh_type, h.sh_flags, h.sh_addr,
                         h.sh_offset, h.sh_size, h.sh_link, h.sh_entsize});
  return ok();
}

const Section* ElfFile::find_section(std::string_view name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

Result<std::span<const uint8_t>> ElfFile::contents(const Section& section) const {
  if (section.type == SHT_NOBITS) return fail("section " + section.name + " has no file contents");
  if (!fits(section.offset, section.size, bytes_.size()))
    return fail("section " + section.name + " lies outside the file");
  return std::span<const uint8_t>(bytes_).subspan(section.offset, section.size);
}

Status ElfFile::read_symbols(const Section& table, bool is_symtab, std::vector<Symbol>& out) const {
  auto entries = contents(table);
  if (!entries) return std::unexpected(entries.error());
  if (table.link >= sections_.size()) return fail(table.name + ": bad string table link");
  auto strings = contents(sections_[table.link]);
  if (!strings) return std::unexpected(strings.error());
  for (std::size_t off = 0; off + sizeof(Elf64_Sym) <= entries->size(); off += sizeof(Elf64_Sym)) {
    auto sym = *read_struct<Elf64_Sym>(*entries, off, "symbol");
    unsigned type = ELF64_ST_TYPE(sym.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
      continue;
    unsigned bind = ELF64_ST_BIND(sym.st_info);
    out.push_back({string_at(*strings, sym.st_name), sym.st_value, sym.st_size,
                   bind != STB_LOCAL, bind == STB_WEAK, is_symtab});
  }
  return ok();
}

Result<std::vector<Symbol>> ElfFile::function_symbols() const {
  std::vector<Symbol> out;
  for (const auto& s : sections_) {
    if (s.type != SHT_SYMTAB && s.type != SHT_DYNSYM) continue;
    if (auto r = read_symbols(s, s.type == SHT_SYMTAB, out); !r) return std::unexpected(r.error());
  }
  return out;
}

}  // namespace dyni::elf
