// Small string helpers shared by the in-tree parser plugins: tag matching with partial-tag hold-back.
#pragma once

#include <initializer_list>
#include <string_view>

namespace parser_support {

/** How the text at some position relates to a tag. */
enum class Match { kNo, kPartial, kFull };

/** kFull when `s` starts with `tag`; kPartial when `s` is a proper prefix of `tag` (more input needed). */
inline Match match_at(std::string_view s, std::string_view tag) {
  if (s.size() >= tag.size()) return s.substr(0, tag.size()) == tag ? Match::kFull : Match::kNo;
  return tag.substr(0, s.size()) == s ? Match::kPartial : Match::kNo;
}

/** Earliest position >= from where one of `tags` starts, fully or as a partial tag at the very end. */
inline size_t find_tag(std::string_view s, size_t from, std::initializer_list<std::string_view> tags,
                       std::string_view* which, bool* partial) {
  for (size_t i = s.find('<', from); i != std::string_view::npos; i = s.find('<', i + 1)) {
    for (std::string_view t : tags) {
      Match m = match_at(s.substr(i), t);
      if (m == Match::kNo) continue;
      *which = t;
      *partial = m == Match::kPartial;
      return i;
    }
  }
  return std::string_view::npos;
}

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/**
 * Whitespace that may be held back (dropped before a tag, trimmed off reasoning) is at most this
 * long: a model stuck emitting newlines must not make every feed rescan an ever longer run. Beyond
 * it, older whitespace is emitted as text. The rule depends only on the text, never on chunking.
 */
constexpr size_t kMaxHeldSpace = 64;

/** Length of the run of whitespace at the end of `s`, at most `cap`. */
inline size_t trailing_space(std::string_view s, size_t cap = kMaxHeldSpace) {
  size_t n = 0;
  while (n < s.size() && n < cap && is_space(s[s.size() - 1 - n])) ++n;
  return n;
}

}  // namespace parser_support
