// The functions of a module, by address: named from .symtab/.dynsym, and for
// stripped code bounded by .eh_frame FDEs (stock mariadbd has ~21k exported
// names but ~35k FDEs). Addresses are the module's link-time addresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace dyni::elf {

struct Function {
  uint64_t addr = 0;
  uint64_t size = 0;
  std::string name;  // mangled; "" when only an FDE bounds it
  bool has_fde = false;
  uint64_t lsda = 0;
};

class FunctionTable {
 public:
  // Merges function symbols and FDE ranges; a malformed .eh_frame is an error.
  // `debug`, when given, is the file's detached debug file (symbols only).
  static Result<FunctionTable> build(const ElfFile& file, const ElfFile* debug = nullptr);

  // The function containing `addr`, or nullptr.
  const Function* find(uint64_t addr) const;
  const std::vector<Function>& functions() const { return functions_; }

 private:
  std::vector<Function> functions_;  // sorted by addr, no duplicate addresses
};

// A name for people: demangled symbol, or "func_<hex addr>" for unnamed code.
std::string display_name(const Function& f);
// Where Debian keeps the detached debug file of a build-id (libc6-dbg, *-dbgsym).
std::string debug_file_path(const std::string& build_id);
std::string demangle(const std::string& mangled);

}  // namespace dyni::elf
