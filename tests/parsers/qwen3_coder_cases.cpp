// Vectors for the qwen3_coder tool parser (models/qwen3_5.md §7, serving-hazards.md lesson (c)).
#include "tool_cases.hpp"

namespace kiln::test {
namespace {

std::string call(const std::string& fn, const std::string& params) {
  return "<tool_call>\n<function=" + fn + ">\n" + params + "</function>\n</tool_call>";
}
std::string param(const std::string& key, const std::string& value) {
  return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
}

}  // namespace

ToolSuite qwen3_coder_suite() {
  ToolSuite s;
  s.parser = "qwen3_coder";
  s.default_tools = kTestTools;
  auto& c = s.cases;
  c.push_back({"plain_text", "Hello, world!\nNo tools here.", "Hello, world!\nNo tools here.", {}});
  c.push_back({"one_call", call("get_weather", param("city", "Paris") + param("days", "2")), "",
               {{"get_weather", R"({"city": "Paris", "days": 2})"}}});
  c.push_back({"content_then_call", "Let me check.\n\n" + call("get_weather", param("city", "Paris")),
               "Let me check.", {{"get_weather", R"({"city": "Paris"})"}}});
  c.push_back({"two_calls_same_function",
               call("get_weather", param("city", "Paris")) + "\n" + call("get_weather", param("city", "Rome")), "",
               {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city": "Rome"})"}}});
  c.push_back({"text_after_call", call("get_weather", param("city", "Oslo")) + "\nDone.", "\nDone.",
               {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"trailing_whitespace_after_calls", call("get_weather", param("city", "Oslo")) + "\n\n", "",
               {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"typed_scalars",
               call("set_temp", param("value", "22.5") + param("enabled", "True") + param("note", "None") +
                                    param("ratio", "0.5") + param("level", "None") + param("mode", "2")),
               "",
               {{"set_temp", R"({"value": 22.5, "enabled": true, "note": null, "ratio": 0.5, "level": null, "mode": 2})"}}});
  c.push_back({"booleans_any_case", call("set_temp", param("enabled", "False")) + call("set_temp", param("enabled", "true")),
               "", {{"set_temp", R"({"enabled": false})"}, {"set_temp", R"({"enabled": true})"}}});
  c.push_back({"string_stays_string", call("get_weather", param("city", "123") + param("unit", "null")), "",
               {{"get_weather", R"({"city": "123", "unit": "null"})"}}});
  c.push_back({"numbers_normalised",
               call("set_temp", param("value", "1e-05")) + call("set_temp", param("value", ".5")) +
                   call("get_weather", param("days", "3.0")) + call("get_weather", param("days", "three")),
               "",
               {{"set_temp", R"({"value": 1e-05})"},
                {"set_temp", R"({"value": 0.5})"},
                {"get_weather", R"({"days": 3})"},
                {"get_weather", R"({"days": "three"})"}}});
  c.push_back({"infinite_number_stays_text", call("set_temp", param("value", "1e999")) + call("other", param("v", "1e999")), "",
               {{"set_temp", R"({"value": "1e999"})"}, {"other", R"({"v": "1e999"})"}}});
  c.push_back({"python_dict_and_json_list",
               call("write_file", param("options", "{'a': 1, 'b': True, 'c': None, 'd': 'x'}") +
                                      param("tags", "[\"x\", \"y\"]")),
               "", {{"write_file", R"({"options": {"a": 1, "b": true, "c": null, "d": "x"}, "tags": ["x", "y"]})"}}});
  c.push_back({"object_not_parsable_kept_as_string", call("write_file", param("options", "{oops")), "",
               {{"write_file", R"({"options": "{oops"})"}}});
  c.push_back({"literal_parameter_close_in_value",
               call("write_file", param("path", "a.md") + param("content", "Docs:\n</parameter>\nnot the end")), "",
               {{"write_file", R"({"path": "a.md", "content": "Docs:\n</parameter>\nnot the end"})"}}});
  c.push_back({"nested_call_example_in_value",
               call("write_file", param("content", "Example:\n" + call("foo", param("x", "1")) + "\nEnd")), "",
               {{"write_file",
                 R"({"content": "Example:\n<tool_call>\n<function=foo>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>\nEnd"})"}}});
  c.push_back({"missing_parameter_close",
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n3\n</function>\n</tool_call>",
               "", {{"get_weather", R"({"city": "Paris", "days": 3})"}}});
  c.push_back({"missing_tool_call_close",
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>", "",
               {{"get_weather", R"({"city": "Paris"})"}}});
  c.push_back({"truncated_in_value", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "",
               {{"get_weather", R"({"city": "Par"})"}}});
  c.push_back({"truncated_in_typed_value", "<tool_call>\n<function=get_weather>\n<parameter=days>\n1", "",
               {{"get_weather", R"({"days": 1})"}}});
  c.push_back({"empty_parameter_list", call("list_files", ""), "", {{"list_files", "{}"}}});
  c.push_back({"cjk_and_escapes", call("write_file", param("content", "東京 \"q\" \\ \ttab")), "",
               {{"write_file", R"({"content": "東京 \"q\" \\ \ttab"})"}}});
  c.push_back({"unknown_function_keeps_strings", call("unknown_fn", param("n", "5")), "",
               {{"unknown_fn", R"({"n": "5"})"}}});
  c.push_back({"unknown_parameter_keeps_string", call("get_weather", param("foo", "7") + param("days", "3")), "",
               {{"get_weather", R"({"foo": "7", "days": 3})"}}});
  c.push_back({"newlines_stripped_once", call("write_file", param("content", "\nx\n")), "",
               {{"write_file", R"({"content": "\nx\n"})"}}});
  c.push_back({"bare_function_without_tool_call",
               "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>", "",
               {{"get_weather", R"({"city": "Rome"})"}}});
  // Malformed: degrade to content with the raw text.
  c.push_back({"hermes_json_is_content", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
               "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", {}});
  c.push_back({"template_junk_name_is_content", "<tool_call>\n<function={{ tc.name }}>\n</function>\n</tool_call>",
               "<tool_call>\n<function={{ tc.name }}>\n</function>\n</tool_call>", {}});
  c.push_back({"tag_mentioned_in_text", "Use the <tool_call> tag, or <function= x.", "Use the <tool_call> tag, or <function= x.", {}});
  c.push_back({"truncated_header_is_content", "Sure.\n<tool_call>\n<function=get_wea", "Sure.\n<tool_call>\n<function=get_wea", {}});
  c.push_back({"angle_brackets_in_text", "a < b && c <d <", "a < b && c <d <", {}});
  c.push_back({"junk_between_parameters",
               "<tool_call>\n<function=get_weather>\nnoise\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
               "", {{"get_weather", R"({"city": "Paris"})"}}});
  // `</parameter>` followed by text (not a tag) is part of the value: values may contain the literal tag.
  c.push_back({"text_after_parameter_close_stays_in_value",
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\nmore\n</function>\n</tool_call>", "",
               {{"get_weather", R"({"city": "Paris\n</parameter>\nmore"})"}}});
  // Whitespace held back before / after calls is bounded (64 bytes) so a newline loop stays linear.
  c.push_back({"long_whitespace_before_call", "Hi" + std::string(100, '\n') + call("get_weather", param("city", "Oslo")),
               "Hi" + std::string(36, '\n'), {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"long_whitespace_after_call_is_text", call("get_weather", param("city", "Oslo")) + std::string(70, ' '),
               std::string(70, ' '), {{"get_weather", R"({"city": "Oslo"})"}}});
  s.fuzz_atoms = {"<tool_call>", "</tool_call>", "<function=get_weather>", "<function=set_temp>", "<function=",
                  ">", "<parameter=city>", "<parameter=days>", "<parameter=value>", "<parameter=options>",
                  "<parameter=", "</parameter>", "</function>", "\n", " ", "Paris", "22.5", "True", "{'a': 1}",
                  "<", "x", "\xc3\xa9", "\"", "\\", "None"};
  return s;
}

}  // namespace kiln::test
