// Bounds-checked reads from untrusted bytes (ELF files, CFI). Every read says
// whether it fit; nothing here can read outside the buffer (I9).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace dyni::elf {

class ByteReader {
 public:
  // Invariant: pos_ <= bytes_.size(), so `bytes_.size() - pos_` never wraps.
  explicit ByteReader(std::span<const uint8_t> bytes, std::size_t pos = 0)
      : bytes_(bytes), pos_(pos <= bytes.size() ? pos : bytes.size()) {}

  std::size_t pos() const { return pos_; }
  std::size_t size() const { return bytes_.size(); }
  bool seek(std::size_t pos) {
    if (pos > bytes_.size()) return false;
    pos_ = pos;
    return true;
  }
  bool skip(std::size_t n) { return n <= bytes_.size() - pos_ && seek(pos_ + n); }

  template <typename T>
  std::optional<T> read() {
    if (sizeof(T) > bytes_.size() - pos_) return std::nullopt;
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::optional<uint64_t> uleb128() {
    uint64_t result = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      auto byte = read<uint8_t>();
      if (!byte) return std::nullopt;
      result |= static_cast<uint64_t>(*byte & 0x7f) << shift;
      if (!(*byte & 0x80)) return result;
    }
    return std::nullopt;  // longer than 10 bytes: malformed
  }

  std::optional<int64_t> sleb128() {
    int64_t result = 0;
    unsigned shift = 0;
    for (; shift < 64; shift += 7) {
      auto byte = read<uint8_t>();
      if (!byte) return std::nullopt;
      result |= static_cast<int64_t>(static_cast<uint64_t>(*byte & 0x7f) << shift);
      if (!(*byte & 0x80)) {
        shift += 7;
        if (shift < 64 && (*byte & 0x40))  // sign-extend, in unsigned arithmetic (no UB)
          result = static_cast<int64_t>(static_cast<uint64_t>(result) | (~uint64_t{0} << shift));
        return result;
      }
    }
    return std::nullopt;
  }

  // A NUL-terminated string starting at the current position.
  std::optional<std::string> cstring() {
    if (pos_ >= bytes_.size()) return std::nullopt;  // also keeps memchr off a null pointer
    const void* end = std::memchr(bytes_.data() + pos_, 0, bytes_.size() - pos_);
    if (!end) return std::nullopt;
    std::size_t len = static_cast<const uint8_t*>(end) - (bytes_.data() + pos_);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len + 1;
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  std::size_t pos_;
};

}  // namespace dyni::elf
