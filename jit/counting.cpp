// Counter sites, counter code (encoded by Zydis) and counts back to edges.
#include "jit/counting.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "jit/call_target.h"
#include "jit/count_flow.h"
#include "jit/encoding.h"
#include "jit/flags_liveness.h"
#include "jit/patch_plan.h"
#include "jit/relocator.h"

namespace dyni::jit {
namespace {

std::size_t block_index(const FunctionCfg& cfg, uint64_t start) { return cfg.block_at(start) - cfg.blocks.data(); }

// Ways into each block: in-function edges, plus the call into the entry.
std::vector<unsigned> ways_in(const FunctionCfg& cfg) {
  std::vector<unsigned> n(cfg.blocks.size(), 0);
  if (!n.empty()) n[0] = 1;
  for (const Block& b : cfg.blocks)
    for (uint64_t s : b.successors) ++n[block_index(cfg, s)];
  return n;
}

// Where the block counter of `b` goes: the first instruction, up to its
// first call, before which the plain code may run; else the block's start.
// Never before a last jmp after other instructions, which the layout may
// drop (the counter would then stand for an instruction not in the copy).
// The entry block of a function whose entry patch keeps instructions
// (patch_plan.h) counts after them: the patch lands there, also on a jmp
// (the counting copies' original layout keeps it).
CounterSite block_site(const FunctionCfg& cfg, const Block& b, const std::vector<uint16_t>& live) {
  auto spot = b.start == cfg.start ? entry_spot(cfg) : fail("");
  const std::size_t from = b.first + (spot ? spot->kept : 0);
  for (std::size_t i = from; i < b.first + b.count; ++i) {
    bool droppable = i > from && i + 1 == b.first + b.count && cfg.instructions[i].flow == Flow::Branch;
    if (!droppable && !(live[i] & kCounterClobbers)) return {CounterKind::Block, b.start, cfg.instructions[i].addr, false, 0};
    Flow f = cfg.instructions[i].flow;
    if (f == Flow::Call || f == Flow::IndirectCall) break;
  }
  return {CounterKind::Block, b.start, cfg.instructions[from].addr, true, 0};
}

// Whether the conditional branch ending `b` needs a fall-through counter:
// its edges do not follow from block counts alone.
bool needs_fall_through_site(const FunctionCfg& cfg, const Block& b, const std::vector<unsigned>& in) {
  const Instruction& last = cfg.instructions[b.first + b.count - 1];
  if (last.flow != Flow::CondBranch) return false;
  const Block* fall = cfg.block_at(last.end());
  if (!fall) return true;  // falls past the function's end
  if (last.has_target && last.target == last.end()) return false;  // both ways go to the same block
  return in[fall - cfg.blocks.data()] > 1;
}

Result<std::size_t> encode(const ZydisEncoderRequest& req, std::vector<uint8_t>& out) {
  std::array<uint8_t, ZYDIS_MAX_INSTRUCTION_LENGTH> buf{};
  ZyanUSize length = buf.size();
  if (ZYAN_FAILED(ZydisEncoderEncodeInstruction(&req, buf.data(), &length))) return fail("counter code: cannot encode");
  out.insert(out.end(), buf.begin(), buf.begin() + length);
  return length;
}

ZydisEncoderRequest request(ZydisMnemonic m) { return encoder_request(m); }

ZydisEncoderRequest with_register(ZydisMnemonic m, ZydisRegister r) {
  ZydisEncoderRequest req = request(m);
  req.operand_count = 1;
  req.operands[0].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[0].reg.value = r;
  return req;
}

ZydisEncoderRequest register_from(ZydisMnemonic m, ZydisRegister to, ZydisRegister from) {
  ZydisEncoderRequest req = with_register(m, to);
  req.operand_count = 2;
  req.operands[1].type = ZYDIS_OPERAND_TYPE_REGISTER;
  req.operands[1].reg.value = from;
  return req;
}

// Operand `k` of `req`: the 8 bytes at [base + index * scale + disp].
void set_memory(ZydisEncoderRequest& req, std::size_t k, ZydisRegister base, ZydisRegister index, uint8_t scale,
                int64_t disp) {
  req.operands[k].type = ZYDIS_OPERAND_TYPE_MEMORY;
  req.operands[k].mem.base = base;
  req.operands[k].mem.index = index;
  req.operands[k].mem.scale = index == ZYDIS_REGISTER_NONE ? 0 : scale;
  req.operands[k].mem.displacement = disp;
  req.operands[k].mem.size = 8;
}

// `m` to, [base + index * scale + disp] (a lea or a load of 8 bytes).
ZydisEncoderRequest register_from_memory(ZydisMnemonic m, ZydisRegister to, ZydisRegister base, ZydisRegister index,
                                         uint8_t scale, int64_t disp) {
  ZydisEncoderRequest req = with_register(m, to);
  req.operand_count = 2;
  set_memory(req, 1, base, index, scale, disp);
  return req;
}

// lea rsp, [rsp + disp]
ZydisEncoderRequest move_rsp(int32_t disp) {
  return register_from_memory(ZYDIS_MNEMONIC_LEA, ZYDIS_REGISTER_RSP, ZYDIS_REGISTER_RSP, ZYDIS_REGISTER_NONE, 0, disp);
}

// inc qword ptr [base + index + disp]: [rip + disp] shared, [rcx + rax + disp] striped.
ZydisEncoderRequest increment(ZydisRegister base, ZydisRegister index, int64_t disp) {
  ZydisEncoderRequest req = request(ZYDIS_MNEMONIC_INC);
  req.operand_count = 1;
  set_memory(req, 0, base, index, 1, disp);
  return req;
}

constexpr std::size_t kIncLength = 7;  // 48 ff 05 disp32

// One instruction of counter code: its request, its length, and the stack
// shift when it starts. `disp` is filled in by counter_code.
struct CounterInstruction {
  enum What : uint8_t { LowerRsp, Pushfq, PushRax, PushRcx, Rdpid, Movzx, LeaTable, LoadStripe, IncStriped, IncShared,
                        PopRcx, PopRax, Popfq, RaiseRsp } what;
  uint8_t length;
};

// The instructions of a form, in order.
std::vector<CounterInstruction> instructions_of(CounterForm form) {
  using I = CounterInstruction;
  std::vector<I> out;
  if (!form.saves_flags && !form.striped) return {{I::IncShared, kIncLength}};
  out.push_back({I::LowerRsp, 5});
  if (form.saves_flags) out.push_back({I::Pushfq, 1});
  if (form.striped) {
    for (I i : {I{I::PushRax, 1}, I{I::PushRcx, 1}, I{I::Rdpid, 4}, I{I::Movzx, 3}, I{I::LeaTable, 7},
                I{I::LoadStripe, 4}, I{I::IncStriped, 8}, I{I::PopRcx, 1}, I{I::PopRax, 1}})
      out.push_back(i);
  } else {
    out.push_back({I::IncShared, kIncLength});
  }
  if (form.saves_flags) out.push_back({I::Popfq, 1});
  out.push_back({I::RaiseRsp, 8});
  return out;
}

int stack_effect(CounterInstruction::What w) {
  using I = CounterInstruction;
  switch (w) {
    case I::LowerRsp: return kRedZone;
    case I::Pushfq: case I::PushRax: case I::PushRcx: return 8;
    case I::PopRcx: case I::PopRax: case I::Popfq: return -8;
    case I::RaiseRsp: return -static_cast<int>(kRedZone);
    default: return 0;
  }
}

// The request for instruction `w` at `at`, which increments `slot` (shared)
// or the stripe of `slot` (striped, the table at `table`).
ZydisEncoderRequest request_for(CounterInstruction::What w, uint64_t at, uint8_t length, uint64_t slot, uint64_t table) {
  using I = CounterInstruction;
  const int64_t from_end = static_cast<int64_t>(at + length);
  switch (w) {
    case I::LowerRsp: return move_rsp(-static_cast<int32_t>(kRedZone));
    case I::Pushfq: return request(ZYDIS_MNEMONIC_PUSHFQ);
    case I::PushRax: return with_register(ZYDIS_MNEMONIC_PUSH, ZYDIS_REGISTER_RAX);
    case I::PushRcx: return with_register(ZYDIS_MNEMONIC_PUSH, ZYDIS_REGISTER_RCX);
    case I::Rdpid: return with_register(ZYDIS_MNEMONIC_RDPID, ZYDIS_REGISTER_RAX);
    case I::Movzx: return register_from(ZYDIS_MNEMONIC_MOVZX, ZYDIS_REGISTER_EAX, ZYDIS_REGISTER_AL);
    case I::LeaTable:
      return register_from_memory(ZYDIS_MNEMONIC_LEA, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RIP, ZYDIS_REGISTER_NONE, 0,
                                  static_cast<int64_t>(table) - from_end);
    case I::LoadStripe:
      return register_from_memory(ZYDIS_MNEMONIC_MOV, ZYDIS_REGISTER_RAX, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RAX, 8, 0);
    case I::IncStriped: return increment(ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RAX, static_cast<int64_t>(slot - table));
    case I::IncShared: return increment(ZYDIS_REGISTER_RIP, ZYDIS_REGISTER_NONE, static_cast<int64_t>(slot) - from_end);
    case I::PopRcx: return with_register(ZYDIS_MNEMONIC_POP, ZYDIS_REGISTER_RCX);
    case I::PopRax: return with_register(ZYDIS_MNEMONIC_POP, ZYDIS_REGISTER_RAX);
    case I::Popfq: return request(ZYDIS_MNEMONIC_POPFQ);
    case I::RaiseRsp: return move_rsp(static_cast<int32_t>(kRedZone));
  }
  return request(ZYDIS_MNEMONIC_INVALID);
}

bool within_rel32(int64_t d) { return d >= INT32_MIN && d <= INT32_MAX; }

// One instruction of value code; `pair` numbers the pair it tests, claims
// or counts.
struct ValueInstruction {
  enum What : uint8_t { LowerRsp, PushRcx, PushRax, Pushfq, Load, Pad, LeaTable, CmpTarget, JeHit, CmpFree, JeClaim,
                        IncOther, JmpDone, Claim, Hit, Popfq, PopRax, PopRcx, RaiseRsp } what;
  uint8_t length;
  uint8_t pair = 0;
};

// Value code's instructions for a load of `load` bytes, in order.
std::vector<ValueInstruction> value_instructions(bool saves_flags, std::size_t load) {
  using V = ValueInstruction;
  std::vector<V> out = {{V::LowerRsp, 5}, {V::PushRcx, 1}, {V::PushRax, 1}};
  if (saves_flags) out.push_back({V::Pushfq, 1});
  out.push_back({V::Load, static_cast<uint8_t>(load)});
  if (load < kValueLoadBytes) out.push_back({V::Pad, static_cast<uint8_t>(kValueLoadBytes - load)});
  out.push_back({V::LeaTable, 7});
  for (uint8_t i = 0; i < kValueTargets; ++i)  // [rcx] has no displacement: one byte less
    for (V v : {V{V::CmpTarget, uint8_t(i ? 4 : 3), i}, V{V::JeHit, 2, i}, V{V::CmpFree, uint8_t(i ? 5 : 4), i},
                V{V::JeClaim, 2, i}})
      out.push_back(v);
  out.push_back({V::IncOther, 4});
  out.push_back({V::JmpDone, 2});
  for (uint8_t i = 0; i < kValueTargets; ++i) {
    out.push_back({V::Claim, uint8_t(i ? 4 : 3), i});
    out.push_back({V::Hit, 4, i});
    if (i + 1u < kValueTargets) out.push_back({V::JmpDone, 2});  // the last falls into done
  }
  if (saves_flags) out.push_back({V::Popfq, 1});
  for (V v : {V{V::PopRax, 1}, V{V::PopRcx, 1}, V{V::RaiseRsp, 8}}) out.push_back(v);
  return out;
}

int value_stack_effect(ValueInstruction::What w) {
  using V = ValueInstruction;
  switch (w) {
    case V::LowerRsp: return kRedZone;
    case V::PushRcx: case V::PushRax: case V::Pushfq: return 8;
    case V::Popfq: case V::PopRax: case V::PopRcx: return -8;
    case V::RaiseRsp: return -static_cast<int>(kRedZone);
    default: return 0;
  }
}

// Value code's load length for `source`, at any address (rsp-based
// operands are shifted by what the code pushed first).
Result<std::size_t> value_load_length(const Instruction& source, bool saves_flags) {
  const unsigned shift = kRedZone + 8 * (saves_flags ? 3 : 2);
  auto load = load_target(source, 0, ZYDIS_REGISTER_RAX, shift);
  if (!load) return std::unexpected(load.error());
  if (load->size() > kValueLoadBytes) return fail(fmt::format("value code: load of {:#x} too long", source.addr));
  return load->size();
}

// The table's byte for pair `i`'s target (its count follows) and for "other".
constexpr uint8_t pair_offset(unsigned i) { return static_cast<uint8_t>(2 * kCounterSlotSize * i); }
constexpr uint8_t kOtherOffset = 2 * kCounterSlotSize * kValueTargets;

// The length of every value code of a form (the load padded to kValueLoadBytes).
std::size_t value_length(bool saves_flags) {
  std::size_t n = 0;
  for (const ValueInstruction& v : value_instructions(saves_flags, kValueLoadBytes)) n += v.length;
  return n;
}

Result<CounterCode> value_code(uint64_t at, uint64_t table, bool saves_flags, const Instruction& source) {
  using V = ValueInstruction;
  if (!within_rel32(static_cast<int64_t>(table - at))) return fail(fmt::format("value table beyond ±2 GB at {:#x}", at));
  auto load_length = value_load_length(source, saves_flags);
  if (!load_length) return std::unexpected(load_length.error());
  const std::vector<V> what = value_instructions(saves_flags, *load_length);
  // Where each instruction starts, and the labels the branches go to.
  std::vector<uint64_t> start;
  uint64_t offset = 0, done = 0;
  std::array<uint64_t, kValueTargets> claim{}, hit{};
  for (const V& v : what) {
    start.push_back(offset);
    if (v.what == V::Claim) claim[v.pair] = offset;
    if (v.what == V::Hit) hit[v.pair] = offset;
    if ((v.what == V::Popfq || v.what == V::PopRax) && !done) done = offset;
    offset += v.length;
  }
  CounterCode code;
  int shift = 0;
  for (std::size_t k = 0; k < what.size(); ++k) {
    const V& v = what[k];
    code.steps.push_back({static_cast<uint8_t>(start[k]), static_cast<uint8_t>(shift)});
    const uint64_t here = at + start[k];
    std::vector<uint8_t> bytes;
    Result<std::vector<uint8_t>> branch;
    Result<std::size_t> n = 0;
    switch (v.what) {
      case V::LowerRsp: n = encode(move_rsp(-static_cast<int32_t>(kRedZone)), bytes); break;
      case V::PushRcx: n = encode(with_register(ZYDIS_MNEMONIC_PUSH, ZYDIS_REGISTER_RCX), bytes); break;
      case V::PushRax: n = encode(with_register(ZYDIS_MNEMONIC_PUSH, ZYDIS_REGISTER_RAX), bytes); break;
      case V::Pushfq: n = encode(request(ZYDIS_MNEMONIC_PUSHFQ), bytes); break;
      case V::Load: branch = load_target(source, here, ZYDIS_REGISTER_RAX, static_cast<unsigned>(shift)); break;
      case V::Pad:
        bytes.resize(v.length);
        if (ZYAN_FAILED(ZydisEncoderNopFill(bytes.data(), bytes.size()))) return fail("value code: cannot pad");
        break;
      case V::LeaTable:
        n = encode(register_from_memory(ZYDIS_MNEMONIC_LEA, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RIP, ZYDIS_REGISTER_NONE,
                                        0, static_cast<int64_t>(table) - static_cast<int64_t>(here + v.length)),
                   bytes);
        break;
      case V::CmpTarget: {
        ZydisEncoderRequest req = with_register(ZYDIS_MNEMONIC_CMP, ZYDIS_REGISTER_RAX);
        req.operand_count = 2;
        set_memory(req, 1, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_NONE, 0, pair_offset(v.pair));
        n = encode(req, bytes);
        break;
      }
      case V::CmpFree: {
        ZydisEncoderRequest req = request(ZYDIS_MNEMONIC_CMP);
        req.operand_count = 2;
        set_memory(req, 0, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_NONE, 0, pair_offset(v.pair));
        req.operands[1].type = ZYDIS_OPERAND_TYPE_IMMEDIATE;
        req.operands[1].imm.u = 0;
        n = encode(req, bytes);
        break;
      }
      case V::JeHit: branch = short_branch(here, at + hit[v.pair], 4); break;
      case V::JeClaim: branch = short_branch(here, at + claim[v.pair], 4); break;
      case V::JmpDone: branch = short_branch(here, at + done, std::nullopt); break;
      case V::IncOther: n = encode(increment(ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_NONE, kOtherOffset), bytes); break;
      case V::Claim: {
        ZydisEncoderRequest req = request(ZYDIS_MNEMONIC_MOV);
        req.operand_count = 2;
        set_memory(req, 0, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_NONE, 0, pair_offset(v.pair));
        req.operands[1].type = ZYDIS_OPERAND_TYPE_REGISTER;
        req.operands[1].reg.value = ZYDIS_REGISTER_RAX;
        n = encode(req, bytes);
        break;
      }
      case V::Hit:
        n = encode(increment(ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_NONE, pair_offset(v.pair) + kCounterSlotSize), bytes);
        break;
      case V::Popfq: n = encode(request(ZYDIS_MNEMONIC_POPFQ), bytes); break;
      case V::PopRax: n = encode(with_register(ZYDIS_MNEMONIC_POP, ZYDIS_REGISTER_RAX), bytes); break;
      case V::PopRcx: n = encode(with_register(ZYDIS_MNEMONIC_POP, ZYDIS_REGISTER_RCX), bytes); break;
      case V::RaiseRsp: n = encode(move_rsp(static_cast<int32_t>(kRedZone)), bytes); break;
    }
    if (!n) return std::unexpected(n.error());
    if (!branch) return std::unexpected(branch.error());
    if (bytes.empty()) bytes = std::move(*branch);
    // Invariant: the planned lengths (the branches' targets, emitted_size,
    // the translation table and counter_off_bytes rest on them).
    if (bytes.size() != v.length)
      return fail(fmt::format("value code: {} bytes for step {} at {:#x}, planned {}", bytes.size(), k, here, v.length));
    code.bytes.insert(code.bytes.end(), bytes.begin(), bytes.end());
    shift += value_stack_effect(v.what);
  }
  // Invariant: one jmp rel8 (counter_off_bytes) reaches past it.
  if (code.bytes.size() != value_length(saves_flags) || code.bytes.size() > 2 + INT8_MAX)
    return fail(fmt::format("value code: {} bytes at {:#x}", code.bytes.size(), at));
  return code;
}



// Every site: a counter per block, and per conditional branch whose
// fall-through is not told by the block it falls into.
std::vector<CounterSite> every_site(const FunctionCfg& cfg, bool striped) {
  std::vector<uint16_t> live = live_flags_before(cfg);
  std::vector<unsigned> in = ways_in(cfg);
  std::vector<CounterSite> sites;
  for (const Block& b : cfg.blocks) {
    CounterSite s = block_site(cfg, b, live);
    s.striped = striped;
    sites.push_back(s);
    if (!needs_fall_through_site(cfg, b, in)) continue;
    std::size_t last = b.first + b.count - 1;
    bool saves = live_flags_at_next(cfg, live, last) & kCounterClobbers;
    sites.push_back({CounterKind::FallThrough, cfg.instructions[last].addr, 0, saves, 0, striped});
  }
  return sites;
}

// Which blocks lie on a cycle (a loop), by Tarjan's strongly connected
// components, iteratively.
std::vector<bool> on_cycles(const FunctionCfg& cfg) {
  const std::size_t n = cfg.blocks.size();
  std::vector<std::vector<std::size_t>> succ(n);
  std::vector<bool> out(n, false);
  for (std::size_t k = 0; k < n; ++k)
    for (uint64_t s : cfg.blocks[k].successors) {
      const std::size_t t = block_index(cfg, s);
      succ[k].push_back(t);
      if (t == k) out[k] = true;  // a self-loop
    }
  std::vector<int> index(n, -1), low(n, 0);
  std::vector<bool> on_stack(n, false);
  std::vector<std::size_t> stack;
  int next = 0;
  for (std::size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<std::pair<std::size_t, std::size_t>> work = {{root, 0}};  // block, next successor
    index[root] = low[root] = next++, stack.push_back(root), on_stack[root] = true;
    while (!work.empty()) {
      auto& [v, i] = work.back();
      if (i < succ[v].size()) {
        const std::size_t w = succ[v][i++];
        if (index[w] < 0) {
          index[w] = low[w] = next++, stack.push_back(w), on_stack[w] = true;
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<std::size_t> component;
        for (std::size_t w = kOutside; w != v;) {
          w = stack.back(), stack.pop_back(), on_stack[w] = false;
          component.push_back(w);
        }
        if (component.size() > 1)
          for (std::size_t w : component) out[w] = true;
      }
      const std::size_t done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
    }
  }
  return out;
}

// What each site counts: a block (`block`), or an edge (`edge`), or nothing
// the flow graph has (a fall-through whose branch leaves both ways).
struct SiteMeaning {
  std::size_t block = kOutside, edge = kOutside;
};

std::vector<SiteMeaning> meanings(const FunctionCfg& cfg, const FlowGraph& g, const std::vector<CounterSite>& sites) {
  std::vector<SiteMeaning> out;
  for (const CounterSite& s : sites) {
    const std::size_t b = block_index(cfg, s.at);
    out.push_back(s.kind == CounterKind::Block ? SiteMeaning{b, kOutside} : SiteMeaning{kOutside, g.fall_edge[b]});
  }
  return out;
}

// What the counters of the sites `kept` make known before propagation.
FlowValues known_by(const FlowGraph& g, const std::vector<SiteMeaning>& sites, const std::vector<bool>& kept) {
  FlowValues v{std::vector<std::optional<int64_t>>(g.in.size()), std::vector<std::optional<int64_t>>(g.edges.size())};
  for (std::size_t i = 0; i < sites.size(); ++i) {
    if (!kept[i]) continue;
    if (sites[i].block != kOutside) v.blocks[sites[i].block] = 0;
    else if (sites[i].edge != kOutside) v.edges[sites[i].edge] = 0;
  }
  return v;
}

// Whether dropping sites is worth its search here: each drop reruns the
// propagation, and a block of many edges is summed again after each of them.
bool small_enough(const FunctionCfg& cfg, const FlowGraph& g) {
  if (cfg.blocks.size() > kMaxBlocksToReduce) return false;
  return std::all_of(g.out.begin(), g.out.end(), [](const auto& o) { return o.size() <= kMaxEdgesOfABlock; });
}

// The sites that may go, most often run first (as far as the CFG tells):
// those on loops, then those saving flags (popfq is slow), then those with
// more ways in (joins run as often as all their ways in together). Never the entry's, a block's with no in-edge (a
// landing pad's), or a jump table target's (its edge is known only so).
std::vector<std::size_t> removal_order(const FunctionCfg& cfg, const FlowGraph& g, const std::vector<CounterSite>& sites) {
  std::vector<bool> loop = on_cycles(cfg);
  std::vector<bool> table_target(cfg.blocks.size(), false);
  for (const FlowGraph::Edge& e : g.edges)
    if (e.table && e.to != kOutside) table_target[e.to] = true;
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const std::size_t b = block_index(cfg, sites[i].at);
    if (sites[i].kind == CounterKind::Block && (b == 0 || g.in[b].empty() || table_target[b])) continue;
    out.push_back(i);
  }
  auto rank = [&](std::size_t i) {  // saving flags costs most (popfq)
    const std::size_t b = block_index(cfg, sites[i].at);
    return std::tuple{loop[b] ? 1 : 0, sites[i].saves_flags ? 1 : 0, g.in[b].size()};
  };
  std::stable_sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) { return rank(a) > rank(b); });
  return out;
}

