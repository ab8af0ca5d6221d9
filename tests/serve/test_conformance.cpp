// What clients expect on the wire, over HTTP against the in-process server: padded vocabulary rows
// never sampled, Anthropic thinking only when asked and assistant prefill continued, the grammar
// fields on both routes, context overflow in OpenAI's and Anthropic's words, a tool-call turn in the
// plain template, one server per port, the stream's charset, model aliases, system_fingerprint and
// vLLM's return_token_ids.
#include <regex>

#include "scripted_model.hpp"
#include "serve/anthropic.hpp"

namespace kiln::serve::test {
namespace {

/** Every data event of an OpenAI stream (without [DONE]). */
std::vector<json> data_events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string block = body.substr(at, end - at);
    at = end + 2;
    if (block.rfind("data: ", 0) == 0 && block != "data: [DONE]") out.push_back(json::parse(block.substr(6)));
  }
  return out;
}

// Qwen's and Gemma's output layers have rows past the tokenizer's last id. Here those rows win at
// every position, greedy or sampled: none is ever picked or listed, and no request fails.
TEST(Conformance, PaddedVocabularyRowsAreNeverSampled) {
  Family f = qwen();
  f.name = "qwen_padded";
  const json body = {{"messages", {{{"role", "user"}, {"content", "List three colors"}}}}};
  json rendered = body;
  // (The template opens a reasoning block that the answer closes.)
  const std::string dir = write_model(f, {{rendered, "Colors.\n</think>\n\nRed, green and blue."}}, false, 40);
  const ModelConfig mc = scripted_config(f, dir);
  Server s({}, mc);
  for (const double temperature : {0.0, 1.0})
    for (const bool stream : {false, true}) {
      json req = body;
      req["temperature"] = temperature;
      req["seed"] = 7;
      req["max_tokens"] = 40;
      req["logprobs"] = true;
      req["top_logprobs"] = 5;
      const std::string what = fmt::format("temperature {} stream {}", temperature, stream);
      std::vector<json> lps;  // logprobs.content entries
      if (stream) {
        req["stream"] = true;
        auto r = s.client().Post("/v1/chat/completions", req.dump(), "application/json");
        ASSERT_TRUE(r) << what;
        ASSERT_EQ(r->status, 200) << what;
        EXPECT_EQ(r->body.find("\"error\""), std::string::npos) << what << ": " << r->body;
        for (const json& e : data_events(r->body))
          for (const json& c : e["choices"])
            if (c["logprobs"].is_object())
              for (const json& t : c["logprobs"]["content"]) lps.push_back(t);
      } else {
        int st = 0;
        const json r = s.post("/v1/chat/completions", req, &st);
        ASSERT_EQ(st, 200) << what << ": " << r.dump();
        for (const json& t : r["choices"][0]["logprobs"]["content"]) lps.push_back(t);
        if (temperature == 0) {
          EXPECT_EQ(r["choices"][0]["message"]["content"], "Red, green and blue.") << r.dump();
          EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Colors.") << r.dump();
          EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
        }
      }
      ASSERT_FALSE(lps.empty()) << what;
      // The padded rows have no text: a listed one would show as an empty token. Every sampled or
      // listed token here is one byte or one added token, and every logprob is finite.
      for (const json& t : lps) {
        EXPECT_FALSE(t["token"].get<std::string>().empty()) << what << ": " << t.dump();
        EXPECT_LT(t["logprob"].get<double>(), 0.01) << what;
        for (const json& a : t["top_logprobs"]) EXPECT_FALSE(a["token"].get<std::string>().empty()) << what;
      }
    }
  // Completions, by ids: the same.
  int st = 0;
  const json c = s.post("/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 30}, {"logprobs", 5}}, &st);
  ASSERT_EQ(st, 200) << c.dump();
  for (const json& t : c["choices"][0]["logprobs"]["tokens"]) EXPECT_FALSE(t.get<std::string>().empty());
}

// A Qwen-style template that honours enable_thinking, as Qwen3.5's does.
Family qwen_switch() {
  Family f = qwen();
  f.name = "qwen_switch";
  f.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "{% if not (loop.last and m.role == 'assistant' and not add_generation_prompt) %}<|im_end|>\n{% endif %}"
      "{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n"
      "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
      "{% else %}<think>\n{% endif %}{% endif %}";
  return f;
}

TEST(Conformance, AnthropicThinksOnlyWhenAskedAndContinuesAPrefill) {
  const Family f = qwen_switch();
  const json plain = {
      {"max_tokens", 60}, {"temperature", 0}, {"messages", {{{"role", "user"}, {"content", "Say hi"}}}}};
  json thinking = plain;
  thinking["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  json prefill = plain;
  prefill["messages"].push_back({{"role", "assistant"}, {"content", "The answer is"}});
  // One model per case: a script's rows are positions, and the three prompts' answers would overlap.
  const auto serve = [&](const json& body, const std::string& answer, const std::string& name) {
    Family g = f;
    g.name = f.name + "_" + name;
    const std::string dir = write_model(g, {{json::parse(anthropic_chat_body(body.dump())), answer}}, false);
    return std::make_unique<Server>(ServerConfig{}, scripted_config(g, dir));
  };
  int st = 0;
  // No 'thinking': the template renders thinking off, and the answer is one text block.
  auto s = serve(plain, "Hi there.", "plain");
  json m = s->post("/v1/messages", plain, &st);
  ASSERT_EQ(st, 200) << m.dump();
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "text");
  EXPECT_NE(m["content"][0]["text"].get<std::string>().find("Hi there."), std::string::npos) << m.dump();
  // Enabled: a thinking block, then the text.
  s = serve(thinking, "A greeting.\n</think>\n\nHello!", "thinking");
  m = s->post("/v1/messages", thinking, &st);
  ASSERT_EQ(st, 200) << m.dump();
  ASSERT_EQ(m["content"].size(), 2u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_NE(m["content"][1]["text"].get<std::string>().find("Hello!"), std::string::npos) << m.dump();
  // A final assistant message is continued: the answer is what follows it.
  s = serve(prefill, " 42.", "prefill");
  m = s->post("/v1/messages", prefill, &st);
  ASSERT_EQ(st, 200) << m.dump();
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["text"], " 42.");
  EXPECT_EQ(m["stop_reason"], "end_turn");
  // Thinking with a forced tool is refused, as Anthropic refuses it.
  json forced = thinking;
  forced["tools"] = {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}};
  forced["tool_choice"] = {{"type", "any"}};
  m = s->post("/v1/messages", forced, &st);
  EXPECT_EQ(st, 400) << m.dump();
  EXPECT_EQ(m["error"]["type"], "invalid_request_error");
  EXPECT_NE(m["error"]["message"].get<std::string>().find("tool_choice"), std::string::npos) << m.dump();
  // Without thinking, the forced call is allowed.
  forced.erase("thinking");
  EXPECT_EQ(json::parse(anthropic_chat_body(forced.dump()))["chat_template_kwargs"]["enable_thinking"], false);
}

