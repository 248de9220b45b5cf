// Emitting: plan the pieces (lengths are known before addresses), assign
// addresses, then relocate each piece against the final addresses.
#include "jit/emitter.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

#include "jit/relocator.h"

namespace dyni::jit {
namespace {

constexpr std::size_t kJmpRel32 = 5;
constexpr uint64_t kNoBlock = UINT64_MAX;  // after the last block: nothing follows

struct Piece {
  Translation kind;
  const Instruction* in = nullptr;  // Copied / Inverted
  uint64_t continue_at = 0;         // Jump: the original address execution continues at
  std::size_t length = 0;
  bool dropped = false;             // a jmp made redundant by the layout: no bytes
};

class Planner {
 public:
  Planner(const FunctionCfg& cfg, const BlockLayout& layout) : cfg_(cfg), layout_(layout) {
    for (std::size_t i = 0; i < cfg.blocks.size(); ++i) block_index_[cfg.blocks[i].start] = i;
  }

  std::vector<Piece> plan() {
    std::vector<Piece> pieces;
    for (std::size_t k = 0; k < layout_.order.size(); ++k) {
      const Block& b = cfg_.blocks[layout_.order[k]];
      uint64_t next = k + 1 < layout_.order.size() ? cfg_.blocks[layout_.order[k + 1]].start : kNoBlock;
      for (std::size_t i = b.first; i + 1 < b.first + b.count; ++i) pieces.push_back(copied(cfg_.instructions[i]));
      plan_block_end(cfg_.instructions[b.first + b.count - 1], next, pieces);
    }
    return pieces;
  }

 private:
  static Piece copied(const Instruction& in) { return {Translation::Copied, &in, 0, relocated_length(in)}; }
  static Piece jump(uint64_t to) { return {Translation::Jump, nullptr, to, kJmpRel32}; }

  bool copied_block_at(uint64_t addr) const {
    auto it = block_index_.find(addr);
    return it != block_index_.end() && layout_.copied[it->second];
  }

  // The last instruction of a block decides how the layout is bridged:
  // a jmp to the next block is dropped; a jcc whose target is the next block
  // is inverted; a broken fall-through gets a jmp.
  // Invariant: a copy never runs past its end. Every instruction that can
  // fall through is followed by the image of its successor or by a jmp to
  // it, also when that successor lies past the function's end (a last jcc or
  // call falls into whatever follows the function: the copy goes there
  // explicitly, not into the next function of the cache).
  void plan_block_end(const Instruction& last, uint64_t next, std::vector<Piece>& out) const {
    bool internal = last.has_target && last.target >= cfg_.start && last.target < cfg_.end;
    bool target_next = internal && next == last.target && copied_block_at(last.target);
    // A block that is only a jmp keeps it, so every copied block has a copy.
    bool alone = &last == &cfg_.instructions[cfg_.block_at(last.addr)->first];
    if (last.flow == Flow::Branch && target_next && !alone) {
      out.push_back({Translation::Copied, &last, 0, 0, true});
      return;
    }
    uint64_t fall = last.end();
    bool has_fall = last.falls_through();
    // Only a jcc has an opposite (xbegin, loop*, jrcxz keep their sense).
    if (jcc_condition(last) && target_next && next != fall) {
      out.push_back({Translation::Inverted, &last, 0, relocated_length(last)});
      return;
    }
    out.push_back(copied(last));
    if (has_fall && next != fall) out.push_back(jump(fall));
  }

  const FunctionCfg& cfg_;
  const BlockLayout& layout_;
  std::map<uint64_t, std::size_t> block_index_;
};

Result<std::vector<uint8_t>> jmp_rel32(uint64_t at, uint64_t to) {
  int64_t delta = static_cast<int64_t>(to - (at + kJmpRel32));
  if (delta < INT32_MIN || delta > INT32_MAX) return fail(fmt::format("jump beyond ±2 GB at {:#x}", at));
  std::vector<uint8_t> out = {0xe9, 0, 0, 0, 0};
  int32_t d = static_cast<int32_t>(delta);
  std::memcpy(out.data() + 1, &d, 4);
  return out;
}

}  // namespace

uint64_t emitted_size(const FunctionCfg& cfg, const BlockLayout& layout) {
  uint64_t n = 0;
  for (const Piece& p : Planner(cfg, layout).plan()) n += p.length;
  return n;
}

Result<EmittedCode> emit_function(const FunctionCfg& cfg, const BlockLayout& layout, uint64_t base,
                                  const Redirects& redirects) {
  std::vector<Piece> pieces = Planner(cfg, layout).plan();
  std::map<uint64_t, uint64_t> copy_of;  // original instruction → its copy
  uint64_t at = base;
  EmittedCode code{base, {}, {}};
  for (const Piece& p : pieces) {
    uint64_t original = p.in ? p.in->addr : p.continue_at;
    if (p.in) copy_of[original] = at;  // a dropped jmp's image is where its target's copy follows
    if (!p.dropped) code.translation.push_back({at, original, p.kind});
    at += p.length;
  }
  // Inside the function: the copy, else the original instruction; outside: the redirect.
  auto image = [&](uint64_t target) {
    if (target < cfg.start || target >= cfg.end) return redirects(target);
    auto it = copy_of.find(target);
    return it == copy_of.end() ? target : it->second;
  };
  std::size_t k = 0;
  for (const Piece& p : pieces) {
    if (p.dropped) continue;
    uint64_t here = code.translation[k++].new_addr;
    Result<std::vector<uint8_t>> bytes;
    if (p.kind == Translation::Jump) {
      bytes = jmp_rel32(here, image(p.continue_at));
    } else if (p.kind == Translation::Inverted) {
      bytes = relocate_inverted(*p.in, here, image(p.in->end()));
    } else {
      std::optional<uint64_t> target;
      if (p.in->has_target) target = image(p.in->target);
      bytes = relocate(*p.in, here, target);
    }
    if (!bytes) return std::unexpected(bytes.error());
    code.bytes.insert(code.bytes.end(), bytes->begin(), bytes->end());
  }
  return code;
}

Result<EmittedCode> emit_in_order(const FunctionCfg& cfg, uint64_t base) {
  return emit_function(cfg, original_layout(cfg), base);
}

}  // namespace dyni::jit