// Whether every block's and every edge's count (but a jump table's) follows
// from the counters of the sites `kept`.
bool tells_everything(const FlowGraph& g, const std::vector<SiteMeaning>& meaning, const std::vector<bool>& kept) {
  FlowValues v = known_by(g, meaning, kept);
  propagate(g, v);
  return fully_known(g, v);
}

// The sites kept by dropping greedily, in `order`, every one whose count
// still follows from the others: a propagation per site tried, so quadratic.
std::vector<bool> kept_by_propagation(const FlowGraph& g, const std::vector<SiteMeaning>& meaning,
                                      const std::vector<std::size_t>& order) {
  std::vector<bool> kept(meaning.size(), true);
  for (std::size_t i : order) {
    kept[i] = false;
    if (!tells_everything(g, meaning, kept)) kept[i] = true;
  }
  return kept;
}

// The same in near-linear time, where it can be decided so. Each block
// has two equations, at its start (its count = the sum of its in-edges) and
// its end (= the sum of its out-edges): a node each, and the block's count
// is an edge between them. A node with no equation (the entry's start, a
// start with no in-edge, an end with no out-edge) is the node "outside"
// (V), where exits lead. An unknown count is then an unknown edge, and the
// propagation (peeling: a node with one unknown edge solves it) tells
// every unknown edge exactly when the unknown edges form a forest.
// Exits and jump-table edges need not be told: those never counted may lie
// on cycles, but only in V's part of the graph (any other tree keeps its
// equations). A site may go when its edge joins two trees. Empty when the
// counted sites do not start as such a forest: the caller propagates then.
class UnknownForest {
 public:
  explicit UnknownForest(std::size_t nodes) : parent_(nodes) {
    for (std::size_t k = 0; k < nodes; ++k) parent_[k] = k;
  }
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  bool join(std::size_t a, std::size_t b) {
    a = find(a), b = find(b);
    if (a == b) return false;
    parent_[a] = b;
    return true;
  }

