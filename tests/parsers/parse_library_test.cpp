// kiln_parse: events -> OpenAI message and streaming deltas, client-side delta application,
// call ids, and chaining a reasoning parser into a tool parser.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "harness.hpp"
#include "parse/message.hpp"
#include "parse/pipeline.hpp"
#include "tool_cases.hpp"

namespace kiln::test {
namespace {

using parse::AssistantMessage;
using parse::EventMapper;

ParseEvent content(std::string t) { return {KILN_EVENT_CONTENT, 0, std::move(t), {}, {}}; }
ParseEvent reasoning(std::string t) { return {KILN_EVENT_REASONING, 0, std::move(t), {}, {}}; }
ParseEvent start(uint32_t i, std::string name, std::string id = "") { return {KILN_EVENT_TOOL_CALL_START, i, {}, std::move(id), std::move(name)}; }
ParseEvent args(uint32_t i, std::string t) { return {KILN_EVENT_TOOL_CALL_ARGS, i, std::move(t), {}, {}}; }

/** The OpenAI delta text of what the mapper made of an event ("" for nothing). */
std::string wire(const std::optional<parse::Delta>& d) {
  return d ? parse::delta_json(*d) : std::string();
}

TEST(EventMapper, MapsEventsOntoOpenAIDeltas) {
  EventMapper m(parse::CallIds(3));
  EXPECT_EQ(wire(m.on_event(reasoning("hmm"))), R"({"reasoning_content":"hmm"})");
  EXPECT_EQ(wire(m.on_event(content("Hi"))), R"({"content":"Hi"})");
  std::string first = wire(m.on_event(start(0, "get_weather")));
  auto j = nlohmann::json::parse(first);
  EXPECT_EQ(j["tool_calls"][0]["index"], 0);
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "");
  std::string id = j["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(wire(m.on_event(args(0, "{\"a\": 1}"))),
            R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\": 1}"}}]})");
  EXPECT_EQ(wire(m.on_event(start(1, "f", "my-id"))).find("\"id\":\"my-id\"") != std::string::npos, true);
  EXPECT_EQ(m.message().tool_calls.size(), 2u);
  EXPECT_EQ(m.message().tool_calls[0].id, id);
  EXPECT_EQ(m.message().tool_calls[1].id, "my-id");
  EXPECT_STREQ(parse::finish_reason(m.message()), "tool_calls");
}

TEST(EventMapper, RejectsEventsThatBreakTheContract) {
  EventMapper m;
  EXPECT_THROW(m.on_event(args(0, "{}")), HostError);
  EXPECT_THROW(m.on_event(start(1, "f")), HostError);
  EXPECT_THROW(m.on_event(start(0, "")), HostError);
}

TEST(EventMapper, ChecksThatArgumentsAreOneJsonObject) {
  EventMapper m;
  m.on_event(start(0, "f"));
  m.on_event(args(0, "{}{}"));
  auto problems = m.check();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("not a JSON object"), std::string::npos);
}

TEST(EventMapper, HoldsSplitUtf8CharactersUntilComplete) {
  EventMapper m;
  const std::string e = "\xc3\xa9";  // é
  EXPECT_EQ(wire(m.on_event(content("caf" + e.substr(0, 1)))), R"({"content":"caf"})");
  EXPECT_EQ(wire(m.on_event(content(e.substr(1)))), "{\"content\":\"\xc3\xa9\"}");
  EXPECT_EQ(wire(m.on_event(content("x\xe6\x9d"))), R"({"content":"x"})");
  auto rest = m.flush();
  ASSERT_EQ(rest.size(), 1u);  // an incomplete character at the end is sent replaced, not lost
  EXPECT_EQ(parse::delta_json(rest[0]), "{\"content\":\"\xef\xbf\xbd\"}");
  EXPECT_EQ(m.message().content, "caf" + e + "x\xe6\x9d");
}

TEST(Message, JsonHasTheOpenAIShape) {
  AssistantMessage m;
  EXPECT_EQ(parse::message_json(m), R"({"role":"assistant","content":null,"reasoning_content":null})");
  EXPECT_STREQ(parse::finish_reason(m), "stop");
  EXPECT_STREQ(parse::finish_reason(m, true), "length");
  m.content = "Hi";
  m.tool_calls.push_back({"call_1", "f", "{\"a\": 1}"});
  EXPECT_EQ(parse::message_json(m),
            R"({"role":"assistant","content":"Hi","reasoning_content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]})");
}

TEST(Message, ApplyDeltaRebuildsTheMessageLikeAClient) {
  AssistantMessage m;
  parse::apply_delta(R"({"reasoning_content":"r"})", m);
  parse::apply_delta(R"({"content":"c"})", m);
  parse::apply_delta(R"({"tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":""}}]})", m);
  parse::apply_delta(R"({"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]})", m);
  EXPECT_EQ(m, (AssistantMessage{"c", "r", {{"x", "f", "{}"}}}));
  EXPECT_THROW(parse::apply_delta("[1]", m), HostError);
  EXPECT_THROW(parse::apply_delta(R"({"tool_calls":[{"index":5}]})", m), HostError);
}

