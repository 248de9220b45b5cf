// A shared object loaded into this process (dlopen) as the jit sees it: its
// ELF file, functions and image in link-time addresses, its load bias, and a
// code-cache area mapped within ±2 GB of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/code_cache.h"
#include "jit/counting.h"
#include "jit/module_image.h"

namespace dyni::diff {

class LoadedModule {
 public:
  static constexpr std::size_t kCacheArea = 4 << 20;

  static Result<std::unique_ptr<LoadedModule>> load(const std::string& path);
  ~LoadedModule();

  const elf::FunctionTable& functions() const { return *table_; }
  const elf::ElfFile& file() const { return *file_; }
  const jit::ModuleImage& image() const { return *image_; }
  // Where the cache goes, in the module's link-time numbering.
  uint64_t cache_base() const { return reinterpret_cast<uint64_t>(area_) - bias_; }
  // A link-time address as it runs in this process.
  uint64_t live(uint64_t addr) const { return addr + bias_; }

  // Writes `cache` into the area (the rest of it int3), and a counting
  // cache's counters after it, zeroed.
  Status write(const jit::CodeCache& cache);
  // Writes every entry patch of `cache` whose live bytes are the file's;
  // meant for a forked child (the parent's text stays as loaded).
  Status apply_patches(const jit::CodeCache& cache);

 private:
  Status write_patch(uint64_t addr, const std::array<uint8_t, jit::kEntryPatchSize>& original,
                     const std::array<uint8_t, jit::kEntryPatchSize>& replacement);
  void* handle_ = nullptr;
  uint64_t bias_ = 0;
  void* area_ = nullptr;
  std::unique_ptr<elf::ElfFile> file_;
  std::unique_ptr<elf::FunctionTable> table_;
  std::unique_ptr<jit::ModuleImage> image_;
};

}  // namespace dyni::diff