 private:
  std::vector<std::size_t> parent_;
};

std::optional<std::vector<bool>> kept_by_forest(const FlowGraph& g, const std::vector<SiteMeaning>& meaning,
                                                const std::vector<std::size_t>& order) {
  const std::size_t n = g.in.size(), outside = 0;
  auto start = [&](std::size_t k) { return k == 0 || g.in[k].empty() ? outside : 1 + 2 * k; };
  auto end = [&](std::size_t k) { return g.out[k].empty() ? outside : 2 + 2 * k; };
  auto ends_of_edge = [&](std::size_t e) {
    const FlowGraph::Edge& x = g.edges[e];
    return std::pair{end(x.from), x.to == kOutside ? outside : start(x.to)};
  };
  std::vector<bool> counted_block(n, false), counted_edge(g.edges.size(), false);
  for (const SiteMeaning& m : meaning) {
    if (m.block != kOutside) counted_block[m.block] = true;
    else if (m.edge != kOutside) counted_edge[m.edge] = true;
  }
  UnknownForest forest(1 + 2 * n);
  auto need_not_be_told = [&](std::size_t e) { return g.edges[e].table || g.edges[e].to == kOutside; };
  // Exits first: they join V directly, so that a cycle of table edges found
  // later is known to be V's, when it is.
  for (bool exits : {true, false})
    for (std::size_t e = 0; e < g.edges.size(); ++e) {
      if (counted_edge[e] || !need_not_be_told(e) || (g.edges[e].to == kOutside) != exits) continue;
      auto [a, b] = ends_of_edge(e);
      if (!forest.join(a, b) && forest.find(a) != forest.find(outside)) return std::nullopt;
    }
  for (std::size_t e = 0; e < g.edges.size(); ++e) {
    if (counted_edge[e] || need_not_be_told(e)) continue;
    auto [a, b] = ends_of_edge(e);
    if (!forest.join(a, b)) return std::nullopt;
  }
  for (std::size_t k = 0; k < n; ++k)
    if (!counted_block[k] && !forest.join(start(k), end(k))) return std::nullopt;
  std::vector<bool> kept(meaning.size(), true);
  for (std::size_t i : order) {
    const SiteMeaning& m = meaning[i];
    if (m.block == kOutside && m.edge == kOutside) kept[i] = false;  // it counts nothing the flow has
    else if (m.block != kOutside) kept[i] = !forest.join(start(m.block), end(m.block));
    else {
      auto [a, b] = ends_of_edge(m.edge);
      kept[i] = !forest.join(a, b);
    }
  }
  return kept;
}

