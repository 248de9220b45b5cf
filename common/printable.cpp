// UTF-8 validity and escaping of the bytes a message must not print raw.
#include "common/printable.h"

#include <fmt/format.h>

namespace dyni {
namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not one
// (bad lead or continuation byte, overlong form, surrogate, above U+10FFFF).
std::size_t utf8_length(const std::string& s, std::size_t i) {
  auto byte = [&](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  unsigned c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (n == 0 || c > 0xf4) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  unsigned second = byte(i + 1);
  if ((c == 0xe0 && second < 0xa0) || (c == 0xed && second > 0x9f) ||
      (c == 0xf0 && second < 0x90) || (c == 0xf4 && second > 0x8f))
    return 0;
  return n;
}

}  // namespace

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0, n; i < s.size(); i += n)
    if ((n = utf8_length(s, i)) == 0) return false;
  return true;
}

bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

std::string printable(const std::string& s) {
  bool utf8 = valid_utf8(s);
  std::string out;
  for (char c : s) {
    if (is_control(c) || (!utf8 && static_cast<unsigned char>(c) >= 0x80))
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (is_control(c)) c = '?';
  return s;
}

}  // namespace dyni
