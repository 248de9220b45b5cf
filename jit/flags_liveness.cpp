// Backward liveness of the status flags, block by block to a fixed point.
#include "jit/flags_liveness.h"

namespace dyni::jit {
namespace {

// What is live before `in`, given what is live after it.
uint16_t transfer(const Instruction& in, uint16_t after) {
  if (in.flow == Flow::Call || in.flow == Flow::IndirectCall) return 0;  // the callee clobbers them (ABI)
  return static_cast<uint16_t>((after & ~in.flags_written) | in.flags_read);
}

// What leaving the function by `b`'s last instruction needs live.
uint16_t live_on_exit(const FunctionCfg& cfg, const Block& b) {
  if (!b.exits) return 0;
  const Instruction& last = cfg.instructions[b.first + b.count - 1];
  if (last.flow == Flow::Return || last.flow == Flow::Stop) return 0;
  if (last.flow == Flow::Call) return 0;  // a call that never returns ends the block
  return kStatusFlags;
}

std::size_t index_of(const FunctionCfg& cfg, uint64_t start) { return cfg.block_at(start) - cfg.blocks.data(); }

uint16_t live_out(const FunctionCfg& cfg, const std::vector<uint16_t>& live_in, std::size_t k) {
  const Block& b = cfg.blocks[k];
  uint16_t out = live_on_exit(cfg, b);
  for (uint64_t s : b.successors) out |= live_in[index_of(cfg, s)];
  return out;
}

uint16_t block_live_in(const FunctionCfg& cfg, const Block& b, uint16_t out) {
  for (std::size_t i = b.first + b.count; i-- > b.first;) out = transfer(cfg.instructions[i], out);
  return out;
}

}  // namespace

std::vector<uint16_t> live_flags_before(const FunctionCfg& cfg) {
  const std::size_t n = cfg.blocks.size();
  std::vector<uint16_t> live_in(n, 0);
  // Monotone: live sets only grow, over a finite lattice.
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t k = n; k-- > 0;) {
      uint16_t in = block_live_in(cfg, cfg.blocks[k], live_out(cfg, live_in, k));
      if (in != live_in[k]) live_in[k] = in, changed = true;
    }
  }
  std::vector<uint16_t> before(cfg.instructions.size(), 0);
  for (std::size_t k = 0; k < n; ++k) {
    const Block& b = cfg.blocks[k];
    uint16_t out = live_out(cfg, live_in, k);
    for (std::size_t i = b.first + b.count; i-- > b.first;) before[i] = out = transfer(cfg.instructions[i], out);
  }
  return before;
}

uint16_t live_flags_at_next(const FunctionCfg& cfg, const std::vector<uint16_t>& before, std::size_t i) {
  if (i + 1 >= cfg.instructions.size()) return kStatusFlags;  // past the function's end
  return before[i + 1];
}

}  // namespace dyni::jit
