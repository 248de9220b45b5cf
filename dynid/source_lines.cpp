// Source lines through LLVM's DWARF reader (source_lines.h).
#include "dynid/source_lines.h"

#include <sys/stat.h>

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

bool has_line_table(const llvm::object::ObjectFile& object) {
  for (const llvm::object::SectionRef& s : object.sections()) {
    auto name = s.getName();
    if (name && *name == ".debug_line") return true;
    if (!name) llvm::consumeError(name.takeError());
  }
  return false;
}

}  // namespace

Status trusted_debug_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail(path + ": not there");
  if (!S_ISREG(st.st_mode)) return fail(path + ": not a regular file");
  if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fail(path + ": not root's alone (owner or mode): its debug info is not read");
  if (st.st_size > kMaxDebugFileBytes) return fail(path + ": larger than 512 MiB");
  return ok();
}

Result<SourceLines> SourceLines::open(const std::string& path, const std::string& build_id) {
  std::vector<std::string> candidates;
  if (build_id.size() > 2)
    candidates.push_back(fmt::format("/usr/lib/debug/.build-id/{}/{}.debug", build_id.substr(0, 2), build_id.substr(2)));
  candidates.push_back(path);
  std::string why;
  for (const std::string& candidate : candidates) {
    if (auto trusted = trusted_debug_file(candidate); !trusted) {
      why += (why.empty() ? "" : "; ") + trusted.error().message();
      continue;
    }
    auto reader = std::make_unique<Reader>();
    auto bytes = read_file(candidate, static_cast<std::size_t>(kMaxDebugFileBytes));
    if (!bytes) {
      why += (why.empty() ? "" : "; ") + bytes.error().message();
      continue;
    }
    reader->bytes = std::move(*bytes);
    auto object = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(reader->bytes, candidate));
    if (!object) {
      why += (why.empty() ? "" : "; ") + candidate + ": " + llvm::toString(object.takeError());
      continue;
    }
    reader->object = std::move(*object);
    // The same build: a path read in dynid's mount namespace may name
    // another file than the target's.
    auto id = llvm::object::getBuildID(reader->object.get());
    if (!build_id.empty() && (!id || llvm::toHex(*id, true) != build_id)) {
      why += (why.empty() ? "" : "; ") + candidate + ": another build";
      continue;
    }
    if (!has_line_table(*reader->object)) {
      why += (why.empty() ? "" : "; ") + candidate + ": no .debug_line";
      continue;
    }
    auto quiet = [](llvm::Error e) { llvm::consumeError(std::move(e)); };
    reader->dwarf = llvm::DWARFContext::create(*reader->object, llvm::DWARFContext::ProcessDebugRelocations::Process,
                                               nullptr, "", quiet, quiet);
    return SourceLines(std::move(reader), candidate);
  }
  return fail("no source lines: " + why);
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
