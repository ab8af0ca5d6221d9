// Grammars for forced tool calls (tool_choice "required" or a named function, strict tools), in
// the model's own call syntax so that its tool-call parser reads them as usual:
//   qwen3_coder  <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>
//                string values are raw text, other values JSON (the parser types them by the schema)
//   gemma4       <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3,obj:{"a":1}}<tool_call|>
//                string values in <|"|> quotes, other values JSON (which the parser reads)
// Parameters come in the order the schema declares them; required ones always, optional ones may
// be left out; no parameter the schema does not declare.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

enum class ToolSyntax { qwen3_coder, gemma4 };

/** The syntax a tool-call parser reads, by the parser's name; nullopt when kiln has none for it. */
std::optional<ToolSyntax> tool_syntax(std::string_view parser_name);

/** Every text the syntax's parser reads as the start of a call: "<tool_call>" and a bare
 *  "<function=" (qwen3_coder); "<|tool_call" (gemma4, its drifted "<|tool_call|>" too). Text
 *  outside a constrained call must contain none of them. */
std::vector<std::string> tool_call_openers(ToolSyntax syntax);

struct ToolSpec {
  std::string name;
  std::string parameters;  ///< JSON Schema text of the arguments ("" or "{}": no parameters)
};

struct ToolCallOptions {
  ToolSyntax syntax = ToolSyntax::qwen3_coder;
  bool parallel = true;    ///< one or more calls (parallel_tool_calls), else exactly one
  int max_whitespace = 0;  ///< inside JSON values
};

/** Adds the rules of one or more calls of `tools` to `g`; returns the reference. GrammarError
 *  (where = "tools[i].function.parameters…") for a schema kiln cannot constrain. */
Element add_tool_calls(Grammar& g, const std::vector<ToolSpec>& tools, const ToolCallOptions& opts);

}  // namespace kiln::grammar
