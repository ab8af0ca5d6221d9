// Each field failure listed in models/qwen3_5.md §7.5, models/gemma4.md §7.3 and serving-hazards.md
// lesson (c), reproduced as input and shown not to happen: the streamed deltas, applied the way a
// client applies them, give exactly the one-shot message, with typed, single, closed JSON objects.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "parse/message.hpp"
#include "tool_cases.hpp"

namespace kiln::test {
namespace {

struct Streamed {
  parse::AssistantMessage one_shot, from_deltas;
  std::vector<ParseEvent> events;  ///< the streamed events, in order
};

/** Streams `pieces` through the parser and the delta mapper; also parses the whole text at once. */
Streamed stream(const char* parser, const std::vector<std::string>& pieces, const char* tools = kTestTools) {
  ParserRequest req;
  req.tools_json = tools;
  std::string whole;
  std::vector<std::string_view> views;
  for (const auto& p : pieces) {
    whole += p;
    views.push_back(p);
  }
  Streamed s;
  s.one_shot = to_message(run_once(tool_parser(parser), req, whole));
  s.events = run_pieces(tool_parser(parser), req, views);
  parse::EventMapper mapper(parse::CallIds(1));
  for (const auto& e : s.events)
    if (auto d = mapper.on_event(e)) parse::apply_delta(parse::delta_json(*d), s.from_deltas);
  for (const auto& d : mapper.flush()) parse::apply_delta(parse::delta_json(d), s.from_deltas);
  EXPECT_EQ(s.from_deltas, s.one_shot);
  for (const auto& c : s.from_deltas.tool_calls)
    EXPECT_TRUE(nlohmann::json::parse(c.arguments, nullptr, false).is_object()) << c.arguments;
  return s;
}

const std::string kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
    "</function>\n</tool_call>";

TEST(FieldFailures, DuplicatedArgumentsNeverHappen) {
  // vLLM #41466 / lesson (c): whole call in one delta, then end-of-stream; `{...}{...}` was sent.
  Streamed s = stream("qwen3_coder", {kCall, ""});
  ASSERT_EQ(s.from_deltas.tool_calls.size(), 1u);
  EXPECT_EQ(s.from_deltas.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  // Two whole calls and trailing text in one burst (MTP / speculative decoding).
  Streamed burst = stream("qwen3_coder", {kCall + "\n" + kCall + "\nDone."});
  ASSERT_EQ(burst.from_deltas.tool_calls.size(), 2u);
  EXPECT_EQ(burst.from_deltas.tool_calls[1].arguments, R"({"city": "Paris", "days": 2})");
  EXPECT_EQ(burst.from_deltas.content, "\nDone.");
}

TEST(FieldFailures, SameFunctionTwiceKeepsBothArguments) {
  // vLLM PR #33965: name-based bookkeeping merged two calls to the same function.
  Streamed s = stream("qwen3_coder", {kCall.substr(0, 50), kCall.substr(50) + "\n" + kCall});
  ASSERT_EQ(s.from_deltas.tool_calls.size(), 2u);
  EXPECT_EQ(s.from_deltas.tool_calls[0].arguments, s.from_deltas.tool_calls[1].arguments);
  EXPECT_NE(s.from_deltas.tool_calls[0].id, s.from_deltas.tool_calls[1].id);
}

TEST(FieldFailures, OpeningBraceIsSentWithTheHeaderEvenWhenTheFirstParameterArrivesWithIt) {
  // vLLM PR #35716: `{` skipped when header and first parameter arrived in one delta.
  Streamed s = stream("qwen3_coder", {"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n", "</function>"});
  ASSERT_GE(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].kind, KILN_EVENT_TOOL_CALL_START);
  EXPECT_EQ(s.events[1].kind, KILN_EVENT_TOOL_CALL_ARGS);
  EXPECT_EQ(s.events[1].text, "{");
}

TEST(FieldFailures, ClosingBraceIsSentWhenTheCloseArrivesWithTheLastParameter) {
  // vLLM PR #35716 / #45256: `}` never sent when </function> came in the same delta (or stream interval > 1).
  Streamed s = stream("qwen3_coder", {"<tool_call>\n<function=get_weather>\n", "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"});
  EXPECT_EQ(s.from_deltas.tool_calls.at(0).arguments, R"({"days": 2})");
  Streamed cut = stream("qwen3_coder", {"<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"});  // stream ends
  EXPECT_EQ(cut.from_deltas.tool_calls.at(0).arguments, R"({"city": "Par"})");
}

TEST(FieldFailures, NumbersAreNumbersNotStrings) {
  // "22.5" as a string: anyOf / type-list schemas were read as string by older parsers.
  const char* tools = R"([{"type":"function","function":{"name":"f","parameters":{"properties":{
      "a":{"type":"number"},"b":{"anyOf":[{"type":"number"},{"type":"null"}]},"c":{"type":["number","null"]},
      "d":{"type":"integer"},"e":{"type":"string"}}}}}])";
  Streamed s = stream("qwen3_coder",
                      {"<tool_call>\n<function=f>\n<parameter=a>\n22.5\n</parameter>\n<parameter=b>\n22.5\n</parameter>\n"
                       "<parameter=c>\n22.5\n</parameter>\n<parameter=d>\n30\n</parameter>\n<parameter=e>\n123\n</parameter>\n"
                       "</function>\n</tool_call>"},
                      tools);
  EXPECT_EQ(s.from_deltas.tool_calls.at(0).arguments, R"({"a": 22.5, "b": 22.5, "c": 22.5, "d": 30, "e": "123"})");
  Streamed g = stream("gemma4", {"<|tool_call>call:f{a:<|\"|>22.5<|\"|>,b:22.5,d:<|\"|>30<|\"|>,e:123}<tool_call|>"}, tools);
  EXPECT_EQ(g.from_deltas.tool_calls.at(0).arguments, R"({"a": 22.5, "b": 22.5, "d": 30, "e": "123"})");
}

