// Request bodies as the client wrote them: JSON objects keep their key order (tool schemas, tool
// call arguments, chat_template_kwargs and structured-output schemas reach templates, grammars and
// the client again in that order, as Python's dicts keep it for transformers, vLLM and SGLang).
// Include it only from .cpp files (it includes nlohmann/json).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kiln {

/** JSON whose objects keep insertion order (lookups are linear: fine for a request's known fields). */
using OrderedJson = nlohmann::ordered_json;

/**
 * Parses JSON text in time linear in its size (nlohmann's own ordered parse searches each object's
 * keys on every insert: quadratic in an object's key count). A repeated key keeps its first
 * position and takes the last value, as Python's json.loads does. Throws nlohmann::json::exception
 * (parse_error with the byte offset) on bad text, and parse_error for text nesting deeper than
 * `max_depth` arrays and objects (copying, printing and freeing JSON recurse once per level).
 */
OrderedJson parse_ordered_json(std::string_view text, size_t max_depth = 256);

/** Whether a parse_ordered_json error is the depth limit (not bad text). */
bool nests_too_deep(const nlohmann::json::exception& e);

/** Appends a member to an object without looking for the key (the caller knows it is new). */
void append_member(OrderedJson& object, std::string key, OrderedJson value);

}  // namespace kiln