TEST(Conformance, GrammarFieldsOnBothRoutes) {
  Server s;
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Pick one"}}}}, {"max_tokens", 20}};
  const json cmpl = {{"prompt", "Once upon a time"}, {"max_tokens", 20}};
  const auto text_of = [](const json& r) {
    const json& c = r["choices"][0];
    return c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
  };
  for (const auto& [path, base] : {std::pair{"/v1/chat/completions", chat}, std::pair{"/v1/completions", cmpl}}) {
    const struct {
      json fields;
      std::string pattern;
    } cases[] = {
        {{{"regex", "[ab]{3}"}}, "[ab]{3}"},
        {{{"guided_regex", "x[0-9]{2}"}}, "x[0-9]{2}"},
        {{{"grammar", "root ::= \"yes\" | \"no\""}}, "yes|no"},
        {{{"guided_grammar", "root ::= \"up\" | \"down\""}}, "up|down"},
        {{{"guided_choice", {"red", "green", "blue"}}}, "red|green|blue"},
        {{{"structured_outputs", {{"choice", {"left", "right"}}}}}, "left|right"},
        {{{"json_schema", {{"type", "boolean"}}}}, "true|false"},
        {{{"guided_json", R"({"enum": [1, 2]})"}}, "1|2"},
        {{{"structured_outputs", {{"json", {{"const", "k"}}}}}}, "\"k\""},
    };
    for (const auto& c : cases) {
      json body = base;
      body.update(c.fields);
      int st = 0;
      const json r = s.post(path, body, &st);
      ASSERT_EQ(st, 200) << path << " " << c.fields.dump() << ": " << r.dump();
      EXPECT_TRUE(std::regex_match(text_of(r), std::regex(c.pattern)))
          << path << " " << c.fields.dump() << ": " << text_of(r);
    }
    // Two constraints, an unsupported grammar field, a bad choice list: each a 400 naming the field.
    const struct {
      json fields;
      std::string param;
    } refused[] = {
        {{{"regex", "a"}, {"guided_choice", {"a"}}}, "guided_choice"},
        {{{"guided_whitespace_pattern", " *"}}, "guided_whitespace_pattern"},
        {{{"structural_tag", "{}"}}, "structural_tag"},
        {{{"guided_choice", json::array()}}, "guided_choice"},
        {{{"structured_outputs", {{"whitespace_pattern", " "}}}}, "structured_outputs.whitespace_pattern"},
        {{{"json_whitespace", "loose"}}, "json_whitespace"},
    };
    for (const auto& c : refused) {
      json body = base;
      body.update(c.fields);
      int st = 0;
      const json r = s.post(path, body, &st);
      EXPECT_EQ(st, 400) << path << " " << c.fields.dump() << ": " << r.dump();
      EXPECT_EQ(r["error"]["param"], c.param) << path << " " << r.dump();
    }
  }
}