TEST(Message, TypedDeltasWriteAndApplyAsTheirJson) {
  using K = parse::Delta::Kind;
  const std::vector<parse::Delta> deltas = {
      {K::reasoning, "think \"q\"\n", 0, "", ""},
      {K::content, "caf\xc3\xa9 \\ \x01", 0, "", ""},
      {K::call_start, "", 0, "call_1", "get_weather"},
      {K::call_arguments, "{\"city\": \"Par", 0, "", ""},
      {K::call_arguments, "is\"}", 0, "", ""},
      {K::call_start, "", 1, "id \"2\"", "f"},
      {K::call_arguments, "{}", 1, "", ""},
      {K::content, "\xe6\x9d", 0, "", ""},  // an incomplete character at the end of a stream
  };
  AssistantMessage typed, wire;
  for (const parse::Delta& d : deltas) {
    parse::apply_delta(d, typed);
    parse::apply_delta(parse::delta_json(d), wire);
  }
  EXPECT_EQ(wire.content, "caf\xc3\xa9 \\ \x01\xef\xbf\xbd");  // U+FFFD on the wire
  typed.content = wire.content;
  EXPECT_EQ(typed, wire);
  EXPECT_EQ(wire.tool_calls.size(), 2u);
  EXPECT_EQ(wire.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(wire.tool_calls[1].id, "id \"2\"");
  AssistantMessage m;
  EXPECT_THROW(parse::apply_delta(parse::Delta{K::call_arguments, "{}", 0, "", ""}, m), HostError);
  EXPECT_THROW(parse::apply_delta(parse::Delta{K::call_start, "", 1, "x", "f"}, m), HostError);
}

TEST(CallIds, SeededIdsAreReproducibleAndDistinct) {
  parse::CallIds a(9), b(9);
  std::string x = a.next();
  EXPECT_EQ(x, b.next());
  EXPECT_NE(x, a.next());
  EXPECT_NE(parse::CallIds().next(), parse::CallIds().next());
}

TEST(Pipeline, UnknownParserNameListsTheRegisteredOnes) {
  try {
    parse::find_parser(parser_registry(), KILN_COMPONENT_TOOL_PARSER, "nope");
    FAIL() << "expected an error";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3_coder"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("markdown_json"), std::string::npos) << e.what();
  }
}

/** Runs a pipeline over pieces and returns (one-shot message, message rebuilt from deltas). */
std::pair<AssistantMessage, AssistantMessage> run_pipeline(const char* reasoning_name, const char* tool_name,
                                                           const ParserRequest& req, std::string_view text,
                                                           size_t piece) {
  auto& reg = parser_registry();
  const Component* r = reasoning_name ? &parse::find_parser(reg, KILN_COMPONENT_REASONING_PARSER, reasoning_name) : nullptr;
  const Component* t = tool_name ? &parse::find_parser(reg, KILN_COMPONENT_TOOL_PARSER, tool_name) : nullptr;
  parse::ParserPipeline once(r, t, req);
  AssistantMessage one = parse::parse_message(once, text, parse::CallIds(5));

  parse::ParserPipeline streamed(r, t, req);
  EventMapper mapper(parse::CallIds(5));
  AssistantMessage rebuilt, typed;  // from the deltas' JSON, as a client; from the deltas, as the writers
  const auto apply = [&](const parse::Delta& d) {
    parse::apply_delta(parse::delta_json(d), rebuilt);
    parse::apply_delta(d, typed);
  };
  std::vector<ParseEvent> events;
  for (size_t i = 0; i <= text.size(); i += piece) {
    events.clear();
    if (i < text.size()) streamed.feed(text.substr(i, piece), events);
    if (i + piece > text.size()) streamed.finish(events);
    for (const auto& e : events)
      if (auto d = mapper.on_event(e)) apply(*d);
  }
  for (const auto& d : mapper.flush()) apply(d);
  EXPECT_TRUE(mapper.check().empty());
  EXPECT_EQ(typed, rebuilt);
  return {one, rebuilt};
}

TEST(Pipeline, Qwen3ReasoningThenQwen3CoderTools) {
  ParserRequest req;
  req.tools_json = kTestTools;
  req.prompt_tail = "<|im_start|>assistant\n<think>\n";
  std::string text =
      "The user wants weather.\n</think>\n\nSure, checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    auto [one, rebuilt] = run_pipeline("qwen3", "qwen3_coder", req, text, piece);
    EXPECT_EQ(one.reasoning_content, "The user wants weather.");
    EXPECT_EQ(one.content, "Sure, checking.");
    ASSERT_EQ(one.tool_calls.size(), 1u);
    EXPECT_EQ(one.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
    EXPECT_EQ(rebuilt, one) << "piece " << piece;
  }
}

TEST(Pipeline, ToolCallInsideThinkIsNotLost) {
  ParserRequest req;
  req.tools_json = kTestTools;
  std::string text = "I need the weather.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
  auto [one, rebuilt] = run_pipeline("qwen3", "qwen3_coder", req, text, 4);
  EXPECT_EQ(one.reasoning_content, "I need the weather.");
  ASSERT_EQ(one.tool_calls.size(), 1u);
  EXPECT_EQ(one.tool_calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(rebuilt, one);
}

TEST(Pipeline, Gemma4ReasoningThenGemma4Tools) {
  ParserRequest req;
  req.tools_json = kTestTools;
  req.thinking = 1;
  std::string text =
      "<|channel>thought\nNeed the weather.<channel|>Let me check.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}"
      "<tool_call|><|tool_response>";
  for (size_t piece : {1, 5, 1000}) {
    auto [one, rebuilt] = run_pipeline("gemma4", "gemma4", req, text, piece);
    EXPECT_EQ(one.reasoning_content, "Need the weather.");
    EXPECT_EQ(one.content, "Let me check.");
    ASSERT_EQ(one.tool_calls.size(), 1u);
    EXPECT_EQ(one.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
    EXPECT_EQ(rebuilt, one);
  }
}

TEST(Pipeline, NoParsersPassContentThrough) {
  auto [one, rebuilt] = run_pipeline(nullptr, nullptr, {}, "plain <think> text", 3);
  EXPECT_EQ(one.content, "plain <think> text");
  EXPECT_EQ(rebuilt, one);
}

}  // namespace
}  // namespace kiln::test
