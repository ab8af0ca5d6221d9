#include "harness.hpp"

#include <fmt/format.h>

#include <stdexcept>

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_coder(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_third_party_parser(uint32_t, uint32_t);

namespace kiln::test {

const PluginRegistry& parser_registry() {
  static const PluginRegistry registry = [] {
    PluginRegistry r;
    r.register_static(&kiln_plugin_descriptor_qwen3_coder, "<static qwen3_coder>");
    r.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
    r.register_static(&kiln_plugin_descriptor_third_party_parser, "<static third_party_parser>");
    return r;
  }();
  return registry;
}

const Component& tool_parser(std::string_view name) {
  const Component* c = parser_registry().find(KILN_COMPONENT_TOOL_PARSER, name);
  if (!c) throw std::runtime_error(fmt::format("tool parser '{}' is not registered", name));
  return *c;
}

const Component& reasoning_parser(std::string_view name) {
  const Component* c = parser_registry().find(KILN_COMPONENT_REASONING_PARSER, name);
  if (!c) throw std::runtime_error(fmt::format("reasoning parser '{}' is not registered", name));
  return *c;
}

std::vector<ParseEvent> run_pieces(const Component& c, const ParserRequest& request,
                                   const std::vector<std::string_view>& pieces, bool finish) {
  ParserInstance p(c, request);
  std::vector<ParseEvent> events;
  for (auto piece : pieces) p.feed(piece, events);
  if (finish) p.finish(events);
  return events;
}

std::vector<ParseEvent> run_once(const Component& c, const ParserRequest& request, std::string_view text) {
  return run_pieces(c, request, {text});
}

std::vector<std::string_view> split_at(std::string_view text, const std::vector<size_t>& cuts) {
  std::vector<std::string_view> out;
  size_t prev = 0;
  for (size_t cut : cuts) {
    out.push_back(text.substr(prev, cut - prev));
    prev = cut;
  }
  out.push_back(text.substr(prev));
  return out;
}

std::vector<ParseEvent> coalesce(std::vector<ParseEvent> events) {
  std::vector<ParseEvent> out;
  for (auto& e : events) {
    if (e.kind != KILN_EVENT_TOOL_CALL_START && e.text.empty()) continue;
    if (!out.empty() && e.kind != KILN_EVENT_TOOL_CALL_START && out.back().kind == e.kind &&
        out.back().tool_index == e.tool_index) {
      out.back().text += e.text;
      continue;
    }
    out.push_back(std::move(e));
  }
  return out;
}

bool is_prefix_stream(const std::vector<ParseEvent>& partial, const std::vector<ParseEvent>& full) {
  if (partial.size() > full.size()) return false;
  for (size_t i = 0; i < partial.size(); ++i) {
    const ParseEvent &a = partial[i], &b = full[i];
    if (a.kind != b.kind || a.tool_index != b.tool_index || a.id != b.id || a.name != b.name) return false;
    bool last = i + 1 == partial.size();
    if (last ? b.text.compare(0, a.text.size(), a.text) != 0 : a.text != b.text) return false;
  }
  return true;
}

parse::AssistantMessage to_message(const std::vector<ParseEvent>& events) {
  parse::EventMapper mapper(parse::CallIds(1));
  for (const auto& e : events) mapper.on_event(e);
  return mapper.message();
}

std::string describe(const std::vector<ParseEvent>& events) {
  static const char* kinds[] = {"?", "content", "reasoning", "start", "args"};
  std::string s;
  for (const auto& e : events) {
    s += fmt::format("  {}[{}] ", kinds[e.kind <= 4 ? e.kind : 0], e.tool_index);
    if (e.kind == KILN_EVENT_TOOL_CALL_START) s += fmt::format("id='{}' name='{}'", e.id, e.name);
    s += fmt::format("'{}'\n", e.text);
  }
  return s;
}

}  // namespace kiln::test
