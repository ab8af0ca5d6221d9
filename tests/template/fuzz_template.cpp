// libFuzzer target: parse + render arbitrary template text against a fixed chat context with
// small limits. Any crash, sanitizer report or leak is a bug; TemplateError is the expected way
// to reject bad input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "template/template.hpp"

namespace {
const char* kContext = R"({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello {{ world }} \u00e9 \ud83d\ude00"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHi", "reasoning_content": "hm",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true], "b": {"c": "d"}}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": 1}"},
    {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
  ],
  "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object",
             "properties": {"a": {"type": "array", "items": {"type": "number"}}, "b": {"type": "object"}}, "required": ["a"]}}}],
  "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>", "documents": null
})";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  kiln::TemplateLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 200'000;
  limits.max_call_depth = 64;
  try {
    kiln::Template t(std::string(reinterpret_cast<const char*>(data), size));
    (void)t.render_json(kContext, limits);
  } catch (const kiln::TemplateError&) {
  }
  return 0;
}
