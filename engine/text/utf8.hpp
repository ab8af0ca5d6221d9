// UTF-8 helpers shared by the tokenizer and the streaming detokenizer. Invalid input is repaired the
// way WHATWG TextDecoder and Rust's String::from_utf8_lossy do it: every maximal invalid subpart
// becomes one U+FFFD, so the tokenizer, the full decode and the streaming decode agree byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <kiln/utf8.hpp>
#include <string>
#include <string_view>

namespace kiln::text::utf8 {

// The one validator and encoder, shared with the plugins through the SDK.
using kiln::utf8::append;
using kiln::utf8::is_valid;

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/** Appends `s` with every maximal invalid subpart replaced by U+FFFD. */
void append_lossy(std::string& out, std::string_view s);

/** Decodes the scalar at s[i] (s must be valid UTF-8); sets `len` to its byte length. */
inline char32_t decode_at(std::string_view s, std::size_t i, std::size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { len = 1; return b0; }
  if (b0 < 0xE0) { len = 2; return (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F); }
  if (b0 < 0xF0) {
    len = 3;
    return (char32_t(b0 & 0x0F) << 12) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3F);
  }
  len = 4;
  return (char32_t(b0 & 0x07) << 18) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 12) |
         (char32_t(static_cast<unsigned char>(s[i + 2]) & 0x3F) << 6) | (static_cast<unsigned char>(s[i + 3]) & 0x3F);
}

/** Byte length of the sequence a valid lead byte starts. */
inline std::size_t seq_len(unsigned char b0) { return b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4; }

/**
 * Incremental lossy decoder: bytes in, complete UTF-8 out. A byte that cannot continue the pending
 * sequence turns the pending bytes into one U+FFFD (maximal subpart) and starts anew, so feeding a
 * byte string in any chunking gives exactly append_lossy() of the whole.
 */
class LossyStream {
 public:
  /** Appends to `out` whatever became decidable after `b`. */
  void push(unsigned char b, std::string& out);
  /** End of input: an unfinished sequence becomes one U+FFFD. */
  void flush(std::string& out);
  bool pending() const { return need_ != 0; }

 private:
  char buf_[4] = {};
  int have_ = 0, need_ = 0;  // bytes buffered, bytes still expected
  unsigned char lo_ = 0x80, hi_ = 0xBF;  // allowed range of the next continuation byte
};

}  // namespace kiln::text::utf8
