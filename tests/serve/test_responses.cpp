// OpenAI's Responses API (/v1/responses) in-process: the same tokens as the chat route for the same
// conversation and seed, reasoning / message / function_call items from the scripted test model, the
// stream of events reassembling to the response, a function-call round trip through
// previous_response_id with the prefix cache hit, stored responses kept apart by API key, the
// store's bounds, and errors naming the field.
#include "scripted_model.hpp"
#include "serve/responses.hpp"

namespace kiln::serve::test {
namespace {

/** POSTs with an API key; (status, body). */
std::pair<int, json> call(const Server& s, const std::string& method, const std::string& path, const std::string& key,
                          const json& body = nullptr) {
  auto c = s.client();
  const httplib::Headers h = {{"Authorization", "Bearer " + key}};
  httplib::Result r = method == "GET"      ? c.Get(path, h)
                      : method == "DELETE" ? c.Delete(path, h)
                                           : c.Post(path, h, body.dump(), "application/json");
  return {r ? r->status : 0, r ? json::parse(r->body, nullptr, false) : json()};
}

/** Output items without their generated ids (two requests never share ids). */
json without_ids(json output) {
  for (json& item : output) {
    item.erase("id");
    item.erase("call_id");
  }
  return output;
}

const json kResponsesTools = json::parse(R"([{"type": "function", "name": "get_weather",
  "description": "Weather forecast", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
  "required": ["city", "days"]}}])");

/** The scripted request (scripted_model.hpp's request_body) as a Responses body. */
json scripted_turn() {
  return {{"model", "scripted"},
          {"input", "What is the weather in Paris for the next 3 days?"},
          {"tools", kResponsesTools},
          {"temperature", 0},
          {"max_output_tokens", 600}};
}

