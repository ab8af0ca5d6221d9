// A parser pipeline for one request: an optional reasoning parser whose content is fed to an optional
// tool-call parser, as one stream of events.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parse/event_mapper.hpp"
#include "plugin/parser_host.hpp"
#include "plugin/registry.hpp"

namespace kiln::parse {

/** The parser registered under `name`; throws HostError naming the registered ones when unknown. */
const Component& find_parser(const PluginRegistry& registry, kiln_component_kind kind, std::string_view name);

class ParserPipeline {
 public:
  /** Either component may be null (no reasoning split / no tool calls). */
  ParserPipeline(const Component* reasoning, const Component* tools, const ParserRequest& request);

  /** Feeds a delta of model output; appends the resulting events to `out`. */
  void feed(std::string_view delta, std::vector<ParseEvent>& out);
  /** End of stream. */
  void finish(std::vector<ParseEvent>& out);

 private:
  void route(std::vector<ParseEvent>& events, std::vector<ParseEvent>& out);

  std::unique_ptr<ParserInstance> reasoning_, tools_;
  std::vector<ParseEvent> scratch_;
};

/** One-shot parse: feed(text) + finish(), mapped onto a message. */
AssistantMessage parse_message(ParserPipeline& pipeline, std::string_view text, CallIds ids);

}  // namespace kiln::parse