// Drops every site whose count follows from the others (count_flow.h), the
// most run first, keeping every block's and edge's count known.
std::vector<CounterSite> fewest_sites(const FunctionCfg& cfg, std::vector<CounterSite> sites, bool by_forest) {
  const FlowGraph g = flow_graph(cfg);
  const std::vector<SiteMeaning> meaning = meanings(cfg, g, sites);
  const std::vector<std::size_t> order = removal_order(cfg, g, sites);
  std::optional<std::vector<bool>> kept = by_forest ? kept_by_forest(g, meaning, order) : std::nullopt;
  // The forest's answer is checked once by the propagation counts_from runs.
  if (kept && !tells_everything(g, meaning, *kept)) kept.reset();
  if (!kept && small_enough(cfg, g)) kept = kept_by_propagation(g, meaning, order);
  if (!kept) return sites;
  std::vector<CounterSite> out;
  for (std::size_t i = 0; i < sites.size(); ++i)
    if ((*kept)[i]) out.push_back(sites[i]);
  return out;
}

}  // namespace

bool value_countable(const Instruction& in) {
  return target_loadable(in) && value_load_length(in, true).has_value() && value_load_length(in, false).has_value();
}

uint32_t CounterSite::slots() const { return kind == CounterKind::Value ? kValueSlots : 1; }

