// Unicode properties the tokenizer needs, from ICU (Debian libicu-dev): general category for the
// pre-tokenizer's \p{L} / \p{N}, White_Space for \s, and NFC. ICU is used rather than generated
// tables because it is already a Debian package and it is the same Unicode data node's regexes use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text::uni {

enum Class : std::uint8_t {
  kOther = 0,
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // \s as Oniguruma (Hugging Face tokenizers' regex engine) defines it: White_Space
};

/** Class of a code point; ASCII from a table, the rest from ICU. */
Class classify_slow(char32_t cp);
extern const std::uint8_t kAsciiClass[128];
inline Class classify(char32_t cp) { return cp < 128 ? static_cast<Class>(kAsciiClass[cp]) : classify_slow(cp); }

/** Unicode White_Space (Rust char::is_whitespace), used by added tokens' lstrip/rstrip. */
inline bool is_whitespace(char32_t cp) { return classify(cp) == kSpace; }
/** Alphanumeric or '_' (Hugging Face's word character for added tokens' single_word). */
bool is_word_char(char32_t cp);

/** Simple lowercase of one code point (for the regex's case-insensitive contractions). */
char32_t fold(char32_t cp);

/**
 * NFC of valid UTF-8. Fast path: text with no byte >= 0xCC (every code point below U+0300, where no
 * character decomposes or combines) is returned unchanged without touching ICU.
 */
void nfc(std::string_view in, std::string& out);
bool maybe_needs_nfc(std::string_view s);

}  // namespace kiln::text::uni
