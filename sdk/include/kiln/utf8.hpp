/**
 * @file utf8.hpp
 * @brief UTF-8 validation and encoding, header-only: the one validator and the one encoder that
 *        plugins and the host both use.
 *
 * Well-formed means Unicode's Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF,
 * no truncated sequence at the end.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kiln::utf8 {

/**
 * What a lead byte starts: `need` continuation bytes follow, the first of them in [lo, hi] (the
 * ranges that exclude overlongs, surrogates and > U+10FFFF), the rest in [0x80, 0xBF].
 * `need` is 0 for ASCII and -1 for a byte that cannot start a sequence.
 */
struct Lead {
  int need;
  unsigned char lo, hi;
};

/** The Table 3-7 row of lead byte `b`. */
inline constexpr Lead lead(unsigned char b) noexcept {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

/** Byte offset of the first ill-formed sequence in `s`, or std::string_view::npos when it is well-formed. */
inline std::size_t first_invalid(std::string_view s) noexcept {
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const Lead l = lead(b);
    if (l.need < 0 || i + static_cast<std::size_t>(l.need) >= n) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < l.lo || c1 > l.hi) return i;
    for (int k = 2; k <= l.need; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if (c < 0x80 || c > 0xBF) return i;
    }
    i += 1 + static_cast<std::size_t>(l.need);
  }
  return std::string_view::npos;
}

/** True when `s` is well-formed UTF-8. */
inline bool is_valid(std::string_view s) noexcept {
  return first_invalid(s) == std::string_view::npos;
}

/**
 * Appends the UTF-8 encoding of `cp`. Meant for scalar values; a surrogate still gets the three-byte
 * form and a value above U+10FFFF the four-byte form of its low 21 bits (neither is well-formed).
 */
inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | ((cp >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kiln::utf8