uint32_t slots_of(const std::vector<CounterSite>& sites) {
  uint32_t n = 0;
  for (const CounterSite& s : sites) n += s.slots();
  return n;
}

std::vector<CounterSite> plan_counters(const FunctionCfg& cfg, uint32_t first_slot, bool striped, CounterSet set,
                                       bool values) {
  std::vector<CounterSite> sites = every_site(cfg, striped);
  if (set != CounterSet::Every) sites = fewest_sites(cfg, std::move(sites), set == CounterSet::Fewest);
  if (values) {
    std::vector<uint16_t> live = live_flags_before(cfg);
    for (std::size_t i = 0; i < cfg.instructions.size(); ++i) {
      const Instruction& in = cfg.instructions[i];
      const bool table = std::any_of(cfg.tables.begin(), cfg.tables.end(),
                                     [&](const JumpTable& t) { return t.jump_addr == in.addr; });
      if (table || !value_countable(in)) continue;
      sites.push_back({CounterKind::Value, in.addr, in.addr, (live[i] & kStatusFlags) != 0, 0, false});
    }
    // In address order; at one address a block's counter runs first.
    auto order = [](const CounterSite& s) { return s.kind == CounterKind::Block ? 0 : s.kind == CounterKind::Value ? 1 : 2; };
    std::stable_sort(sites.begin(), sites.end(), [&](const CounterSite& a, const CounterSite& b) {
      return std::pair{a.at, order(a)} < std::pair{b.at, order(b)};
    });
  }
  uint32_t slot = first_slot;
  for (CounterSite& s : sites) s.slot = slot, slot += s.slots();
  return sites;
}

