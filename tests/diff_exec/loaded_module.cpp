// dlopen, link-time numbering, a cache area near the module, entry patches.
#include "tests/diff_exec/loaded_module.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace dyni::diff {
namespace {

// Maps kCacheArea bytes rwx at or after `hint`, within reach of the module.
void* map_near(uint64_t hint) {
  for (int i = 0; i < 256; ++i, hint += 16 << 20) {
    void* p = mmap(reinterpret_cast<void*>(hint), LoadedModule::kCacheArea, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED) return p;
  }
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<LoadedModule>> LoadedModule::load(const std::string& path) {
  auto m = std::make_unique<LoadedModule>();
  m->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m->handle_) return fail(path + ": " + dlerror());
  link_map* lm = nullptr;
  if (dlinfo(m->handle_, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return fail(path + ": no link map");
  m->bias_ = lm->l_addr;
  auto file = elf::ElfFile::open(path);
  if (!file) return fail(path + ": " + file.error().message());
  m->file_ = std::make_unique<elf::ElfFile>(std::move(*file));
  auto table = elf::FunctionTable::build(*m->file_);
  if (!table) return fail(path + ": " + table.error().message());
  m->table_ = std::make_unique<elf::FunctionTable>(std::move(*table));
  m->image_ = std::make_unique<jit::ModuleImage>(*m->file_);
  uint64_t end = 0;
  for (const elf::Function& f : m->table_->functions()) end = std::max(end, f.addr + f.size);
  m->area_ = map_near((m->bias_ + end + (64 << 20)) & ~0xfffull);
  if (!m->area_) return fail(path + ": no cache area within reach");
  return m;
}

LoadedModule::~LoadedModule() {
  if (area_) munmap(area_, kCacheArea);
  if (handle_) dlclose(handle_);
}

Status LoadedModule::write(const jit::CodeCache& cache) {
  if (cache.bytes.size() > kCacheArea || cache.base != cache_base()) return fail("cache does not fit its area");
  const uint64_t counters_end = cache.counters_base + cache.counter_layout().bytes();
  if (cache.counter_slots && counters_end - cache.base > kCacheArea) return fail("counters do not fit the area");
  std::memset(area_, jit::kPadding, kCacheArea);
  std::vector<uint8_t> loaded = cache.loaded_at(bias_);
  std::memcpy(area_, loaded.data(), loaded.size());
  if (cache.counter_slots)  // a counting cache's counters, after its code
    std::memset(static_cast<uint8_t*>(area_) + (cache.counters_base - cache.base), 0, counters_end - cache.counters_base);
  const std::vector<uint8_t> table = cache.counter_layout().table();  // striped: as dynid writes it
  if (!table.empty()) std::memcpy(static_cast<uint8_t*>(area_) + (cache.counters_base - cache.base), table.data(), table.size());
  __builtin___clear_cache(static_cast<char*>(area_), static_cast<char*>(area_) + kCacheArea);
  return ok();
}

// `replacement` over the file's `original` at link-time `addr`.
Status LoadedModule::write_patch(uint64_t addr, const std::array<uint8_t, jit::kEntryPatchSize>& original,
                                 const std::array<uint8_t, jit::kEntryPatchSize>& replacement) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto* at = reinterpret_cast<uint8_t*>(live(addr));
  if (std::memcmp(at, original.data(), original.size()) != 0) return fail("live bytes differ from the file's");
  uint64_t first = reinterpret_cast<uint64_t>(at) & ~(page - 1);
  uint64_t last = (reinterpret_cast<uint64_t>(at) + replacement.size() + page - 1) & ~(page - 1);
  if (mprotect(reinterpret_cast<void*>(first), last - first, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
    return fail("mprotect failed");
  std::memcpy(at, replacement.data(), replacement.size());
  __builtin___clear_cache(reinterpret_cast<char*>(at), reinterpret_cast<char*>(at) + replacement.size());
  return ok();
}

Status LoadedModule::apply_patches(const jit::CodeCache& cache) {
  for (const jit::CachedFunction& f : cache.functions)
    for (const jit::EntryPatch& p : f.patch.entries) {
      if (p.pad)  // its pad first, as dynid writes them (jit/entry_pads.h)
        if (auto r = write_patch(p.pad, p.pad_original, p.pad_replacement); !r) return r;
      if (auto r = write_patch(p.addr, p.original, p.replacement); !r) return r;
    }
  return ok();
}

}  // namespace dyni::diff
