// Source lines through LLVM's DWARF reader (source_lines.h).
#include "dynid/source_lines.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/file_io.h"
#include <llvm/ADT/StringExtras.h>
#include <llvm/DebugInfo/DWARF/DWARFContext.h>
#include <llvm/Object/BuildID.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/Error.h>

namespace dyni {

struct SourceLines::Reader {
  std::string bytes;  // the whole file, read (never mapped: a file truncated under dynid must not SIGBUS it)
  std::unique_ptr<llvm::object::ObjectFile> object;
  std::unique_ptr<llvm::DWARFContext> dwarf;
};

namespace {

constexpr off_t kMaxDebugFileBytes = off_t{512} << 20;
constexpr decltype(statfs::f_type) kFuseMagic = 0x65735546;  // FUSE_SUPER_MAGIC

bool has_line_table(const llvm::object::ObjectFile& object) {
  for (const llvm::object::SectionRef& s : object.sections()) {
    auto name = s.getName();
    if (name && *name == ".debug_line") return true;
    if (!name) llvm::consumeError(name.takeError());
  }
  return false;
}

}  // namespace

namespace {

bool root_alone(const struct stat& st) { return st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

// Every directory on the way, from /, is root's, and writable by root alone
// or sticky (as /tmp: no one else may move root's entries there).
Status root_path(const std::string& resolved) {
  for (std::size_t at = 0; (at = resolved.find('/', at + 1)) != std::string::npos;) {
    const std::string dir = resolved.substr(0, at);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0))
      return fail(dir + ": a directory not root's alone on the way to the file");
  }
  return ok();
}

// Opens the file (resolved, every step root's) and checks what was opened.
Result<int> open_trusted(const std::string& path) {
  char resolved[PATH_MAX];
  if (!::realpath(path.c_str(), resolved)) return fail(path + ": not there");
  if (auto dirs = root_path(resolved); !dirs) return std::unexpected(dirs.error());
  int fd = ::open(resolved, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return fail(std::string(resolved) + ": cannot open");
  struct stat st {};
  struct statfs fs {};
  std::string why;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
  else if (!root_alone(st)) why = "not root's alone (owner or mode): its debug info is not read";
  else if (st.st_size > kMaxDebugFileBytes) why = "larger than 512 MiB";
  else if (::fstatfs(fd, &fs) != 0 || fs.f_type == kFuseMagic) why = "on a FUSE file system";
  if (why.empty()) return fd;
  ::close(fd);
  return fail(std::string(resolved) + ": " + why);
}

Result<std::string> read_all(int fd, off_t size) {
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) return fail("short read");
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

}  // namespace

bool has_line_section(int fd, off_t size) {
  Elf64_Ehdr h{};
  if (::pread(fd, &h, sizeof h, 0) != sizeof h || std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 ||
      h.e_shentsize != sizeof(Elf64_Shdr) || h.e_shnum == 0 || h.e_shnum > 4096 || h.e_shstrndx >= h.e_shnum ||
      h.e_shoff > static_cast<uint64_t>(size))
    return false;
  std::vector<Elf64_Shdr> sections(h.e_shnum);
  const auto bytes = static_cast<ssize_t>(sections.size() * sizeof(Elf64_Shdr));
  if (::pread(fd, sections.data(), static_cast<std::size_t>(bytes), static_cast<off_t>(h.e_shoff)) != bytes) return false;
  const Elf64_Shdr& names = sections[h.e_shstrndx];
  if (names.sh_size == 0 || names.sh_size > (1 << 20) || names.sh_offset > static_cast<uint64_t>(size)) return false;
  std::string table(names.sh_size, '\0');
  if (::pread(fd, table.data(), table.size(), static_cast<off_t>(names.sh_offset)) != static_cast<ssize_t>(table.size()))
    return false;
  for (const Elf64_Shdr& s : sections)
    if (s.sh_name < table.size() && std::strcmp(table.c_str() + s.sh_name, ".debug_line") == 0) return true;
  return false;
}

Status trusted_debug_file(const std::string& path) {
  auto fd = open_trusted(path);
  if (!fd) return std::unexpected(fd.error());
  ::close(*fd);
  return ok();
}

std::vector<std::string> debug_info_candidates(const std::string& path, const std::string& build_id) {
  std::vector<std::string> candidates;
  if (build_id.size() > 2)
    candidates.push_back(fmt::format("/usr/lib/debug/.build-id/{}/{}.debug", build_id.substr(0, 2), build_id.substr(2)));
  candidates.push_back(path);
  return candidates;
}

Result<int> open_debug_info(const std::string& path) {
  auto fd = open_trusted(path);
  if (!fd) return fd;
  struct stat st {};
  if (::fstat(*fd, &st) == 0 && has_line_section(*fd, st.st_size)) return fd;
  ::close(*fd);
  return fail(path + ": no .debug_line");
}

Result<std::string> read_debug_info(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail("not a regular file");
  if (st.st_size > kMaxDebugFileBytes) return fail("larger than 512 MiB");
  return read_all(fd, st.st_size);
}

Result<SourceLines> SourceLines::open(const std::string& path, const std::string& build_id) {
  std::string why;
  for (const std::string& candidate : debug_info_candidates(path, build_id)) {
    auto fd = open_debug_info(candidate);
    if (!fd) {
      why += (why.empty() ? "" : "; ") + fd.error().message();
      continue;
    }
    auto bytes = read_debug_info(*fd);
    ::close(*fd);
    if (!bytes) {
      why += (why.empty() ? "" : "; ") + candidate + ": " + bytes.error().message();
      continue;
    }
    auto read = from_bytes(std::move(*bytes), candidate, build_id);
    if (read) return read;
    why += (why.empty() ? "" : "; ") + read.error().message();
  }
  return fail("no source lines: " + why);
}

Result<SourceLines> SourceLines::from_bytes(std::string bytes, const std::string& name, const std::string& build_id) {
  auto reader = std::make_unique<Reader>();
  reader->bytes = std::move(bytes);
  auto object = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(reader->bytes, name));
  if (!object) return fail(name + ": " + llvm::toString(object.takeError()));
  reader->object = std::move(*object);
  // The same build: a path read in dynid's mount namespace may name
  // another file than the target's.
  auto id = llvm::object::getBuildID(reader->object.get());
  if (!build_id.empty() && (!id || llvm::toHex(*id, true) != build_id)) return fail(name + ": another build");
  if (!has_line_table(*reader->object)) return fail(name + ": no .debug_line");
  auto quiet = [](llvm::Error e) { llvm::consumeError(std::move(e)); };
  reader->dwarf = llvm::DWARFContext::create(*reader->object, llvm::DWARFContext::ProcessDebugRelocations::Process,
                                             nullptr, "", quiet, quiet);
  return SourceLines(std::move(reader), name);
}

SourceLines::SourceLines(std::unique_ptr<Reader> reader, std::string path)
    : reader_(std::move(reader)), path_(std::move(path)) {}
SourceLines::SourceLines(SourceLines&&) noexcept = default;
SourceLines& SourceLines::operator=(SourceLines&&) noexcept = default;
SourceLines::~SourceLines() = default;

std::optional<SourceLine> SourceLines::at(uint64_t addr) const {
  const llvm::DILineInfoSpecifier spec(llvm::DILineInfoSpecifier::FileLineInfoKind::AbsoluteFilePath,
                                       llvm::DILineInfoSpecifier::FunctionNameKind::None);
  const llvm::DILineInfo info = reader_->dwarf->getLineInfoForAddress(
      {addr, llvm::object::SectionedAddress::UndefSection}, spec);
  if (info.Line == 0 || info.FileName == llvm::DILineInfo::BadString) return std::nullopt;
  return SourceLine{info.FileName, info.Line};
}

}  // namespace dyni
