// A loop left in the original code that calls hot functions three ways:
// directly (call sites dyni re-points at the copies), through a table of
// function pointers, and virtually; and compares function pointers with the
// functions' addresses, which must never change. Each round prints a
// checksum and whether every pointer compared equal.
// usage: target ROUNDS
#include <cstdint>
#include <string>

#include "tests/live/rounds.h"

namespace {

struct Shape {
  virtual uint64_t area(uint64_t x) const = 0;
  virtual ~Shape() = default;
};
struct Square : Shape {
  [[gnu::noinline]] uint64_t area(uint64_t x) const override { return x * x + 1; }
};
struct Triangle : Shape {
  [[gnu::noinline]] uint64_t area(uint64_t x) const override { return (x * (x + 1)) >> 1; }
};

[[gnu::noinline]] uint64_t cs_hash(uint64_t x, uint64_t i) { return (x ^ i) * 0x9e3779b97f4a7c15ULL + (x >> 29); }
[[gnu::noinline]] uint64_t cs_step(uint64_t x) { return x + (x << 3) + 7; }
[[gnu::noinline]] uint64_t cs_twist(uint64_t x) { return (x << 13) | (x >> 51); }

using Op = uint64_t (*)(uint64_t);
const Op kOps[] = {cs_step, cs_twist};  // a table of code addresses (.data.rel.ro in a PIE)
Op volatile g_ops[] = {cs_step, cs_twist};  // the same, writable
uint64_t (*volatile g_hash)(uint64_t, uint64_t) = nullptr;  // &cs_hash, taken before any dyni

// Reads its own return address: the jit copies no direct caller of it, so
// cs_driver stays in the original code.
[[gnu::noinline]] uintptr_t cs_where() { return reinterpret_cast<uintptr_t>(__builtin_return_address(0)); }

[[gnu::noinline]] uint64_t cs_driver(const Shape* const* shapes, uint64_t x) {
  const uint64_t home = cs_where() != 0;
  for (uint64_t i = 0; i < 3000000; ++i) {
    x = cs_hash(x, i);                      // a direct call from code left in the original
    x = kOps[i & 1](x);                     // through a table of function pointers
    x += shapes[i & 1]->area(x & 0xffff);   // a virtual call
  }
  return x + home;
}

// Every pointer to a function still equals its address.
bool pointers_hold() {
  return kOps[0] == &cs_step && kOps[1] == &cs_twist && g_ops[0] == &cs_step && g_ops[1] == &cs_twist &&
         g_hash == &cs_hash;
}

}  // namespace

int main(int argc, char** argv) {
  g_hash = &cs_hash;
  Square square;
  Triangle triangle;
  const Shape* shapes[] = {&square, &triangle};
  return dyni::live::print_rounds(dyni::live::rounds_arg(argc, argv), [&] {
    return std::to_string(cs_driver(shapes, 1)) + (pointers_hold() ? " pointers-hold" : " POINTERS-CHANGED");
  });
}
