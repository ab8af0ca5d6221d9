// Schema-driven typing of tool-call argument values, and the JSON text writer the parsers emit with
// (strings escaped by kiln/json_escape.hpp, the SDK's one escaper).
//
// The model writes argument values as raw text (`22.5`, `True`, `{'a': 1}`); the request's tools JSON
// schema says what each should become. Everything here returns JSON *text* rather than a json value
// so that numbers keep the model's own spelling when it is valid JSON and strings pass bytes through
// unchanged (a UTF-8 character split across two deltas must escape the same way as in one piece).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace parser_support {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

/** JSON types a schema allows, as a bit set (unions are merged). 0 = unknown: keep the raw string. */
enum Kind : unsigned {
  kString = 1,
  kInteger = 2,
  kNumber = 4,
  kBoolean = 8,
  kNull = 16,
  kObject = 32,
  kArray = 64,
};

struct TypeInfo {
  unsigned kinds = 0;
  const Json* schema = nullptr;  ///< the property's schema (nested properties / items), may be null
  /** Values of this type can be streamed as a JSON string from the first byte. */
  bool plain_string() const { return kinds == 0 || kinds == kString; }
};

/** Flattens `type` (string or list), `anyOf`/`oneOf`/`allOf`, `enum`/`const`, `properties`/`items`. */
TypeInfo resolve_type(const Json* schema);

/** The request's `tools` array, indexed by function name. */
class ToolSchemas {
 public:
  /** Empty text: no tools. Throws kiln::Error (INVALID_ARGUMENT) when the text is not a JSON array. */
  explicit ToolSchemas(std::string_view tools_json);
  /** The `parameters` schema of a declared function, or nullptr when it is not declared. */
  const Json* parameters(std::string_view name) const;
  bool declared(std::string_view name) const { return by_name_.count(std::string(name)) != 0; }
  /** The schema of one parameter (nullptr when unknown). */
  static const Json* property(const Json* parameters, std::string_view key);
  /** The schema of array items (nullptr when unknown). */
  static const Json* items(const Json* schema);

 private:
  Json tools_;
  std::map<std::string, const Json*, std::less<>> by_name_;
};

/** JSON text of a value with Python's json.dumps separators (", " and ": "), insertion order. */
std::string dump(const OrderedJson& v);
/** True when `s` is exactly a JSON number (RFC 8259 grammar). */
bool is_json_number(std::string_view s);
/** Parses a Python literal (dict, list, tuple, str, int, float, True/False/None). */
std::optional<OrderedJson> parse_python_literal(std::string_view s);
/** Trims ASCII whitespace. */
std::string_view trim(std::string_view s);

/**
 * JSON text for the raw value `raw` under `type`. Never fails: text that cannot be coerced to any
 * allowed type is kept as a JSON string (a value is never dropped and a call never lost).
 */
std::string coerce(std::string_view raw, const TypeInfo& type);

}  // namespace parser_support