TEST(FieldFailures, PythonTrueFalseNoneAreAcceptedNotDroppingTheCall) {
  // The Qwen template renders booleans as True/False; strict parsing dropped whole calls.
  Streamed s = stream("qwen3_coder", {"<tool_call>\n<function=set_temp>\n<parameter=enabled>\nTrue\n</parameter>\n"
                                      "<parameter=level>\nNone\n</parameter>\n</function>\n</tool_call>"});
  EXPECT_EQ(s.from_deltas.tool_calls.at(0).arguments, R"({"enabled": true, "level": null})");
  Streamed p = stream("qwen3_coder", {"<tool_call>\n<function=write_file>\n<parameter=options>\n{'force': False, 'x': None}\n"
                                      "</parameter>\n</function>\n</tool_call>"});
  EXPECT_EQ(p.from_deltas.tool_calls.at(0).arguments, R"({"options": {"force": false, "x": null}})");
}

TEST(FieldFailures, LiteralTagsInsideValuesDoNotTruncateThem) {
  // Writing a file that documents the format: </parameter>, </function> and a whole example call.
  std::string code = "x = '</parameter>'\ny = '</function> and </tool_call> here'\n";
  Streamed s = stream("qwen3_coder", {"<tool_call>\n<function=write_file>\n<parameter=content>\n" + code +
                                      "\n</parameter>\n</function>\n</tool_call>"});
  auto args = nlohmann::json::parse(s.from_deltas.tool_calls.at(0).arguments);
  EXPECT_EQ(args["content"], code);
  EXPECT_EQ(s.from_deltas.tool_calls.size(), 1u);
}

TEST(FieldFailures, GemmaNestedObjectsAreNotTruncatedByBraces) {
  // Rapid-MLX PR #1102: a non-greedy \{(.*?)\} regex cut nested objects.
  Streamed s = stream("gemma4", {"<|tool_call>call:nested{opts:{metric:true,label:<|\"|>}{<|\"|>},points:[1,[2]]}<tool_call|>"});
  EXPECT_EQ(s.from_deltas.tool_calls.at(0).arguments, R"({"opts": {"metric": true, "label": "}{"}, "points": [1, [2]]})");
}

TEST(FieldFailures, GemmaMissingBracesAndDelimitersStillGiveOneObject) {
  // Missing `{` / `}` and a missing opening <|"|> (sglang PR #39240).
  Streamed s = stream("gemma4", {"<|tool_call>call:get_weather city:Paris<|\"|>,days:2<tool_call|>"});
  EXPECT_EQ(s.from_deltas.tool_calls.at(0).arguments, R"({"city": "Paris", "days": 2})");
}

TEST(FieldFailures, MalformedCallsDegradeToContentAndTheRequestSucceeds) {
  Streamed q = stream("qwen3_coder", {"<tool_call>\n{\"name\": \"f\"}\n</tool_call>"});
  EXPECT_TRUE(q.from_deltas.tool_calls.empty());
  EXPECT_EQ(q.from_deltas.content, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>");
  Streamed g = stream("gemma4", {"ok <|tool_call>call:f{a:}<tool_call|>"});
  EXPECT_TRUE(g.from_deltas.tool_calls.empty());
  EXPECT_EQ(g.from_deltas.content, "ok <|tool_call>call:f{a:}<tool_call|>");
}

}  // namespace
}  // namespace kiln::test
