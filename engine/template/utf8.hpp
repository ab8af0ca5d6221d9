// UTF-8 helpers for the Jinja engine: Python strings are sequences of code points, so len(),
// indexing, slicing and str methods work on code points while values stay UTF-8 in memory.
#pragma once

#include <cstdint>
#include <kiln/utf8.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tmpl::utf8 {

// The one validator and encoder, shared with the plugins through the SDK.
using kiln::utf8::append;
using kiln::utf8::first_invalid;

/** Decodes one code point at s[i], advancing i. Invalid bytes decode as themselves (never throws). */
char32_t next(std::string_view s, size_t& i);
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

/** Python's str.isspace() on one code point. */
bool is_space(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased(char32_t c);
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
/** Python's str.isprintable() on one code point (approximation: controls, separators, format chars). */
bool is_printable(char32_t c);

}  // namespace kiln::tmpl::utf8
