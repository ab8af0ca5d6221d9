// Seeded generator of OpenAI chat-completions requests covering what chat templates branch on:
// system prompt or not, multi-turn, tools declared, assistant tool calls (arguments as objects and
// as JSON strings; content "" or null), consecutive tool results, content-part lists, reasoning content (field and inline <think>),
// enable_thinking via chat_template_kwargs, add_generation_prompt, unusual characters.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln::test {

std::vector<nlohmann::ordered_json> make_chat_corpus(uint32_t seed, int count);

/** The keyword arguments transformers' apply_chat_template passes to the template for `request`,
 *  with tokenizer_config.json's special tokens (vLLM's argument parsing included). */
nlohmann::ordered_json hf_context(const nlohmann::ordered_json& request, const nlohmann::ordered_json& tokenizer_config);

/** Python Jinja2 as transformers configures it (tools/oracle/render_template.py, one process for
 *  all): each case {"template", "context"} → {"ok": true, "out"} or {"ok": false, "type", "error"};
 *  null when the oracle could not run. */
nlohmann::ordered_json render_with_jinja2(const nlohmann::ordered_json& cases);

}  // namespace kiln::test