TEST(Conformance, ContextOverflowInTheWordsClientsLookFor) {
  Server s;  // stories260K, max_context 512
  std::string longtext;
  for (int i = 0; i < 200; ++i) longtext += "Once upon a time there was ";
  const auto expect_overflow = [&](const json& r, int st, const std::string& param) {
    EXPECT_EQ(st, 400) << r.dump();
    EXPECT_EQ(r["error"]["code"], "context_length_exceeded") << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("maximum context length"), std::string::npos) << r.dump();
  };
  int st = 0;
  json r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", longtext}}}}}, &st);
  expect_overflow(r, st, "messages");
  r = s.post("/v1/completions", {{"prompt", longtext}}, &st);
  expect_overflow(r, st, "prompt");
  r = s.post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 510}}, &st);
  expect_overflow(r, st, "max_tokens");
  // Anthropic's route: its error type, the prompt and the limit in its own wording.
  r = s.post("/v1/messages", {{"max_tokens", 10}, {"messages", {{{"role", "user"}, {"content", longtext}}}}}, &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(std::regex_search(r["error"]["message"].get<std::string>(),
                                std::regex("^prompt is too long: [0-9]+ tokens > 511 maximum")))
      << r.dump();
  r = s.post("/v1/messages", {{"max_tokens", 510}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("input length and `max_tokens` exceed context limit"),
            std::string::npos)
      << r.dump();
}

TEST(Conformance, AToolCallTurnWithNullContentRendersInThePlainTemplate) {
  Server s;
  int st = 0;
  const json r =
      s.post("/v1/chat/completions",
             {{"messages",
               {{{"role", "user"}, {"content", "Weather?"}},
                {{"role", "assistant"},
                 {"content", nullptr},
                 {"tool_calls",
                  {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{}"}}}}}}},
                {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}},
              {"max_tokens", 4}},
             &st);
  EXPECT_EQ(st, 200) << r.dump();
}

TEST(Conformance, ContinuingTheFinalMessageNeedsAddGenerationPromptOff) {
  Server s;
  int st = 0;
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once"}}}},
               {"max_tokens", 2},
               {"continue_final_message", true}};
  json r = s.post("/v1/chat/completions", body, &st);  // add_generation_prompt defaults to true, as vLLM's
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "continue_final_message") << r.dump();
  body["add_generation_prompt"] = false;
  r = s.post("/v1/chat/completions", body, &st);
  EXPECT_EQ(st, 200) << r.dump();
  body["add_generation_prompt"] = "no";
  r = s.post("/v1/chat/completions", body, &st);
  EXPECT_EQ(st, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "add_generation_prompt") << r.dump();
}

TEST(Conformance, ASecondServerCannotTakeAPortInUse) {
  Server s;
  BackendConfig bc;
  bc.kind = "cpu";
  std::vector<std::unique_ptr<ServedModel>> models;
  models.push_back(std::make_unique<ServedModel>(model_config(), bc, serve_registry()));
  HttpServer second(std::move(models), ServerConfig{});
  EXPECT_LT(second.bind("127.0.0.1", s.port()), 0);
}

TEST(Conformance, StreamsDeclareUtf8AndObjectsCarrySystemFingerprint) {
  Server s;
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}, {"stream", true}};
  auto r = s.client().Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream; charset=utf-8");
  for (const json& e : data_events(r->body)) {
    EXPECT_TRUE(e.contains("system_fingerprint")) << e.dump();
  }
  r = s.client().Post("/v1/messages", json{{"max_tokens", 3}, {"stream", true}, {"messages", chat["messages"]}}.dump(),
                      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream; charset=utf-8");
  int st = 0;
  json body = chat;
  body.erase("stream");
  const json c = s.post("/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200);
  ASSERT_TRUE(c.contains("system_fingerprint"));
  EXPECT_TRUE(c["system_fingerprint"].is_null());
}

TEST(Conformance, AliasesRouteOtherNamesToAModel) {
  ModelConfig mc = model_config();
  mc.aliases = {"gpt-4o", "claude-*"};
  Server s({}, mc);
  int st = 0;
  for (const char* name : {"stories", "gpt-4o", "claude-sonnet-4-5", "claude-3-haiku-20240307"}) {
    const json r =
        s.post("/v1/chat/completions",
               {{"model", name}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}, &st);
    EXPECT_EQ(st, 200) << name << ": " << r.dump();
    EXPECT_EQ(r["model"], "stories") << name;
  }
  const json m = s.post(
      "/v1/messages",
      {{"model", "claude-opus-4"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, &st);
  EXPECT_EQ(st, 200) << m.dump();
  const json r =
      s.post("/v1/chat/completions",
             {{"model", "gpt-4"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}, &st);
  EXPECT_EQ(st, 404) << r.dump();
  EXPECT_EQ(r["error"]["code"], "model_not_found");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("aliases"), std::string::npos);
}

// vLLM's return_token_ids: the prompt's ids as the server encoded them, and each choice's ids, whole
// and streamed (RL trainers and routers read them instead of re-tokenizing).
TEST(Conformance, ReturnTokenIdsGivesThePromptsAndTheChoicesIds) {
  Server s;
  const std::vector<int32_t> prompt0 =
      s.post("/tokenize", {{"prompt", "Once upon a time"}})["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> prompt1 =
      s.post("/tokenize", {{"prompt", "The cat"}})["tokens"].get<std::vector<int32_t>>();
  json body = {{"prompt", {"Once upon a time", "The cat"}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"ignore_eos", true},
               {"return_token_ids", true}};
  const json r = s.post("/v1/completions", body);
  ASSERT_EQ(r["choices"].size(), 2u) << r.dump();
  std::vector<std::vector<int32_t>> ids(2);
  for (const json& c : r["choices"]) {
    const size_t i = c["index"];
    EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), i == 0 ? prompt0 : prompt1);
    ids[i] = c["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids[i].size(), 6u);
    // (Decoded after the prompt: SentencePiece drops a leading space at the start of a text.)
    std::vector<int32_t> whole = i == 0 ? prompt0 : prompt1;
    whole.insert(whole.end(), ids[i].begin(), ids[i].end());
    const std::string prompt_text = s.post("/detokenize", {{"tokens", i == 0 ? prompt0 : prompt1}})["prompt"];
    EXPECT_EQ(s.post("/detokenize", {{"tokens", whole}})["prompt"], prompt_text + c["text"].get<std::string>());
  }
  // Streamed: the prompt's ids on each choice's first chunk, the tokens spread over the chunks.
  std::vector<json> events;
  s.stream("/v1/completions", body, &events);
  std::vector<std::vector<int32_t>> streamed(2);
  std::vector<int> prompts_seen(2);
  for (const json& e : events)
    for (const json& c : e["choices"]) {
      const size_t i = c["index"];
      if (c.contains("prompt_token_ids")) {
        EXPECT_EQ(streamed[i].size(), 0u) << "the prompt's ids come first";
        EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), i == 0 ? prompt0 : prompt1);
        ++prompts_seen[i];
      }
      for (const json& t : c["token_ids"]) streamed[i].push_back(t.get<int32_t>());
    }
  EXPECT_EQ(prompts_seen, std::vector<int>({1, 1}));
  EXPECT_EQ(streamed, ids);
  // Chat: the prompt's ids on the response (streamed: its first chunk), the answer's on the choice.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 5},
               {"temperature", 0},
               {"ignore_eos", true},
               {"return_token_ids", true}};
  const json c = s.post("/v1/chat/completions", chat);
  const std::vector<int32_t> chat_prompt = s.post("/tokenize", {{"messages", chat["messages"]}})["tokens"];
  EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), chat_prompt) << c.dump();
  EXPECT_EQ(c["choices"][0]["token_ids"].size(), 5u) << c.dump();
  events.clear();
  s.stream("/v1/chat/completions", chat, &events);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["prompt_token_ids"].get<std::vector<int32_t>>(), chat_prompt);
  std::vector<int32_t> chat_ids;
  for (const json& e : events) {
    if (&e != &events[0]) {
      EXPECT_FALSE(e.contains("prompt_token_ids"));
    }
    for (const json& ch : e["choices"])
      for (const json& t : ch["token_ids"]) chat_ids.push_back(t.get<int32_t>());
  }
  EXPECT_EQ(chat_ids, c["choices"][0]["token_ids"].get<std::vector<int32_t>>());
  // Without the field, none of them.
  chat.erase("return_token_ids");
  const json plain = s.post("/v1/chat/completions", chat);
  EXPECT_FALSE(plain.contains("prompt_token_ids"));
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
}

}  // namespace
}  // namespace kiln::serve::test
