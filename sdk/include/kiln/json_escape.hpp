/**
 * @file json_escape.hpp
 * @brief Writing text as a JSON string, header-only: the one escaper that plugins and the host both
 *        use, so tool-call arguments and streaming deltas escape the same bytes the same way.
 *
 * Only what JSON requires is escaped, spelled as nlohmann::json::dump() and Python's
 * `json.dumps(ensure_ascii=False)` spell it: `\"`, `\\`, `\b` `\f` `\n` `\r` `\t`, and the other
 * controls below 0x20 as `\u00XX` with lower-case hex. Every other byte (0x7F and bytes >= 0x80
 * included) passes through unchanged, so text escaped in pieces gives the same bytes as the whole
 * (a UTF-8 character split across two pieces stays intact) and valid UTF-8 stays valid UTF-8.
 */
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

/** True for the bytes a JSON string cannot hold as they are: '"', '\\' and the controls below 0x20. */
inline constexpr bool json_needs_escape(unsigned char c) noexcept {
  return c < 0x20 || c == '"' || c == '\\';
}

/** Appends the escape of one byte for which json_needs_escape() is true. */
inline void append_json_escape(std::string& out, unsigned char c) {
  switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

/** Appends the escaped body of a JSON string (no quotes). */
inline void append_json_escaped(std::string& out, std::string_view s) {
  std::size_t run = 0;  // start of the bytes not yet copied: unescaped runs are copied in one go
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (!json_needs_escape(c)) continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    append_json_escape(out, c);
  }
  out.append(s.data() + run, s.size() - run);
}

/** Appends `s` as a JSON string literal, quotes included. */
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

}  // namespace kiln
