// Assembles x86-64 text (Intel syntax, LLVM MC) into the bytes of its .text
// section, for tests that feed small hand-written functions through the jit.
// Branches to labels inside the text are resolved by the assembler; anything
// that needs a relocation (other sections, external symbols) is an error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::test {

struct Assembly {
  std::vector<uint8_t> bytes;               // .text
  std::map<std::string, uint64_t> labels;  // offsets in .text of its labels
};

Result<Assembly> assemble_with_labels(const std::string& intel_text);

inline Result<std::vector<uint8_t>> assemble(const std::string& intel_text) {
  auto a = assemble_with_labels(intel_text);
  if (!a) return std::unexpected(a.error());
  return a->bytes;
}

}  // namespace dyni::test