TEST(Responses, SameTokensAsTheChatRouteForTheSameConversationAndSeed) {
  Server s;
  int st = 0;
  const json chat =
      s.post("/v1/chat/completions",
             {{"messages",
               {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell me a story"}}}},
              {"temperature", 0.9},
              {"seed", 11},
              {"max_tokens", 16}},
             &st);
  ASSERT_EQ(st, 200) << chat.dump();
  const json r = s.post("/v1/responses",
                        {{"instructions", "Be brief."},
                         {"input", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                         {"temperature", 0.9},
                         {"seed", 11},
                         {"max_output_tokens", 16}},
                        &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["instructions"], "Be brief.");
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  const json& msg = r["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(r["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(r["usage"]["output_tokens"], 16);
  EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["input_tokens"].get<int>() + 16);
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  // input_text parts are joined into the message's text (one part: the same prompt as a string).
  const json parts = s.post("/v1/responses",
                            {{"instructions", "Be brief."},
                             {"input",
                              {{{"type", "message"},
                                {"role", "user"},
                                {"content", {{{"type", "input_text"}, {"text", "Tell me a story"}}}}}}},
                             {"temperature", 0.9},
                             {"seed", 11},
                             {"max_output_tokens", 16}},
                            &st);
  ASSERT_EQ(st, 200) << parts.dump();
  EXPECT_EQ(parts["output"][0]["content"][0]["text"], msg["content"][0]["text"]);
  EXPECT_EQ(parts["usage"]["input_tokens"], r["usage"]["input_tokens"]);
  const json two =
      s.post("/v1/responses",
             {{"input",
               {{{"role", "user"},
                 {"content",
                  {{{"type", "input_text"}, {"text", "Tell me"}}, {{"type", "input_text"}, {"text", "a story"}}}}}}},
              {"temperature", 0.9},
              {"seed", 11},
              {"max_output_tokens", 16}},
             &st);
  const json joined = s.post("/v1/chat/completions",
                             {{"messages", {{{"role", "user"}, {"content", "Tell me\na story"}}}},
                              {"temperature", 0.9},
                              {"seed", 11},
                              {"max_tokens", 16}},
                             &st);
  EXPECT_EQ(two["output"][0]["content"][0]["text"], joined["choices"][0]["message"]["content"]);
  EXPECT_EQ(two["usage"]["input_tokens"], joined["usage"]["prompt_tokens"]);
}

TEST(Responses, ItemsStreamAndAFunctionCallRoundTripsThroughPreviousResponseId) {
  const Family f = qwen();
  const std::string dir = write_model(f);
  ModelConfig mc = scripted_config(f, dir);
  mc.cache.prefix_caching = true;
  Server s({}, mc);
  int st = 0;
  json body = scripted_turn();
  body["reasoning"] = {{"effort", "high"}};
  const json r = s.post("/v1/responses", body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_NE(r["output"][0]["content"][0]["text"].get<std::string>().find("weather in Paris"), std::string::npos);
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_NE(r["output"][1]["content"][0]["text"].get<std::string>().find("Let me look that up."), std::string::npos);
  const json& call = r["output"][2];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3, "metric": true})"));
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_GT(r["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 10);
  EXPECT_LT(r["usage"]["output_tokens_details"]["reasoning_tokens"], r["usage"]["output_tokens"]);

  // Streamed: created, in_progress, each item's events in order, completed; numbered from 0.
  std::string sse;
  body["stream"] = true;
  httplib::Client client = s.client();
  ASSERT_TRUE(post_streaming(client, "/v1/responses", body.dump(), [&](const char* d, size_t n) {
    sse.append(d, n);
    return true;
  }));
  const auto events = events_of(sse);
  ASSERT_GE(events.size(), 10u) << sse;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].second["sequence_number"], i) << events[i].first;
    EXPECT_EQ(events[i].second["type"], events[i].first);
  }
  EXPECT_EQ(events.front().first, "response.created");
  EXPECT_EQ(events.front().second["response"]["status"], "in_progress");
  EXPECT_EQ(events[1].first, "response.in_progress");
  EXPECT_EQ(events.back().first, "response.completed");
  // Reassembled as a client does: the deltas add up to each item's done text.
  std::map<int, std::string> text;
  json items = json::array();
  for (const auto& [type, e] : events) {
    if (type == "response.reasoning_text.delta" || type == "response.output_text.delta" ||
        type == "response.function_call_arguments.delta")
      text[e["output_index"].get<int>()] += e["delta"].get<std::string>();
    if (type == "response.output_item.done") items.push_back(e["item"]);
  }
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(text[0], items[0]["content"][0]["text"]);
  EXPECT_EQ(text[1], items[1]["content"][0]["text"]);
  EXPECT_EQ(text[2], items[2]["arguments"]);
  EXPECT_EQ(without_ids(items), without_ids(r["output"]));
  EXPECT_EQ(without_ids(events.back().second["response"]["output"]), without_ids(r["output"]));

  // The call's output continues the stored response: the conversation is the prefix, cached.
  const json turn2 = {
      {"model", "scripted"},
      {"previous_response_id", r["id"]},
      {"input", {{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "sunny"}}}},
      {"tools", kResponsesTools},
      {"temperature", 0},
      {"max_output_tokens", 4}};
  const json r2 = s.post("/v1/responses", turn2, &st);
  ASSERT_EQ(st, 200) << r2.dump();
  EXPECT_EQ(r2["previous_response_id"], r["id"]);
  EXPECT_GT(r2["usage"]["input_tokens"].get<int>(), r["usage"]["input_tokens"].get<int>());
  EXPECT_GT(r2["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << r2.dump();
  // The chat route with the same conversation sees the same prompt.
  json chat = request_body();
  chat["messages"].push_back({{"role", "assistant"},
                              {"content", r["output"][1]["content"][0]["text"]},
                              {"reasoning_content", r["output"][0]["content"][0]["text"]},
                              {"tool_calls",
                               {{{"id", call["call_id"]},
                                 {"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"arguments", call["arguments"]}}}}}}});
  chat["messages"].push_back({{"role", "tool"}, {"tool_call_id", call["call_id"]}, {"content", "sunny"}});
  chat["max_tokens"] = 4;
  const json c2 = s.post("/v1/chat/completions", chat, &st);
  ASSERT_EQ(st, 200) << c2.dump();
  EXPECT_EQ(c2["usage"]["prompt_tokens"], r2["usage"]["input_tokens"]);
}

TEST(Responses, StoredResponsesAreKeptApartByApiKey) {
  ServerConfig sc;
  sc.api_keys = {"alice", "bob"};
  Server s(sc);
  const json body = {{"input", "Once upon a time"}, {"max_output_tokens", 4}};
  auto [st, r] = call(s, "POST", "/v1/responses", "alice", body);
  ASSERT_EQ(st, 200) << r.dump();
  const std::string id = r["id"];
  EXPECT_EQ(id.rfind("resp_", 0), 0u);
  EXPECT_EQ(call(s, "GET", "/v1/responses/" + id, "alice").second, r);
  EXPECT_EQ(call(s, "GET", "/v1/responses/" + id, "bob").first, 404);
  EXPECT_EQ(call(s, "DELETE", "/v1/responses/" + id, "bob").first, 404);
  json next = body;
  next["previous_response_id"] = id;
  auto [st_bob, err] = call(s, "POST", "/v1/responses", "bob", next);
  EXPECT_EQ(st_bob, 404) << err.dump();
  EXPECT_EQ(err["error"]["param"], "previous_response_id");
  EXPECT_EQ(call(s, "POST", "/v1/responses", "alice", next).first, 200);
  const auto [del, gone] = call(s, "DELETE", "/v1/responses/" + id, "alice");
  EXPECT_EQ(del, 200);
  EXPECT_EQ(gone, json::parse(R"({"id": ")" + id + R"(", "object": "response.deleted", "deleted": true})"));
  EXPECT_EQ(call(s, "GET", "/v1/responses/" + id, "alice").first, 404);
  // store: false keeps nothing; a finished response cannot be cancelled.
  json unstored = body;
  unstored["store"] = false;
  const auto [st2, r2] = call(s, "POST", "/v1/responses", "alice", unstored);
  ASSERT_EQ(st2, 200);
  EXPECT_EQ(r2["store"], false);
  EXPECT_EQ(call(s, "GET", "/v1/responses/" + r2["id"].get<std::string>(), "alice").first, 404);
  EXPECT_EQ(call(s, "POST", "/v1/responses/" + r2["id"].get<std::string>() + "/cancel", "alice").first, 404);
}

TEST(Responses, CancelEndsAResponseInProgress) {
  Server s;
  const json body = {{"input", "Once upon a time"}, {"max_output_tokens", 480}, {"stream", true}};
  std::string sse, id;
  int cancel_status = 0;
  httplib::Client client = s.client();
  ASSERT_TRUE(post_streaming(client, "/v1/responses", body.dump(), [&](const char* d, size_t n) {
    sse.append(d, n);
    if (id.empty()) {
      const auto events = events_of(sse);
      if (!events.empty()) {
        id = events.front().second["response"]["id"];
        cancel_status = s.client().Post("/v1/responses/" + id + "/cancel")->status;
      }
    }
    return true;
  }));
  EXPECT_EQ(cancel_status, 200);
  const auto events = events_of(sse);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "response.incomplete") << sse.substr(sse.size() > 600 ? sse.size() - 600 : 0);
  EXPECT_EQ(events.back().second["response"]["status"], "cancelled");
  EXPECT_LT(events.back().second["response"]["usage"]["output_tokens"].get<int>(), 480);
}

TEST(Responses, TheStoreKeepsItsBoundsLeastRecentlyUsedFirst) {
  ResponseStore store(2, 1 << 20);
  store.put("a", {"k", "A", "[]"});
  store.put("b", {"k", "B", "[]"});
  ASSERT_TRUE(store.get("a", "k"));  // a is now the most recent
  store.put("c", {"k", "C", "[]"});
  EXPECT_TRUE(store.get("a", "k"));
  EXPECT_FALSE(store.get("b", "k"));
  EXPECT_TRUE(store.get("c", "k"));
  EXPECT_FALSE(store.get("c", "other"));
  ResponseStore small(100, 300);
  small.put("x", {"", std::string(150, 'x'), "[]"});
  small.put("y", {"", std::string(150, 'y'), "[]"});  // over the bytes: x goes
  EXPECT_FALSE(small.get("x", ""));
  EXPECT_TRUE(small.get("y", ""));
  small.put("z", {"", std::string(1000, 'z'), "[]"});  // alone over the limit: not kept
  EXPECT_FALSE(small.get("z", ""));
  EXPECT_EQ(small.size(), 1u);
}

TEST(Responses, BadRequestsNameTheField) {
  Server s;
  const auto expect = [&](json body, int status, const std::string& param) {
    int st = 0;
    const json e = s.post("/v1/responses", body, &st);
    EXPECT_EQ(st, status) << e.dump();
    EXPECT_EQ(e["error"]["param"], param) << e.dump();
  };
  const json ok = {{"input", "Hi"}, {"max_output_tokens", 2}};
  json web = ok;
  web["tools"] = {{{"type", "web_search"}}};
  expect(web, 400, "tools[0].type");
  json item = ok;
  item["input"] = {{{"type", "message"}, {"role", "user"}, {"content", "a"}}, {{"type", "computer_call"}}};
  expect(item, 400, "input[1].type");
  json image = ok;
  image["input"] = {
      {{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "data:image/png;base64,AAAA"}}}}}};
  expect(image, 400, "input[0].content[0].type");
  json prev = ok;
  prev["previous_response_id"] = "resp_nope";
  expect(prev, 404, "previous_response_id");
  json format = ok;
  format["text"] = {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", 7}}}};
  expect(format, 400, "text.format.schema");
  json trunc = ok;
  trunc["truncation"] = "auto";
  expect(trunc, 400, "truncation");
  json background = ok;
  background["background"] = true;
  expect(background, 400, "background");
  json missing = ok;
  missing.erase("input");
  expect(missing, 400, "input");
  json big = ok;
  big["max_output_tokens"] = -1;
  expect(big, 400, "max_output_tokens");
  int st = 0;
  EXPECT_EQ(s.post("/v1/responses", json::parse("[1]"), &st).is_object(), true);
  EXPECT_EQ(st, 400);
}

}  // namespace
}  // namespace kiln::serve::test