uint64_t CounterLayout::stripe_bytes() const {
  const uint64_t raw = kCounterSlotSize * slots;
  return striped() ? (raw + kStripeAlign - 1) / kStripeAlign * kStripeAlign : raw;
}

uint64_t CounterLayout::bytes() const { return table_bytes() + std::max<uint32_t>(stripes, 1) * stripe_bytes(); }

uint64_t CounterLayout::slot_offset(uint32_t slot) const { return table_bytes() + kCounterSlotSize * slot; }

std::vector<uint8_t> CounterLayout::table() const {
  std::vector<uint8_t> out;
  if (!striped()) return out;
  out.resize(kStripeTableBytes);
  for (uint32_t cpu = 0; cpu < kStripeTableBytes / 8; ++cpu) {
    const uint64_t offset = (cpu % stripes) * stripe_bytes();
    std::memcpy(out.data() + 8 * cpu, &offset, 8);
  }
  return out;
}

std::vector<uint64_t> CounterLayout::sums(std::span<const uint64_t> words) const {
  std::vector<uint64_t> out(slots, 0);
  for (uint32_t k = 0; k < std::max<uint32_t>(stripes, 1); ++k) {
    const uint64_t first = (table_bytes() + k * stripe_bytes()) / 8;
    for (uint32_t s = 0; s < slots && first + s < words.size(); ++s) out[s] += words[first + s];
  }
  return out;
}

