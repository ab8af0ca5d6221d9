#include "parse/pipeline.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace kiln::parse {

const Component& find_parser(const PluginRegistry& registry, kiln_component_kind kind, std::string_view name) {
  if (const Component* c = registry.find(kind, name)) return *c;
  auto names = registry.names(kind);
  throw_error("[parse] no {} named '{}'; registered: {}", component_kind_name(kind), name,
              names.empty() ? std::string("none (is the plugin folder on the search path?)")
                            : fmt::format("{}", fmt::join(names, ", ")));
}

ParserPipeline::ParserPipeline(const Component* reasoning, const Component* tools, const ParserRequest& request) {
  if (reasoning) reasoning_ = std::make_unique<ParserInstance>(*reasoning, request);
  if (tools) tools_ = std::make_unique<ParserInstance>(*tools, request);
}

void ParserPipeline::route(std::vector<ParseEvent>& events, std::vector<ParseEvent>& out) {
  // Reasoning passes through; content goes on to the tool parser, in order.
  for (auto& e : events) {
    if (e.kind == KILN_EVENT_CONTENT && tools_)
      tools_->feed(e.text, out);
    else
      out.push_back(std::move(e));
  }
  events.clear();
}

void ParserPipeline::feed(std::string_view delta, std::vector<ParseEvent>& out) {
  if (!reasoning_) {
    if (tools_) {
      tools_->feed(delta, out);
    } else if (!delta.empty()) {
      out.push_back(ParseEvent{KILN_EVENT_CONTENT, 0, std::string(delta), {}, {}});
    }
    return;
  }
  reasoning_->feed(delta, scratch_);
  route(scratch_, out);
}

void ParserPipeline::finish(std::vector<ParseEvent>& out) {
  if (reasoning_) {
    reasoning_->finish(scratch_);
    route(scratch_, out);
  }
  if (tools_) tools_->finish(out);
}

AssistantMessage parse_message(ParserPipeline& pipeline, std::string_view text, CallIds ids) {
  std::vector<ParseEvent> events;
  pipeline.feed(text, events);
  pipeline.finish(events);
  EventMapper mapper(std::move(ids));
  for (const auto& e : events) mapper.on_event(e);
  return mapper.message();
}

}  // namespace kiln::parse
