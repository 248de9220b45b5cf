// Assembles x86-64 text (Intel syntax, LLVM MC) into the bytes of its .text
// section, for tests that feed small hand-written functions through the jit.
// Branches to labels inside the text are resolved by the assembler; anything
// that needs a relocation (other sections, external symbols) is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace dyni::test {

Result<std::vector<uint8_t>> assemble(const std::string& intel_text);

}  // namespace dyni::test