uint32_t stripes_for(uint32_t slots, uint32_t cpus) {
  const uint64_t one = CounterLayout{slots, 1}.stripe_bytes();
  const uint64_t fit = one ? (kMaxStripedBytes - kStripeTableBytes) / one : kMaxCounterStripes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(std::min<uint64_t>({cpus, kMaxCounterStripes, fit}), 1,
                                                    kMaxCounterStripes));
}

std::size_t counter_length(CounterForm form) {
  if (form.value) return value_length(form.saves_flags);
  std::size_t n = 0;
  for (const CounterInstruction& i : instructions_of(form)) n += i.length;
  return n;
}

namespace {

// Where each of `instructions` starts and its stack shift there, by `effect`.
template <class I, class Effect>
std::vector<CounterStep> steps_of(const std::vector<I>& instructions, Effect effect) {
  std::vector<CounterStep> out;
  uint8_t offset = 0;
  int shift = 0;
  for (const I& i : instructions) {
    out.push_back({offset, static_cast<uint8_t>(shift)});
    offset = static_cast<uint8_t>(offset + i.length);
    shift += effect(i.what);
  }
  return out;
}

}  // namespace

std::vector<CounterStep> counter_steps(CounterForm form, const Instruction* source) {
  if (!form.value) return steps_of(instructions_of(form), stack_effect);
  auto load = source ? value_load_length(*source, form.saves_flags) : fail("no source");
  if (!load) return {};
  return steps_of(value_instructions(form.saves_flags, *load), value_stack_effect);
}

Result<CounterCode> counter_code(uint64_t at, uint64_t slot_addr, CounterForm form, uint64_t table,
                                 const Instruction* source) {
  if (form.value) {
    if (!source || !value_countable(*source)) return fail(fmt::format("value code without a countable call at {:#x}", at));
    return value_code(at, slot_addr, form.saves_flags, *source);
  }
  if (form.striped && (!within_rel32(static_cast<int64_t>(table - at)) ||
                       !within_rel32(static_cast<int64_t>(slot_addr - table))))
    return fail(fmt::format("counter table beyond ±2 GB at {:#x}", at));
  if (!form.striped && !within_rel32(static_cast<int64_t>(slot_addr - at)))
    return fail(fmt::format("counter beyond ±2 GB at {:#x}", at));
  CounterCode code;
  const std::vector<CounterStep> planned = counter_steps(form);
  const std::vector<CounterInstruction> what = instructions_of(form);
  for (std::size_t k = 0; k < what.size(); ++k) {
    code.steps.push_back({static_cast<uint8_t>(code.bytes.size()), planned[k].stack_shift});
    const uint64_t here = at + code.bytes.size();
    auto n = encode(request_for(what[k].what, here, what[k].length, slot_addr, table), code.bytes);
    if (!n) return std::unexpected(n.error());
    // Invariant: the planned length and places (emitted_size, the
    // translation table and counter_off_bytes rest on them).
    if (*n != what[k].length || code.steps.back().offset != planned[k].offset)
      return fail(fmt::format("counter code: {} bytes for step {} at {:#x}, planned {}", *n, k, here, what[k].length));
  }
  return code;
}

uint64_t ValueCounts::calls() const {
  uint64_t n = other;
  for (const auto& [target, count] : targets) n += count;
  return n;
}

