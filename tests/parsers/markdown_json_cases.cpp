// Vectors for the example plugin's `markdown_json` tool parser (examples/third_party_parser).
#include "tool_cases.hpp"

namespace kiln::test {

ToolSuite markdown_json_suite() {
  ToolSuite s;
  s.parser = "markdown_json";
  s.default_tools = kTestTools;
  auto& c = s.cases;
  const std::string f = "```json\n", e = "\n```";
  c.push_back({"plain_text", "Just text, with `code` and ``` fences.", "Just text, with `code` and ``` fences.", {}});
  c.push_back({"one_call", f + R"({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})" + e, "",
               {{"get_weather", R"({"city":"Paris","days":2})"}}});
  c.push_back({"text_and_two_calls",
               "Checking.\n" + f + R"({"name": "a", "arguments": {}})" + e + "\n" + f +
                   R"({"name": "b", "parameters": "{\"x\": [1, 2]}"})" + e + "\nDone.",
               "Checking.\n\n\nDone.", {{"a", "{}"}, {"b", R"({"x":[1,2]})"}}});
  c.push_back({"json_that_is_not_a_call_stays_content", "Here:\n" + f + R"({"x": 1})" + e,
               "Here:\n" + f + R"({"x": 1})" + e, {}});
  c.push_back({"invalid_json_stays_content", f + R"({"name": "a", "arguments": {)" + e,
               f + R"({"name": "a", "arguments": {)" + e, {}});
  c.push_back({"fence_not_at_line_start_is_text", "see ```json\n{\"name\": \"a\"}\n```", "see ```json\n{\"name\": \"a\"}\n```", {}});
  c.push_back({"unclosed_block_at_end", f + R"({"name": "a", "arguments": {"k": "v"}})", "", {{"a", R"({"k":"v"})"}}});
  c.push_back({"backticks_inside_strings", f + "{\"name\": \"run\", \"arguments\": {\"cmd\": \"echo ``` hi\"}}" + e, "",
               {{"run", R"({"cmd":"echo ``` hi"})"}}});
  s.fuzz_atoms = {"```json\n", "```", "\n", "{", "}", "\"name\"", ":", "\"a\"", ",", "\"arguments\"", "{}", "x", " ",
                  "`", "json"};
  return s;
}

}  // namespace kiln::test
