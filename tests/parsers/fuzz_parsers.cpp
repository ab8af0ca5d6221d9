// libFuzzer target (KILN_FUZZ): arbitrary bytes through every parser, one-shot and split at
// positions taken from the input. Aborts when a parser throws, when splitting changes the events,
// when a prefix's events are not a prefix of the final ones, or when a call's arguments are not one
// JSON object (invalid UTF-8 copied from the input into a string is tolerated).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "harness.hpp"

namespace {

using namespace kiln;

void fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "parser fuzz: %s\ninput: %.*s\n", what, static_cast<int>(input.size()), input.data());
  std::abort();
}

const char* const kTools = R"([{"type":"function","function":{"name":"f","parameters":{"properties":{
  "s":{"type":"string"},"n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},
  "o":{"type":"object","properties":{"x":{"type":"integer"}}},"a":{"type":"array","items":{"type":"number"}},
  "u":{"anyOf":[{"type":"string"},{"type":"null"}]}}}}}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static const std::pair<kiln_component_kind, const char*> parsers[] = {
      {KILN_COMPONENT_TOOL_PARSER, "qwen3_coder"},  {KILN_COMPONENT_TOOL_PARSER, "gemma4"},
      {KILN_COMPONENT_TOOL_PARSER, "markdown_json"}, {KILN_COMPONENT_REASONING_PARSER, "qwen3"},
      {KILN_COMPONENT_REASONING_PARSER, "gemma4"}};
  auto [kind, name] = parsers[data[0] % 5];
  const Component* c = test::parser_registry().find(kind, name);
  if (!c) fail("parser not registered", {});
  ParserRequest req;
  req.tools_json = kTools;
  req.thinking = static_cast<int>(data[1] % 3) - 1;
  std::string_view input(reinterpret_cast<const char*>(data + 3), size - 3);
  size_t cut1 = data[2] % (input.size() + 1), cut2 = (data[2] * 7u) % (input.size() + 1);
  if (cut1 > cut2) std::swap(cut1, cut2);
  try {
    auto once = test::coalesce(test::run_once(*c, req, input));
    if (test::coalesce(test::run_pieces(*c, req, test::split_at(input, {cut1, cut2}))) != once)
      fail("splitting changed the events", input);
    auto partial = test::coalesce(test::run_pieces(*c, req, {input.substr(0, cut2)}, false));
    if (!test::is_prefix_stream(partial, once)) fail("a prefix emitted something the full text retracts", input);
    parse::AssistantMessage m = test::to_message(once);
    for (const auto& call : m.tool_calls) {
      auto j = nlohmann::json::parse(call.arguments, nullptr, false);
      if (!j.is_discarded() && !j.is_object()) fail("arguments are JSON but not an object", input);
      if (j.is_discarded()) {
        // Invalid UTF-8 copied from the input is the only acceptable reason for unparsable JSON.
        auto cleaned = nlohmann::json(call.arguments).dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore);
        auto again = nlohmann::json::parse(nlohmann::json::parse(cleaned).get<std::string>(), nullptr, false);
        if (!again.is_object()) fail("arguments are not one JSON object", input);
      }
    }
  } catch (const std::exception& e) {
    fail(e.what(), input);
  }
  return 0;
}
