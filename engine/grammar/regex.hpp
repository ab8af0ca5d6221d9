// Regular expressions (the ECMA-262 subset JSON Schema patterns and the `regex` request field use)
// compiled into grammar rules over characters.
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H…} and escaped
// metacharacters), classes [a-z] [^…] with \d \w \s \D \W \S inside and out, ., groups ( ),
// (?: ), (?<name> ), alternation |, quantifiers * + ? {n} {n,} {n,m} and their lazy forms (the
// same language), anchors ^ and $ at the ends of the pattern (or of a top-level alternative).
// Refused with a GrammarError naming the construct: backreferences, lookaround, \b \B, flags,
// anchors elsewhere, unicode property escapes.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

/** Sorted, disjoint, inclusive code point ranges. */
using CharRanges = std::vector<std::pair<char32_t, char32_t>>;

/**
 * One character from `ranges` as alternatives of byte sequences. json_string: the character as it
 * is written inside a JSON string literal: '"' and '\' as \" and \\, the controls U+0000–U+001F
 * as \b \f \n \r \t or \u00XX (lowercase hex and uppercase both accepted), everything else as its
 * raw UTF-8 (never \u-escaped, so the text decodes to exactly the characters matched). Otherwise
 * raw UTF-8. Surrogates are never produced.
 */
std::vector<Sequence> char_alternatives(Grammar& g, const CharRanges& ranges, bool json_string);

struct RegexOptions {
  bool json_string = false;  ///< characters written as inside a JSON string (see char_alternatives)
  /** true (JSON Schema "pattern"): the text must contain a match; ^ and $ anchor it. false (the
   *  `regex` request field): the whole text is one match, ^ and $ are allowed and change nothing. */
  bool search = false;
};

/** A rule matching the pattern's language; throws GrammarError("…", "pattern") for what is refused. */
Element compile_regex(Grammar& g, std::string_view pattern, const RegexOptions& opts = {},
                      std::string_view name = "pattern");

}  // namespace kiln::grammar
