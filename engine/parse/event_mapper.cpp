#include "parse/event_mapper.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kiln::parse {
namespace {

using OJson = nlohmann::ordered_json;
constexpr int kContent = -2, kReasoning = -1;

/** Length of `s` without an incomplete UTF-8 sequence at its end. */
size_t complete_utf8(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead
    if (c < 0xC0) return n;            // ASCII: nothing pending
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return back < need ? n - back : n;
  }
  return n;
}

}  // namespace

CallIds::CallIds() : rng_(std::random_device{}()) {}

std::string CallIds::next() {
  static const char hex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng_() & 15];
  return id;
}

std::optional<Delta> EventMapper::delta_for(int channel, const std::string& text, bool final) {
  std::string& held = held_[channel];
  held += text;
  size_t n = final ? held.size() : complete_utf8(held);
  if (n == 0) return std::nullopt;
  Delta d;
  d.kind = channel == kContent     ? Delta::Kind::content
           : channel == kReasoning ? Delta::Kind::reasoning
                                   : Delta::Kind::call_arguments;
  if (channel >= 0) d.call = static_cast<uint32_t>(channel);
  d.text = held.substr(0, n);
  held.erase(0, n);
  return d;
}

std::optional<Delta> EventMapper::on_event(const ParseEvent& e) {
  switch (e.kind) {
    case KILN_EVENT_CONTENT:
      message_.content += e.text;
      return delta_for(kContent, e.text, false);
    case KILN_EVENT_REASONING:
      message_.reasoning_content += e.text;
      return delta_for(kReasoning, e.text, false);
    case KILN_EVENT_TOOL_CALL_START: {
      if (e.tool_index != message_.tool_calls.size())
        throw_error("[parse] parser started tool call {} but {} calls exist (indices must be 0, 1, 2, ...)",
                    e.tool_index, message_.tool_calls.size());
      if (e.name.empty()) throw_error("[parse] parser started tool call {} without a function name", e.tool_index);
      ToolCall call{e.id.empty() ? ids_.next() : e.id, e.name, ""};
      Delta d{Delta::Kind::call_start, "", e.tool_index, call.id, call.name};
      message_.tool_calls.push_back(std::move(call));
      return d;
    }
    case KILN_EVENT_TOOL_CALL_ARGS:
      if (e.tool_index >= message_.tool_calls.size())
        throw_error("[parse] parser sent arguments for tool call {} before starting it", e.tool_index);
      message_.tool_calls[e.tool_index].arguments += e.text;
      return delta_for(static_cast<int>(e.tool_index), e.text, false);
  }
  throw_error("[parse] parser sent an event of unknown kind {}", static_cast<int>(e.kind));
}

std::vector<Delta> EventMapper::flush() {
  std::vector<Delta> out;
  for (auto& [channel, held] : held_)
    if (!held.empty())
      if (auto d = delta_for(channel, "", true)) out.push_back(std::move(*d));
  return out;
}

std::vector<std::string> EventMapper::check() const {
  std::vector<std::string> problems;
  for (size_t i = 0; i < message_.tool_calls.size(); ++i) {
    const ToolCall& c = message_.tool_calls[i];
    OJson a = OJson::parse(c.arguments, nullptr, false);
    if (!a.is_object())
      problems.push_back(fmt::format("tool call {} ({}): arguments are not a JSON object: {}", i, c.name, c.arguments));
  }
  return problems;
}

}  // namespace kiln::parse