namespace {

// A value site's table read back: pairs with calls, a pair claimed twice
// (racing threads) merged, the most called first.
ValueCounts value_counts(std::span<const uint64_t> table, uint64_t bias) {
  ValueCounts out;
  out.other = table[kValueSlots - 1];
  std::map<uint64_t, uint64_t> by_target;
  for (unsigned i = 0; i < kValueTargets; ++i) {
    const uint64_t target = table[2 * i], n = table[2 * i + 1];
    if (n == 0) continue;
    if (target == 0) out.other += n;  // a call through a null pointer (it faults just after)
    else by_target[target - bias] += n;
  }
  out.targets.assign(by_target.begin(), by_target.end());
  std::stable_sort(out.targets.begin(), out.targets.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace

SiteCounts site_counts(uint64_t start, const std::vector<CounterSite>& sites, std::span<const uint64_t> counters,
                       uint64_t bias) {
  SiteCounts out;
  for (const CounterSite& s : sites) {
    if (s.kind == CounterKind::Value) {
      std::array<uint64_t, kValueSlots> table{};
      for (uint32_t k = 0; k < kValueSlots; ++k) table[k] = s.slot + k < counters.size() ? counters[s.slot + k] : 0;
      out.values[s.at - start] = value_counts(table, bias);
      continue;
    }
    uint64_t value = s.slot < counters.size() ? counters[s.slot] : 0;
    (s.kind == CounterKind::Block ? out.blocks : out.falls)[s.at - start] = value;
  }
  return out;
}

std::array<uint8_t, 2> counter_off_bytes(CounterForm form) {
  return {0xeb, static_cast<uint8_t>(counter_length(form) - 2)};
}

bool is_counter_start(std::span<const uint8_t> bytes, CounterForm form) {
  static constexpr uint8_t kInc[] = {0x48, 0xff, 0x05};                       // inc qword [rip + …]
  static constexpr uint8_t kLea[] = {0x48, 0x8d, 0x64, 0x24, 0x80};           // lea rsp, [rsp - 128]
  std::vector<uint8_t> want;
  if (form.value) {  // lea; push rcx; push rax; then pushfq or the load's REX prefix
    want.assign(std::begin(kLea), std::end(kLea));
    want.insert(want.end(), {0x51, 0x50});
    if (form.saves_flags) want.push_back(0x9c);
    const std::size_t n = form.saves_flags ? want.size() : want.size() + 1;  // kCounterStartBytes either way
    return bytes.size() >= n && std::equal(want.begin(), want.end(), bytes.begin()) &&
           (form.saves_flags || (bytes[want.size()] & 0xf0) == 0x40);
  }
  if (!form.saves_flags && !form.striped) want.assign(std::begin(kInc), std::end(kInc));
  else want.assign(std::begin(kLea), std::end(kLea));
  if (form.saves_flags) want.push_back(0x9c);                                 // pushfq
  if (form.striped) want.insert(want.end(), {0x50, 0x51});                    // push rax; push rcx
  else if (form.saves_flags) want.insert(want.end(), std::begin(kInc), std::end(kInc));
  want.resize(std::min(want.size(), kCounterStartBytes));
  return bytes.size() >= want.size() && std::equal(want.begin(), want.end(), bytes.begin());
}

namespace {

// The rest of each jump table block's count over the targets whose edges
// are unknown, in proportion to the targets' counts.
void split_tables(const FlowGraph& g, FlowValues& v) {
  for (std::size_t k = 0; k < g.out.size(); ++k) {
    int64_t rest = v.blocks[k].value_or(0), weight = 0;
    std::vector<std::size_t> unknown;
    for (std::size_t e : g.out[k]) {
      if (!g.edges[e].table) continue;
      if (v.edges[e]) rest -= *v.edges[e];
      else unknown.push_back(e), weight += std::max<int64_t>(v.blocks[g.edges[e].to].value_or(0), 0);
    }
    for (std::size_t e : unknown) {
      const int64_t share = std::max<int64_t>(v.blocks[g.edges[e].to].value_or(0), 0);
      v.edges[e] = weight > 0 && rest > 0 ? static_cast<int64_t>(static_cast<double>(rest) * share / weight) : 0;
    }
  }
}

}  // namespace

FunctionCounts counts_from(const FunctionCfg& cfg, const SiteCounts& counts) {
  const FlowGraph g = flow_graph(cfg);
  FlowValues v{std::vector<std::optional<int64_t>>(cfg.blocks.size()), std::vector<std::optional<int64_t>>(g.edges.size())};
  for (const auto& [offset, n] : counts.blocks)
    if (const Block* b = cfg.block_at(cfg.start + offset); b && b->start == cfg.start + offset)
      v.blocks[b - cfg.blocks.data()] = static_cast<int64_t>(n);
  for (const auto& [offset, n] : counts.falls) {
    const Block* b = cfg.block_at(cfg.start + offset);
    if (!b || cfg.instructions[b->first + b->count - 1].addr != cfg.start + offset) continue;
    if (std::size_t e = g.fall_edge[b - cfg.blocks.data()]; e != kOutside) v.edges[e] = static_cast<int64_t>(n);
  }
  propagate(g, v);
  split_tables(g, v);
  propagate(g, v);
  FunctionCounts out;
  auto clamped = [](const std::optional<int64_t>& c) { return static_cast<uint64_t>(std::max<int64_t>(c.value_or(0), 0)); };
  for (const auto& c : v.blocks) out.blocks.push_back(clamped(c));
  for (std::size_t e = 0; e < g.edges.size(); ++e)
    if (g.edges[e].to != kOutside)
      out.edges.push_back({g.edges[e].from, g.edges[e].to, static_cast<double>(clamped(v.edges[e]))});
  return out;
}

}  // namespace dyni::jit
