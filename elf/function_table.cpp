// Building a module's function table from symbols and FDEs.
#include "elf/function_table.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>

#include "elf/eh_frame.h"

namespace dyni::elf {
namespace {

std::size_t leading_underscores(const std::string& name) {
  std::size_t n = 0;
  while (n < name.size() && name[n] == '_') ++n;
  return n;
}

// Among aliases of one address, the name `perf report` would show, so that
// operators see the same names in both: sized over unsized, non-weak over
// weak, global over local, fewer leading underscores, then the longer name.
bool preferred(const Symbol& a, const Symbol& b) {
  if ((a.size > 0) != (b.size > 0)) return a.size > 0;
  if (a.weak != b.weak) return !a.weak;
  if (a.global != b.global) return a.global;
  std::size_t ua = leading_underscores(a.name), ub = leading_underscores(b.name);
  if (ua != ub) return ua < ub;
  return a.name.size() > b.name.size();
}

Status add_symbols(const ElfFile& file, std::map<uint64_t, Symbol>& best) {
  auto symbols = file.function_symbols();
  if (!symbols) return std::unexpected(symbols.error());
  for (const Symbol& s : *symbols) {
    auto [it, inserted] = best.emplace(s.addr, s);
    if (!inserted && preferred(s, it->second)) it->second = s;
  }
  return ok();
}

}  // namespace

Result<FunctionTable> FunctionTable::build(const ElfFile& file, const ElfFile* debug) {
  std::map<uint64_t, Symbol> best;
  if (auto r = add_symbols(file, best); !r) return std::unexpected(r.error());
  if (debug) {
    if (auto r = add_symbols(*debug, best); !r) return std::unexpected(r.error());
  }
  std::map<uint64_t, Function> by_addr;
  for (const auto& [addr, s] : best) by_addr[addr] = Function{addr, s.size, s.name, false, 0};
  if (const Section* eh = file.find_section(".eh_frame")) {
    auto bytes = file.contents(*eh);
    if (!bytes) return std::unexpected(bytes.error());
    auto fdes = parse_eh_frame(*bytes, eh->addr);
    if (!fdes) return std::unexpected(fdes.error());
    for (const Fde& fde : *fdes) {
      // An FDE starting inside a named, sized function is part of it (e.g. a
      // cancellation or cold path sharing the symbol): it names no new function.
      auto after = by_addr.upper_bound(fde.begin);
      if (after != by_addr.begin()) {
        const Function& before = std::prev(after)->second;
        if (before.addr != fde.begin && !before.name.empty() && fde.begin - before.addr < before.size)
          continue;
      }
      Function& f = by_addr[fde.begin];
      f.addr = fde.begin;
      f.size = std::max(f.size, fde.end - fde.begin);
      f.has_fde = true;
      f.lsda = fde.lsda;
    }
  }
  FunctionTable table;
  for (auto& [addr, f] : by_addr) {
    // Invariant for find(): addr + size does not wrap (a hostile size could).
    f.size = std::min(f.size, std::numeric_limits<uint64_t>::max() - f.addr);
    if (f.size > 0) table.functions_.push_back(std::move(f));
  }
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

std::string debug_file_path(const std::string& build_id) {
  if (build_id.size() < 3) return "";
  return "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
}

std::string display_name(const Function& f) {
  return f.name.empty() ? fmt::format("func_{:x}", f.addr) : demangle(f.name);
}

}  // namespace dyni::elf
