// Shared helpers for the parser tests: a registry holding the statically linked parser plugins,
// running a parser over a split input, and comparing event streams.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "parse/event_mapper.hpp"
#include "plugin/parser_host.hpp"
#include "plugin/registry.hpp"

namespace kiln::test {

/** qwen3_coder, gemma4 and third_party_parser (the example), registered without dlopen. */
const PluginRegistry& parser_registry();
const Component& tool_parser(std::string_view name);
const Component& reasoning_parser(std::string_view name);

/** Feeds `pieces` one by one, then finish(); returns every event. */
std::vector<ParseEvent> run_pieces(const Component& c, const ParserRequest& request,
                                   const std::vector<std::string_view>& pieces, bool finish = true);
std::vector<ParseEvent> run_once(const Component& c, const ParserRequest& request, std::string_view text);
/** Cuts `text` at the given sorted positions. */
std::vector<std::string_view> split_at(std::string_view text, const std::vector<size_t>& cuts);
/** Merges adjacent text events of the same kind and call index (chunking may only change these). */
std::vector<ParseEvent> coalesce(std::vector<ParseEvent> events);
/** True when `partial` (coalesced) can still grow into `full` (coalesced): nothing is retracted. */
bool is_prefix_stream(const std::vector<ParseEvent>& partial, const std::vector<ParseEvent>& full);
/** The message the events describe (ids from a fixed seed). */
parse::AssistantMessage to_message(const std::vector<ParseEvent>& events);
/** Human-readable dump for failure messages. */
std::string describe(const std::vector<ParseEvent>& events);

}  // namespace kiln::test
