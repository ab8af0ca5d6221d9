// Vectors for the gemma4 tool parser (models/gemma4.md §7.3).
#include "tool_cases.hpp"

namespace kiln::test {

ToolSuite gemma4_suite() {
  ToolSuite s;
  s.parser = "gemma4";
  s.default_tools = kTestTools;
  const std::string q = "<|\"|>";
  auto& c = s.cases;
  c.push_back({"plain_text", "The capital of France is Paris.", "The capital of France is Paris.", {}});
  c.push_back({"one_call", "<|tool_call>call:get_weather{city:" + q + "Paris, FR" + q + ",days:3}<tool_call|>", "",
               {{"get_weather", R"({"city": "Paris, FR", "days": 3})"}}});
  c.push_back({"text_then_calls_back_to_back",
               "Checking both.<|tool_call>call:get_weather{city:" + q + "Paris" + q + "}<tool_call|><|tool_call>call:get_weather{city:" +
                   q + "Rome" + q + "}<tool_call|><|tool_response>",
               "Checking both.",
               {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city": "Rome"})"}}});
  c.push_back({"nested_objects_and_arrays",
               "<|tool_call>call:nested{opts:{metric:true,depth:2,label:" + q + "a{b}:c," + q + "},points:[1,2.5,-3]}<tool_call|>",
               "", {{"nested", R"({"opts": {"metric": true, "depth": 2, "label": "a{b}:c,"}, "points": [1, 2.5, -3]})"}}});
  c.push_back({"typed_by_schema",
               "<|tool_call>call:set_temp{value:" + q + "22.5" + q + ",enabled:" + q + "True" + q + ",note:None,mode:" + q + "2" + q +
                   "}<tool_call|>",
               "", {{"set_temp", R"({"value": 22.5, "enabled": true, "note": null, "mode": 2})"}}});
  c.push_back({"bare_number_for_string_field", "<|tool_call>call:get_weather{city:123,days:7}<tool_call|>", "",
               {{"get_weather", R"({"city": "123", "days": 7})"}}});
  c.push_back({"strings_with_quotes_and_newlines",
               "<|tool_call>call:write_file{path:" + q + "a.txt" + q + ",content:" + q + "say \"hi\"\nline2 }" + q + "}<tool_call|>", "",
               {{"write_file", R"({"path": "a.txt", "content": "say \"hi\"\nline2 }"})"}}});
  c.push_back({"missing_opening_string_delimiter", "<|tool_call>call:get_weather{city:Paris" + q + ",days:2}<tool_call|>", "",
               {{"get_weather", R"({"city": "Paris", "days": 2})"}}});
  c.push_back({"json_and_python_strings_in_arrays",
               "<|tool_call>call:write_file{tags:[\"x\",'y'," + q + "z" + q + "]}<tool_call|>", "",
               {{"write_file", R"({"tags": ["x", "y", "z"]})"}}});
  c.push_back({"missing_call_prefix", "<|tool_call>:get_weather{city:" + q + "Oslo" + q + "}<tool_call|>", "",
               {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"drifted_json_form", "<|tool_call|>call:get_weather({\"city\": \"Oslo\", \"days\": 1})<tool_call|>", "",
               {{"get_weather", R"({"city": "Oslo", "days": 1})"}}});
  c.push_back({"missing_closing_brace", "<|tool_call>call:get_weather{city:" + q + "Oslo" + q + "<tool_call|>", "",
               {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"missing_opening_brace", "<|tool_call>call:get_weather city:" + q + "Oslo" + q + "}<tool_call|>", "",
               {{"get_weather", R"({"city": "Oslo"})"}}});
  c.push_back({"unclosed_call_at_end", "<|tool_call>call:get_weather{city:" + q + "Oslo" + q + ",days:4", "",
               {{"get_weather", R"({"city": "Oslo", "days": 4})"}}});
  c.push_back({"no_arguments", "<|tool_call>call:list_files{}<tool_call|>", "", {{"list_files", "{}"}}});
  c.push_back({"unknown_function_infers_literals",
               "<|tool_call>call:other{n:5,f:1.5,b:false,z:null,s:" + q + "5" + q + "}<tool_call|>", "",
               {{"other", R"({"n": 5, "f": 1.5, "b": false, "z": null, "s": "5"})"}}});
  c.push_back({"infinite_numbers_stay_text", "<|tool_call>call:other{a:1e999,b:[1e999]}<tool_call|>", "",
               {{"other", R"({"a": "1e999", "b": ["1e999"]})"}}});
  c.push_back({"cjk", "<|tool_call>call:get_weather{city:" + q + "東京" + q + "}<tool_call|>", "",
               {{"get_weather", R"({"city": "東京"})"}}});
  // Malformed: degrade to content with the raw text.
  c.push_back({"no_name_is_content", "<|tool_call>{city:1}<tool_call|>", "<|tool_call>{city:1}<tool_call|>", {}});
  c.push_back({"unreadable_body_is_content", "<|tool_call>call:get_weather{city:}<tool_call|>",
               "<|tool_call>call:get_weather{city:}<tool_call|>", {}});
  c.push_back({"truncated_opener_is_content", "Done. <|tool_ca", "Done. <|tool_ca", {}});
  s.fuzz_atoms = {"<|tool_call>", "<tool_call|>", "call:", "get_weather", "set_temp", "{", "}", "[", "]", ":",
                  ",", q, "city", "value", "22.5", "True", "x y", "\n", " ", "<", "|", "\xe6\x9d\xb1", "\"", "'", "("};
  return s;
}

}  // namespace kiln::test
