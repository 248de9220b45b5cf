// Direct branches anywhere in a module that land inside the bytes an entry
// patch would overwrite (after the first of the 5: landing there runs the
// jmp from its middle). mempcpy jumps to memcpy+3 in libc; code that is not
// hot, and so never analysed, does such things too. Found by scanning every
// function's bytes for branch encodings (call/jmp/jcc rel32, xbegin, jmp/jcc/
// loop/jrcxz rel8) aimed there, each candidate confirmed by decoding its
// function: some instruction of it must branch there (a function that does
// not decode counts). Jump tables and computed branches of code not analysed
// are not seen.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "elf/function_table.h"
#include "jit/module_image.h"

namespace dyni::jit {

// Each entry patch's span: the start of the instruction it patches (where
// execution enters its jmp) → the end of its 5 bytes (patch_plan.h).
using PatchSpans = std::map<uint64_t, uint64_t>;

// The spans (by start) that a direct branch of another function lands
// inside, after their start (a function's own are plan_patch's to refuse);
// and the `pads` (entry_pads.h, by start) that any branch lands in, at
// their start too: padding that is a branch target is no padding.
std::set<uint64_t> entries_branched_into(const elf::FunctionTable& functions, const ModuleImage& image,
                                         const PatchSpans& patches, const PatchSpans& pads = {});

}  // namespace dyni::jit
