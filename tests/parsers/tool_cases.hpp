// Test vectors for tool-call parsers: the input, the request's tools, and the exact expected message.
#pragma once

#include <string>
#include <vector>

namespace kiln::test {

struct ExpectedCall {
  std::string name;
  std::string arguments;  ///< exact JSON text
};

struct ToolCase {
  std::string name;
  std::string input;
  std::string content;  ///< expected content ("" = none)
  std::vector<ExpectedCall> calls;
};

/** One tool-call parser's conformance vectors. */
struct ToolSuite {
  std::string parser;                  ///< registered tool-parser name
  std::string default_tools;           ///< the request's tools JSON
  std::vector<ToolCase> cases;         ///< well-formed and malformed inputs with expected results
  std::vector<std::string> fuzz_atoms; ///< pieces random inputs are built from (tags, values, noise)
};

ToolSuite qwen3_coder_suite();
ToolSuite gemma4_suite();
ToolSuite markdown_json_suite();

/** Shared tools JSON: get_weather(city: string, days: integer, unit: enum), set_temp(value: number), ... */
extern const char* const kTestTools;

}  // namespace kiln::test
