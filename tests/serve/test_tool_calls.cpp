// Tool calls and reasoning end to end: the scripted test model replays exactly the output a real
// Qwen3.5 or Gemma 4 model writes (reasoning, content, a call), the configured parsers turn it into
// reasoning_content / content / tool_calls, and the streamed deltas assemble to the one-shot answer.
#include <filesystem>
#include <future>

#include "scripted_model.hpp"

namespace kiln::serve::test {
namespace {

class ToolCalls : public ::testing::TestWithParam<Family> {};

TEST_P(ToolCalls, StreamedDeltasAssembleToTheOneShotAnswer) {
  const Family f = GetParam();
  const std::string dir = write_model(f);
  const ModelConfig mc = scripted_config(f, dir);
  Server s({}, mc);
  int st = 0;
  const json one = s.post("/v1/chat/completions", request_body(), &st);
  ASSERT_EQ(st, 200) << one.dump();
  const json& m = one["choices"][0]["message"];
  EXPECT_EQ(one["choices"][0]["finish_reason"], "tool_calls") << one.dump();
  EXPECT_NE(m["reasoning_content"].get<std::string>().find("weather in Paris"), std::string::npos) << m.dump();
  EXPECT_NE(m["content"].get<std::string>().find("Let me look that up."), std::string::npos) << m.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
  const json& call = m["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  // Typed by the schema: an integer and a boolean, not strings.
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3, "metric": true})"));

  // Streamed: the role once, then deltas; a call's id and name once, then argument fragments.
  std::vector<json> events;
  json body = request_body();
  body["stream_options"] = {{"include_usage", true}};
  s.stream("/v1/chat/completions", body, &events);
  std::string content, reasoning, finish;
  std::map<int, json> calls;
  for (const json& e : events)
    for (const json& c : e["choices"]) {
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content") && d["reasoning_content"].is_string())
        reasoning += d["reasoning_content"].get<std::string>();
      for (const json& tc : d.value("tool_calls", json::array())) {
        json& acc = calls[tc["index"].get<int>()];
        if (tc.contains("id")) {
          EXPECT_FALSE(acc.contains("id")) << "a call's id is sent once";
          acc["id"] = tc["id"];
          acc["name"] = tc["function"]["name"];
          acc["arguments"] = "";
        }
        if (tc.contains("function") && tc["function"].contains("arguments"))
          acc["arguments"] = acc["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
      if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    }
  EXPECT_EQ(content, m["content"].get<std::string>());
  EXPECT_EQ(reasoning, m["reasoning_content"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()),
            json::parse(call["function"]["arguments"].get<std::string>()));
  EXPECT_GT(events.back()["usage"]["completion_tokens"].get<int>(), 20);

  // The next turn: the assistant's call (arguments as a JSON string, as clients send them back)
  // and the tool's result render with the template and are answered.
  json turn2 = request_body();
  turn2["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
  turn2["messages"].push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "{\"temp\": 21}"}});
  turn2["max_tokens"] = 4;
  const json next = s.post("/v1/chat/completions", turn2, &st);
  EXPECT_EQ(st, 200) << next.dump();
  EXPECT_EQ(next["usage"]["completion_tokens"], 4);

  // tool_choice none: the same output is plain text (no call parsed), finish_reason stop.
  json none = request_body();
  none["tool_choice"] = "none";
  const json plain = s.post("/v1/chat/completions", none, &st);
  ASSERT_EQ(st, 200);
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls")) << plain.dump();
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Parsers, ToolCalls, ::testing::Values(qwen(), gemma()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kiln::serve::test
