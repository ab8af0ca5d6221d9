// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) in-process: thinking, text
// and tool_use blocks from the scripted test model, the stream of events reassembling to the
// message, a tool_result round trip, errors in Anthropic's shape, lenient escapes, x-api-key, and
// the volatile system line stripped for prefix caching.
#include <map>

#include "scripted_model.hpp"
#include "serve/anthropic.hpp"

namespace kiln::serve::test {
namespace {

const json kAnthropicTools = json::parse(R"([{"name": "get_weather", "description": "Weather forecast",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
  "metric": {"type": "boolean"}}, "required": ["city", "days"]}}])");

json turn1() {
  return {{"max_tokens", 600},  // the script is one byte-level token per character
          {"temperature", 0},
          {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
          {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris for the next 3 days?"}}}},
          {"tools", kAnthropicTools}};
}

/** The second turn: the call answered with a tool_result. */
json turn2(const json& first_content) {
  json t = turn1();
  t["max_tokens"] = 100;
  t["messages"].push_back({{"role", "assistant"}, {"content", first_content}});
  std::string id;
  for (const json& b : first_content)
    if (b["type"] == "tool_use") id = b["id"];
  t["messages"].push_back(
      {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", id}, {"content", "sunny, 21 C"}}}}});
  return t;
}

/** The content blocks a client rebuilds from the events. */
json reassemble(const std::vector<std::pair<std::string, json>>& events, std::string* stop_reason) {
  std::map<int, json> blocks;
  std::map<int, std::string> partial_json;
  for (const auto& [type, e] : events) {
    if (type == "content_block_start") blocks[e["index"].get<int>()] = e["content_block"];
    if (type == "content_block_delta") {
      json& b = blocks[e["index"].get<int>()];
      const json& d = e["delta"];
      if (d["type"] == "text_delta") b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
      if (d["type"] == "thinking_delta")
        b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
      if (d["type"] == "input_json_delta") partial_json[e["index"].get<int>()] += d["partial_json"].get<std::string>();
    }
    if (type == "message_delta") *stop_reason = e["delta"]["stop_reason"];
  }
  json out = json::array();
  for (auto& [i, b] : blocks) {
    if (b["type"] == "tool_use") b["input"] = json::parse(partial_json[i].empty() ? "{}" : partial_json[i]);
    out.push_back(b);
  }
  return out;
}

class Messages : public ::testing::TestWithParam<Family> {};

TEST_P(Messages, ThinkingTextAndToolUseBlocksAndAToolResultRoundTrip) {
  const Family f = GetParam();
  // The script answers the first turn with reasoning, text and a call, the second with text.
  std::string dir = write_model(f);
  const ModelConfig mc = scripted_config(f, dir);
  json first_content;
  {
    Server s({}, mc);
    int st = 0;
    const json m = s.post("/v1/messages", turn1(), &st);
    ASSERT_EQ(st, 200) << m.dump();
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["stop_reason"], "tool_use");
    ASSERT_EQ(m["content"].size(), 3u) << m.dump();
    EXPECT_EQ(m["content"][0]["type"], "thinking");
    EXPECT_NE(m["content"][0]["thinking"].get<std::string>().find("weather in Paris"), std::string::npos);
    EXPECT_EQ(m["content"][1]["type"], "text");
    EXPECT_NE(m["content"][1]["text"].get<std::string>().find("Let me look that up."), std::string::npos);
    const json& call = m["content"][2];
    EXPECT_EQ(call["type"], "tool_use");
    EXPECT_EQ(call["name"], "get_weather");
    EXPECT_EQ(call["input"], json::parse(R"({"city": "Paris", "days": 3, "metric": true})"));  // schema-typed
    EXPECT_GT(m["usage"]["input_tokens"], 0);
    EXPECT_GT(m["usage"]["output_tokens"], 0);

    // Streamed: message_start, ping, each block's start / deltas / stop, message_delta, message_stop;
    // the blocks a client rebuilds are the message's (ids aside: each request makes its own).
    json body = turn1();
    body["stream"] = true;
    auto r = s.client().Post("/v1/messages", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    const auto events = events_of(r->body);
    ASSERT_GE(events.size(), 6u);
    EXPECT_EQ(events.front().first, "message_start");
    EXPECT_EQ(events[1].first, "ping");
    EXPECT_EQ(events.back().first, "message_stop");
    std::string stop;
    json rebuilt = reassemble(events, &stop);
    EXPECT_EQ(stop, "tool_use");
    ASSERT_EQ(rebuilt.size(), 3u);
    rebuilt[2]["id"] = call["id"];
    EXPECT_EQ(rebuilt, m["content"]);
    // Every block starts before its deltas and stops once.
    std::map<int, int> started, stopped;
    for (const auto& [type, e] : events) {
      if (type == "content_block_start") ++started[e["index"].get<int>()];
      if (type == "content_block_stop") ++stopped[e["index"].get<int>()];
      if (type == "content_block_delta") {
        EXPECT_EQ(started[e["index"].get<int>()], 1);
      }
    }
    EXPECT_EQ(started, stopped);

    first_content = m["content"];
  }
  // The round trip: the next turn (the call and its result) is answered by a script written for
  // what it renders, once the first server (which maps the files) is gone.
  // (Qwen's template opens a thinking block that the answer closes.)
  const std::string answer =
      f.name == "qwen" ? "Sunny all week.\n</think>\n\nIt is sunny in Paris." : "It is sunny in Paris.";
  write_model(f, {{json::parse(anthropic_chat_body(turn2(first_content).dump())), answer}}, false);
  Server s({}, mc);
  int st = 0;
  const json m2 = s.post("/v1/messages", turn2(first_content), &st);
  ASSERT_EQ(st, 200) << m2.dump();
  EXPECT_EQ(m2["stop_reason"], "end_turn");
  ASSERT_FALSE(m2["content"].empty());
  EXPECT_NE(m2["content"].back()["text"].get<std::string>().find("It is sunny in Paris."), std::string::npos)
      << m2.dump();
  // count_tokens counts the prompt the message was generated from.
  json count_body = turn2(first_content);
  count_body.erase("max_tokens");
  const json count = s.post("/v1/messages/count_tokens", count_body);
  EXPECT_EQ(count["input_tokens"].get<int>(),
            m2["usage"]["input_tokens"].get<int>() + m2["usage"]["cache_read_input_tokens"].get<int>());
}

INSTANTIATE_TEST_SUITE_P(Parsers, Messages, ::testing::Values(qwen(), gemma()),
                         [](const auto& info) { return info.param.name; });

TEST(Messages, ErrorsHaveAnthropicsShapeAndNameTheField) {
  ServerConfig sc;
  sc.api_keys = {"secret"};
  Server s(sc);
  auto post = [&](const std::string& body, const httplib::Headers& h = {{"x-api-key", "secret"}}) {
    auto c = s.client();
    auto r = c.Post("/v1/messages", h, body, "application/json");
    return std::make_pair(r ? r->status : 0, r ? json::parse(r->body, nullptr, false) : json());
  };
  const json ok = {{"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  EXPECT_EQ(post(ok.dump()).first, 200);
  EXPECT_EQ(post(ok.dump(), {{"Authorization", "Bearer secret"}}).first, 200);  // Bearer too
  auto [st, e] = post(ok.dump(), {{"x-api-key", "wrong"}, {"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(st, 401);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  const auto expect = [&](json body, int status, const std::string& type, const std::string& needle) {
    const auto [code, err] = post(body.is_string() ? body.get<std::string>() : body.dump());
    EXPECT_EQ(code, status) << needle << ": " << err.dump();
    EXPECT_EQ(err["type"], "error");
    EXPECT_EQ(err["error"]["type"], type) << err.dump();
    EXPECT_NE(err["error"]["message"].get<std::string>().find(needle), std::string::npos) << err.dump();
  };
  json no_max = ok;
  no_max.erase("max_tokens");
  expect(no_max, 400, "invalid_request_error", "max_tokens");
  json image = ok;
  image["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}, {"data", "AAAA"}}}}};
  expect(image, 400, "invalid_request_error", "messages[0].content[0]");
  json unnamed = ok;
  unnamed["tool_choice"] = {{"type", "tool"}};
  expect(unnamed, 400, "invalid_request_error", "tool_choice 'tool' needs the 'name'");
  json redacted = ok;
  redacted["messages"] = {{{"role", "user"}, {"content", "Hi"}},
                          {{"role", "assistant"}, {"content", {{{"type", "redacted_thinking"}, {"data", "x"}}}}},
                          {{"role", "user"}, {"content", "Go on"}}};
  expect(redacted, 400, "invalid_request_error", "redacted_thinking");
  json model = ok;
  model["model"] = "nope";
  expect(model, 404, "not_found_error", "nope");
  json stops = ok;
  stops["stop_sequences"] = "x";
  expect(stops, 400, "invalid_request_error", "stop");
  expect(json("{\"max_tokens\": 4, \"messages\": [}"), 400, "invalid_request_error", "not valid JSON");
  // The OpenAI route's nesting limit holds here too (the body is converted in memory, not re-read).
  json deep = ok;
  deep["metadata"] = {{"user_id", json::parse(std::string(80, '[') + std::string(80, ']'))}};
  expect(deep, 400, "invalid_request_error", "nests deeper than 64");
  // Fields of the wrong JSON type are 400s naming them, not 500s (a fuzzer found role: {...}).
  json role = ok;
  role["messages"][0]["role"] = {{"type", "object"}};
  expect(role, 400, "invalid_request_error", "messages[0].role");
  json block_type = ok;
  block_type["system"] = {{{"type", 7}, {"text", "s"}}};
  expect(block_type, 400, "invalid_request_error", "system");
  json tool_result = ok;
  tool_result["messages"] = {
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "t"}, {"content", "r"}, {"is_error", "yes"}}}}}};
  EXPECT_NE(post(tool_result.dump()).first, 500);
  // Unknown fields, metadata and beta headers are accepted.
  json extra = ok;
  extra["metadata"] = {{"user_id", "u1"}};
  extra["some_future_field"] = true;
  EXPECT_EQ(post(extra.dump(), {{"x-api-key", "secret"}, {"anthropic-beta", "whatever-2025"}}).first, 200);
}

TEST(Messages, ToolInputWithInvalidUtf8ReadsAsReplacementCharacters) {
  ApiRequest req;
  req.gen = std::make_shared<GenRequest>();
  req.gen->id = "chatcmpl-1";
  using K = parse::Delta::Kind;
  Piece p;
  p.deltas = {{K::call_start, "", 0, "call_1", "get_weather"},
              {K::call_arguments, "{\"city\": \"Par\xff", 0, "", ""},
              {K::call_arguments, "is\"}", 0, "", ""}};
  p.finish = Finish::tool_calls;
  MessagesWriter whole(req, "m");
  whole.absorb(p);
  const json m = json::parse(whole.final_body(Usage{}));
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["input"]["city"], "Par\xef\xbf\xbdis") << m.dump();  // as the stream reads it
  MessagesWriter streamed(req, "m");
  std::string stop;
  std::string events = streamed.stream_piece(p);
  events += streamed.stream_end(Usage{});
  const json blocks = reassemble(events_of(events), &stop);
  EXPECT_EQ(blocks[0]["input"], m["content"][0]["input"]);
  EXPECT_EQ(stop, "tool_use");
}

TEST(Messages, InvalidEscapesInStringsAreKeptAndOnlyThose) {
  // A tool schema's regular expression written with \s and \d, as some clients send it.
  const std::string body = R"({"max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}],
    "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "string",
    "pattern": "^\s*\d+\.\d*$"}}}}]})";
  size_t fixed = 0;
  const json parsed = json::parse(tolerate_invalid_escapes(body, &fixed));
  EXPECT_EQ(fixed, 4u);  // \s, \d, \. and \d
  EXPECT_EQ(parsed["tools"][0]["input_schema"]["properties"]["x"]["pattern"], "^\\s*\\d+\\.\\d*$");
  Server s;
  auto r = s.client().Post("/v1/messages", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // Malformed otherwise: still a 400.
  auto bad = s.client().Post("/v1/messages", R"({"max_tokens": 3, "messages": [{"role": "user" "content": "\s"}]})",
                             "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST(Messages, AStrippedVolatileSystemLineLetsTheNextTurnHitTheCache) {
  const auto body = [](const std::string& cch) {
    std::string system = "x-anthropic-billing-header: cc_version=2.1.37; cc_entrypoint=cli; cch=" + cch + ";\n";
    for (int i = 0; i < 8; ++i) system += "You are a helpful assistant who tells stories about dogs and cats.\n";
    return json{{"max_tokens", 4}, {"system", system}, {"messages", {{{"role", "user"}, {"content", "Go"}}}}};
  };
  int unconfigured = 0;
  {
    Server s;  // not configured: the prompts part at the changing hash, a few dozen tokens in
    s.post("/v1/messages", body("a1"));
    unconfigured = s.post("/v1/messages", body("b2"))["usage"]["cache_read_input_tokens"];
  }
  ServerConfig sc;
  sc.strip_system_lines = {"^x-anthropic-billing-header:"};
  Server s(sc);
  s.post("/v1/messages", body("a1"));
  const json second = s.post("/v1/messages", body("b2"));
  // Stripped: the whole system prompt is shared (8 lines of ~70 characters here).
  EXPECT_GT(second["usage"]["cache_read_input_tokens"].get<int>(), unconfigured + 300) << second.dump();
}

}  // namespace
}  // namespace kiln::serve::test
