// JSON Schema (draft 2020-12, the subset below) to a grammar whose language is exactly the JSON
// texts of the instances the schema accepts (up to whitespace limits).
//
// Supported: type (with unions), enum, const, properties / required / additionalProperties (strict
// mode: false unless given), items / prefixItems, minItems / maxItems, anyOf / oneOf (oneOf as
// anyOf: see docs/structured-outputs.md), allOf where the subschemas merge, $ref / $defs (local
// refs, recursion), pattern, minLength / maxLength, format (date-time, date, time, uuid, email,
// ipv4, ipv6: asserted), minimum / maximum / exclusiveMinimum / exclusiveMaximum, integer vs
// number, true / false schemas. Annotations ($schema, $id, $comment, title, description,
// default, examples, deprecated, readOnly, writeOnly) are ignored. Any other keyword is refused
// with a GrammarError whose where() is the JSON pointer of the keyword.
#pragma once

#include <string_view>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

struct SchemaOptions {
  /** Objects allow no properties beyond `properties` unless additionalProperties says otherwise
   *  (OpenAI strict mode); false: JSON Schema's default (any additional property). */
  bool strict = true;
  /** Whitespace allowed between tokens: up to this many of space, \n, \t, \r per gap (0: none). */
  int max_whitespace = 24;
  /** The text between array items / object members and between a key and its value, before any
   *  whitespace above: "," and ":" (compact), or ", " and ": " (Python's json.dumps, llguidance's
   *  default) with no free whitespace, so that a model cannot spend its tokens on blanks. */
  std::string_view item_separator = ",", key_separator = ":";
  /** Numbers as a generating model should write them: integers without ".0" or exponents, at most
   *  15 digits before and after the point (exact as a double), exponents of at most two
   *  digits (every value reads back as an int64 or a double). false: every JSON spelling of a valid
   *  value that json_number.hpp covers (the test suite's "1.0 is an integer"). */
  bool canonical_numbers = false;
};

/** Root: one JSON value valid under the schema (the JSON text of `schema`). */
Grammar schema_to_grammar(std::string_view schema, const SchemaOptions& opts = {});
/** Root: any JSON object (response_format json_object). */
Grammar json_object_grammar(const SchemaOptions& opts = {});

}  // namespace kiln::grammar

namespace kiln::grammar {

/** Adds the rules of `schema` (JSON text) to `g`; returns a reference to its value rule. Tool-call
 *  grammars embed argument schemas with this. `where` prefixes error locations. */
Element add_schema(Grammar& g, std::string_view schema, const SchemaOptions& opts, std::string_view name,
                   std::string_view where = "");

}  // namespace kiln::grammar
