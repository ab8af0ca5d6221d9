// The qwen3_coder plugin: the Qwen3-Coder XML tool-call parser and the Qwen3 `<think>` reasoning parser.
#include <kiln/plugin.hpp>

#include "qwen3_coder_tool_parser.hpp"
#include "qwen3_reasoning_parser.hpp"

KILN_PLUGIN(qwen3_coder, "0.1.0",
            kiln::tool_parser<qwen3_coder::ToolParser>(
                "qwen3_coder", "Qwen3-Coder/Qwen3.5 XML tool calls (<function=...><parameter=...>), schema-typed"),
            kiln::reasoning_parser<qwen3_coder::ReasoningParser>(
                "qwen3", "Qwen3/Qwen3.5 <think>...</think> (thinking on by default, prompt may open <think>)"))
