// Two passes: new addresses from relocated lengths, then relocated bytes.
#include "jit/emitter.h"

#include <map>

#include "jit/relocator.h"

namespace dyni::jit {

Result<EmittedCode> emit_in_order(const FunctionCfg& cfg, uint64_t base) {
  std::map<uint64_t, uint64_t> new_addr;  // original → new, for every instruction
  uint64_t at = base;
  for (const Instruction& in : cfg.instructions) {
    new_addr[in.addr] = at;
    at += relocated_length(in);
  }
  EmittedCode code{base, {}, {}};
  for (const Instruction& in : cfg.instructions) {
    std::optional<uint64_t> target;
    if (in.has_target) {
      auto it = new_addr.find(in.target);
      if (it != new_addr.end()) target = it->second;  // stays inside the function
    }
    auto bytes = relocate(in, new_addr[in.addr], target);
    if (!bytes) return std::unexpected(bytes.error());
    code.translation.push_back({new_addr[in.addr], in.addr});
    code.bytes.insert(code.bytes.end(), bytes->begin(), bytes->end());
  }
  return code;
}

}  // namespace dyni::jit
