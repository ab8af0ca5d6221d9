// The gemma4 plugin. Today: Gemma 4's reasoning and tool-call parsers. The Gemma 4 model (a
// kiln::model<...> component) is to be added here too: add its sources to CMakeLists.txt and one
// more entry to this list.
#include <kiln/plugin.hpp>

#include "gemma4_reasoning.hpp"
#include "gemma4_tool_calls.hpp"

KILN_PLUGIN(gemma4, "0.1.0",
            kiln::reasoning_parser<gemma4::ReasoningParser>(
                "gemma4", "Gemma 4 <|channel>thought ...<channel|> reasoning"),
            kiln::tool_parser<gemma4::ToolParser>(
                "gemma4", "Gemma 4 <|tool_call>call:NAME{...}<tool_call|> calls, schema-typed"))
