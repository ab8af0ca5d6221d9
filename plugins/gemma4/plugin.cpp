// The gemma4 plugin: the Gemma 4 model (gemma4_model.cpp) and its reasoning and tool-call parsers.
#include <kiln/plugin.hpp>

#include "gemma4_model.hpp"
#include "gemma4_reasoning.hpp"
#include "gemma4_tool_calls.hpp"

KILN_PLUGIN(gemma4, "0.2.0", gemma4::model_component(),
            kiln::reasoning_parser<gemma4::ReasoningParser>("gemma4",
                                                            "Gemma 4 <|channel>thought ...<channel|> reasoning"),
            kiln::tool_parser<gemma4::ToolParser>("gemma4",
                                                  "Gemma 4 <|tool_call>call:NAME{...}<tool_call|> calls, schema-typed"))
