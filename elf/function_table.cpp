// Building a module's function table from symbols and FDEs.
#include "elf/function_table.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "elf/eh_frame.h"

namespace dyni::elf {
namespace {

// Prefers .symtab over .dynsym and global over local names for one address.
bool better_name(const Symbol& a, const Function& current, bool current_from_symtab) {
  if (current.name.empty()) return true;
  return a.from_symtab && !current_from_symtab;
}

}  // namespace

Result<FunctionTable> FunctionTable::build(const ElfFile& file) {
  auto symbols = file.function_symbols();
  if (!symbols) return std::unexpected(symbols.error());
  std::map<uint64_t, Function> by_addr;
  std::map<uint64_t, bool> from_symtab;
  for (const Symbol& s : *symbols) {
    Function& f = by_addr[s.addr];
    f.addr = s.addr;
    f.size = std::max(f.size, s.size);
    if (better_name(s, f, from_symtab[s.addr])) {
      f.name = s.name;
      from_symtab[s.addr] = s.from_symtab;
    }
  }
  if (const Section* eh = file.find_section(".eh_frame")) {
    auto bytes = file.contents(*eh);
    if (!bytes) return std::unexpected(bytes.error());
    auto fdes = parse_eh_frame(*bytes, eh->addr);
    if (!fdes) return std::unexpected(fdes.error());
    for (const Fde& fde : *fdes) {
      Function& f = by_addr[fde.begin];
      f.addr = fde.begin;
      f.size = std::max(f.size, fde.end - fde.begin);
      f.has_fde = true;
      f.lsda = fde.lsda;
    }
  }
  FunctionTable table;
  for (auto& [addr, f] : by_addr)
    if (f.size > 0) table.functions_.push_back(std::move(f));
  return table;
}

const Function* FunctionTable::find(uint64_t addr) const {
  auto it = std::upper_bound(functions_.begin(), functions_.end(), addr,
                             [](uint64_t a, const Function& f) { return a < f.addr; });
  // Nested or overlapping entries are rare; look back a few for one that covers addr.
  for (int i = 0; i < 4 && it != functions_.begin(); ++i) {
    --it;
    if (addr < it->addr + it->size) return &*it;
  }
  return nullptr;
}

std::string demangle(const std::string& mangled) {
  if (!mangled.starts_with("_Z")) return mangled;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

std::string display_name(const Function& f) {
  return f.name.empty() ? fmt::format("func_{:x}", f.addr) : demangle(f.name);
}

}  // namespace dyni::elf
