// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100.. in order, so every byte has a visible character in the vocabulary ("Ġ" = space).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace kiln::text::byte_level {

struct Tables {
  std::array<char32_t, 256> to_char{};  // byte → code point
  std::array<std::int16_t, 324> to_byte{};  // code point (< 324) → byte, -1 if none
  Tables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      to_char[static_cast<std::size_t>(b)] = cp;
      to_byte[cp] = static_cast<std::int16_t>(b);
    }
  }
};

inline const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace kiln::text::byte_level
