#include "parse/message.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kiln::parse {

using OJson = nlohmann::ordered_json;

std::string message_json(const AssistantMessage& m, int indent) {
  auto text = [](const std::string& s) { return s.empty() ? OJson(nullptr) : OJson(s); };
  OJson j = OJson::object();
  j["role"] = "assistant";
  j["content"] = text(m.content);
  j["reasoning_content"] = text(m.reasoning_content);
  if (!m.tool_calls.empty()) {
    OJson calls = OJson::array();
    for (const auto& c : m.tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    j["tool_calls"] = std::move(calls);
  }
  // Model output is not guaranteed to be valid UTF-8; invalid bytes become U+FFFD rather than throw.
  return j.dump(indent, ' ', false, OJson::error_handler_t::replace);
}

const char* finish_reason(const AssistantMessage& m, bool length_limited) {
  if (!m.tool_calls.empty()) return "tool_calls";
  return length_limited ? "length" : "stop";
}

void apply_delta(std::string_view delta_json, AssistantMessage& m) {
  OJson d = OJson::parse(delta_json, nullptr, false);
  if (!d.is_object()) throw_error("[parse] a streaming delta must be a JSON object, got: {}", delta_json);
  auto str = [&](const OJson& v, const char* what) -> std::string {
    if (v.is_null()) return {};
    if (!v.is_string()) throw_error("[parse] delta field '{}' must be a string: {}", what, delta_json);
    return v.get<std::string>();
  };
  if (auto it = d.find("content"); it != d.end()) m.content += str(*it, "content");
  if (auto it = d.find("reasoning_content"); it != d.end()) m.reasoning_content += str(*it, "reasoning_content");
  auto calls = d.find("tool_calls");
  if (calls == d.end()) return;
  if (!calls->is_array()) throw_error("[parse] delta tool_calls must be an array: {}", delta_json);
  for (const auto& c : *calls) {
    if (!c.is_object() || !c.contains("index") || !c["index"].is_number_unsigned())
      throw_error("[parse] every tool_calls delta needs an unsigned index: {}", delta_json);
    size_t index = c["index"].get<size_t>();
    if (index > m.tool_calls.size())
      throw_error("[parse] tool call index {} skips {}: {}", index, m.tool_calls.size(), delta_json);
    if (index == m.tool_calls.size()) m.tool_calls.emplace_back();
    ToolCall& call = m.tool_calls[index];
    if (auto id = c.find("id"); id != c.end()) call.id += str(*id, "id");
    if (auto f = c.find("function"); f != c.end() && f->is_object()) {
      if (auto n = f->find("name"); n != f->end()) call.name += str(*n, "function.name");
      if (auto a = f->find("arguments"); a != f->end()) call.arguments += str(*a, "function.arguments");
    }
  }
}

}  // namespace kiln::parse
