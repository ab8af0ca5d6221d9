// JSON Schema "format" values asserted as grammars of the string's characters (the text between
// the quotes, as written inside a JSON string). Follows RFC 3339 (date-time, date, time: month
// lengths, leap years, leap seconds only at 23:59:60 UTC), RFC 4122 (uuid, any version and variant
// digit), RFC 5321 (email: dot-atom or quoted local part, domain or address literal), dotted-quad
// ipv4 (0-255, no leading zeros), RFC 4291 ipv6 text (with an embedded ipv4 tail), RFC 3986 uri
// and uri-reference, and RFC 3339 duration. A format JSON Schema does not define ("path", "url",
// a vendor's own) is an annotation, as the specification says of unknown formats.
#pragma once

#include <string_view>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

/** The content rule for `format`; throws GrammarError naming the format (at `where`) for the
 *  formats not supported. */
Element format_content(Grammar& g, std::string_view format, std::string_view where);

/** Whether JSON Schema (drafts 4 to 2020-12) defines `format`; the others are annotations. */
bool format_defined(std::string_view format);

}  // namespace kiln::grammar
