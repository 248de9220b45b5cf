// Functions that read their own return address: a PC thunk
// (`mov rax, [rsp]; ret`), __builtin_return_address(0) compared with a code
// label, a `pop` of the return address. Called from a copy, they see a cache
// address where the original saw its own code, and compute something else.
// So a function that calls one directly is not copied (its calls would come
// from the cache); the reader itself may be, since its callers in the
// original code still pass original return addresses.
//
// Found by following the stack depth from the entry over the CFG: the return
// address is at [rsp + depth] (push, pop, sub/add/lea rsp, call keep depth
// known), and at [rbp + d] after `mov rbp, rsp` at depth d. A read, write or
// `lea` of that slot, or a pop at depth 0, is a use. Where depth becomes
// unknown (`and rsp, -32`, merges of different depths) nothing is claimed.
// Callers through pointers or other modules are not seen.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "common/result.h"
#include "elf/cfi.h"
#include "jit/cfg.h"

namespace dyni::jit {

// Where the return address is when the function starts: [rsp + depth], or
// [rbp + rbp]. A function entered by a call has it at [rsp]; a fragment split
// out of another function (gcc's .cold parts) starts inside that function's
// frame, as its CFI says.
struct EntryFrame {
  std::optional<int64_t> depth = 0;
  std::optional<int64_t> rbp;
};

// The entry frame CFI describes (CFA = rsp/rbp + offset; the return address
// at its rule's offset from the CFA, -8 when it has none).
EntryFrame entry_frame(const elf::CfiState& at_entry);

// True when `cfg` reads, writes or takes the address of its return address.
bool uses_return_address(const FunctionCfg& cfg, const EntryFrame& entry = {});

// Functions of the module's imports that find their caller's module by the
// return address (glibc's dlopen and dlsym: from a copy in anonymous memory
// dlsym(RTLD_NEXT) finds none), as the module reaches them: its PLT stubs
// and GOT slots (link-time; elf/got_slots.h names them, bound or not).
// `plt_functions` sends a call through the module's own PLT to the function
// its slot names, so that a wrapper called that way is analysed too.
struct CallerLookups {
  std::set<uint64_t> stubs, slots;
  std::map<uint64_t, uint64_t> plt_functions;
};

// The answer for every function of a module, memoised. A function that
// tail-jumps to a user passes it its own return address: it is a user too.
// A call or jump to a caller lookup (its stub, or through its slot) counts
// as a use.
class ReturnAddressUsers {
 public:
  // The CFG of the function starting at an address, alive while this object
  // is, and its entry frame; no CFG when it cannot be analysed (such a
  // function is taken not to use it).
  struct Analysed {
    const FunctionCfg* cfg = nullptr;
    EntryFrame entry;
  };
  using Analyse = std::function<Analysed(uint64_t)>;
  explicit ReturnAddressUsers(Analyse analyse, CallerLookups lookups = {})
      : analyse_(std::move(analyse)), lookups_(std::move(lookups)) {}

  bool uses(uint64_t function);
  // Whether a call or jump through GOT slot `slot` reaches a caller lookup.
  bool through_slot(uint64_t slot) const { return lookups_.slots.count(slot) > 0; }

 private:
  bool uses(const Analysed& function);

  enum class State { Working, No, Yes };  // Working: on the current tail-call path
  Analyse analyse_;
  CallerLookups lookups_;
  std::map<uint64_t, State> known_;
};

// Fails when `cfg` directly calls a function that uses its return address,
// or calls one through a GOT slot: "calls a user of its return address at
// 0x…" (the call).
Status check_callees(const FunctionCfg& cfg, ReturnAddressUsers& users);

}  // namespace dyni::jit
