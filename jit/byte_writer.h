// Appending DWARF-style fields to a byte vector: LEB128 and little-endian
// fixed-size values (the .eh_frame and LSDA writers).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace dyni::jit {

inline void put_uleb(std::vector<uint8_t>& out, uint64_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<uint8_t>(b | (v ? 0x80 : 0)));
  } while (v);
}

inline void put_sleb(std::vector<uint8_t>& out, int64_t v) {
  for (bool more = true; more;) {
    uint8_t b = v & 0x7f;
    v >>= 7;
    more = !((v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40)));
    out.push_back(static_cast<uint8_t>(b | (more ? 0x80 : 0)));
  }
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  std::size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

}  // namespace dyni::jit
