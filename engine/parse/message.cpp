#include "parse/message.hpp"

#include <kiln/json_escape.hpp>
#include <kiln/utf8.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kiln::parse {

using OJson = nlohmann::ordered_json;

namespace {

/**
 * Appends `s` as a JSON string. Deltas are written by hand (one per generated token, so this is the
 * hot path) with the SDK's escaper, the one the parser plugins write arguments with; text that is
 * not valid UTF-8 goes through nlohmann's U+FFFD replacement instead.
 */
void append_string(std::string& out, std::string_view s) {
  if (!utf8::is_valid(s)) {
    out += OJson(std::string(s)).dump(-1, ' ', false, OJson::error_handler_t::replace);
    return;
  }
  append_json_string(out, s);
}

}  // namespace

std::string delta_json(const Delta& d) {
  std::string out;
  out.reserve(d.text.size() + d.id.size() + d.name.size() + 96);
  switch (d.kind) {
    case Delta::Kind::content:
    case Delta::Kind::reasoning:
      out += d.kind == Delta::Kind::content ? "{\"content\":" : "{\"reasoning_content\":";
      append_string(out, d.text);
      out += "}";
      break;
    case Delta::Kind::call_start:
      out += "{\"tool_calls\":[{\"index\":" + std::to_string(d.call) + ",\"id\":";
      append_string(out, d.id);
      out += ",\"type\":\"function\",\"function\":{\"name\":";
      append_string(out, d.name);
      out += ",\"arguments\":\"\"}}]}";
      break;
    case Delta::Kind::call_arguments:
      out += "{\"tool_calls\":[{\"index\":" + std::to_string(d.call) + ",\"function\":{\"arguments\":";
      append_string(out, d.text);
      out += "}}]}";
      break;
  }
  return out;
}

void apply_delta(const Delta& d, AssistantMessage& m) {
  switch (d.kind) {
    case Delta::Kind::content:
      m.content += d.text;
      return;
    case Delta::Kind::reasoning:
      m.reasoning_content += d.text;
      return;
    case Delta::Kind::call_start:
      if (d.call != m.tool_calls.size())
        throw_error("[parse] tool call {} started but {} calls exist", d.call, m.tool_calls.size());
      m.tool_calls.push_back({d.id, d.name, ""});
      return;
    case Delta::Kind::call_arguments:
      if (d.call >= m.tool_calls.size()) throw_error("[parse] arguments for tool call {} before its start", d.call);
      m.tool_calls[d.call].arguments += d.text;
      return;
  }
}

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
