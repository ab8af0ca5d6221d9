#include "tool_cases.hpp"

namespace kiln::test {

// Covers every typing rule: strings, integers, numbers, booleans, nullable unions (anyOf and type
// lists), integer enums, objects, arrays and nested object schemas.
const char* const kTestTools = R"([
 {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
   "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}},
   "required": ["city"]}}},
 {"type": "function", "function": {"name": "set_temp", "parameters": {"type": "object", "properties": {
   "value": {"type": "number"}, "enabled": {"type": "boolean"},
   "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
   "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}]},
   "level": {"type": ["integer", "null"]}, "mode": {"enum": [1, 2, 3]}}}}},
 {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
   "path": {"type": "string"}, "content": {"type": "string"}, "options": {"type": "object"},
   "tags": {"type": "array", "items": {"type": "string"}}}}}},
 {"type": "function", "function": {"name": "nested", "parameters": {"type": "object", "properties": {
   "opts": {"type": "object", "properties": {"metric": {"type": "boolean"}, "depth": {"type": "integer"},
            "label": {"type": "string"}}},
   "points": {"type": "array", "items": {"type": "number"}}}}}}
])";

}  // namespace kiln::test
