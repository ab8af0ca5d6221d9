// Prompts byte-identical to what transformers renders: request bodies whose tool schemas (nested
// properties, items, enums, $defs), tool-call arguments and chat_template_kwargs hold keys out of
// alphabetical order, rendered by the server for every fixture chat template that takes tools
// (through /tokenize, a real request's prompt_token_ids, and the Anthropic route's own body) and
// by Python Jinja2 as transformers configures it (tools/oracle/render_template.py) from the body
// as the client sent it. And tool-call arguments come back in the order the model wrote them.

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixtures.hpp"
#include "scripted_model.hpp"
#include "serve/anthropic.hpp"
#include "template/corpus.hpp"

namespace kiln::serve::test {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// The client's bodies, as text: every object's keys in an order no sorted map would keep.
constexpr const char* kSchema = R"({"type": "object", "properties": {"zcity": {"type": "string",
  "description": "City"}, "aunit": {"type": "string", "enum": ["kelvin", "celsius"]}, "days": {"type": "array",
  "items": {"$ref": "#/$defs/day"}}}, "required": ["zcity"], "$defs": {"day": {"type": "object", "properties":
  {"when": {"type": "string"}, "at": {"type": "integer"}}}}})";
constexpr const char* kAlarm = R"({"type": "object", "properties": {"when": {"type": "string"}}})";

// The conversation after the system prompt, in OpenAI's shape (the client's, and the Anthropic
// route's conversion of anthropic_body()).
constexpr const char* kMessages = R"({"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function":
      {"name": "get_weather", "arguments": "{\"zcity\": \"Paris\", \"aunit\": \"celsius\", \"days\": [{\"when\": \"today\", \"at\": 9}]}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    {"role": "user", "content": "And tomorrow?"})";

std::string openai_body(const std::string& extra) {
  return std::string(R"({"model": "scripted", "messages": [{"role": "system", "content": "You are terse."}, )") +
         kMessages +
         R"(], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get weather",
    "parameters": )" +
         kSchema + R"(}}, {"type": "function", "function": {"name": "alarm", "parameters": )" + kAlarm +
         R"(, "description": "Set an alarm"}}],
  "chat_template_kwargs": {"zeta": 1, "enable_thinking": false})" +
         extra + "}";
}

std::string anthropic_body() {
  return std::string(R"({"model": "scripted", "max_tokens": 8, "system": "You are terse.", "messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
      "input": {"zcity": "Paris", "aunit": "celsius", "days": [{"when": "today", "at": 9}]}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
      {"type": "text", "text": "And tomorrow?"}]}],
  "tools": [{"name": "get_weather", "description": "Get weather", "input_schema": )") +
         kSchema + R"(}, {"name": "alarm", "input_schema": )" + kAlarm + R"(, "description": "Set an alarm"}]})";
}

/** What vLLM's Anthropic route hands the template for anthropic_body(): the OpenAI chat body with
 *  each tool as {type, function: {name, description, parameters}}; thinking off unless asked. */
std::string anthropic_as_openai() {
  return std::string(R"({"messages": [{"role": "system", "content": "You are terse."}, )") + kMessages +
         R"(], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get weather",
    "parameters": )" +
         kSchema + R"(}}, {"type": "function", "function": {"name": "alarm", "description": "Set an alarm",
    "parameters": )" + kAlarm + R"(}}], "chat_template_kwargs": {"enable_thinking": false}})";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::string name, text;
};

/** The fixture chat templates that take tools. */
std::vector<Fixture> tool_templates() {
  std::vector<Fixture> out;
  const fs::path dir = fs::path(kiln::test::fixtures_dir()) / "chat-templates";
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".jinja") continue;
    std::string text = read(e.path());
    if (text.find("tools") != std::string::npos) out.push_back({e.path().filename().string(), std::move(text)});
  }
  std::sort(out.begin(), out.end(), [](const Fixture& a, const Fixture& b) { return a.name < b.name; });
  return out;
}

std::string decode(const text::Tokenizer& t, const std::vector<int32_t>& ids) {
  return t.decode(ids, text::DecodeOptions{});  // special tokens kept: the prompt as rendered
}

std::vector<int32_t> ids_of(const ojson& a) {
  std::vector<int32_t> ids;
  for (const ojson& x : a) ids.push_back(x.get<int32_t>());
  return ids;
}

TEST(RequestOrder, PromptsAreByteIdenticalToJinja2OnEveryToolTemplateInBothApis) {
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with jinja2 (Debian package python3-jinja2) is not available";
  const std::vector<Fixture> templates = tool_templates();
  if (templates.empty()) GTEST_SKIP() << "missing fixtures: " << kiln::test::fixtures_dir() << " (set KILN_FIXTURES)";
  ASSERT_GE(templates.size(), 5u);  // Qwen3, Qwen3-Coder, Qwen3.5, Gemma 4 (two)
  int client_order = 0;             // templates whose prompt keeps the client's key order

  for (size_t i = 0; i < templates.size(); ++i) {
    const Fixture& fx = templates[i];
    SCOPED_TRACE(fx.name);
    Family f = qwen();
    f.name = "order" + std::to_string(i);
    f.chat_template = fx.text;
    const std::string dir = write_model(f, {}, false, 0, 4096);
    const ojson config = {{"eos_token", f.eos}};
    // The oracle's view: the bodies as the client sent them.
    const ojson sent = ojson::parse(openai_body(""));
    const ojson converted = ojson::parse(anthropic_as_openai());
    const ojson want = kiln::test::render_with_jinja2(
        ojson::array({{{"template", fx.text}, {"context", kiln::test::hf_context(sent, config)}},
                      {{"template", fx.text}, {"context", kiln::test::hf_context(converted, config)}}}));
    ASSERT_TRUE(want.is_array() && want.size() == 2 && want[0]["ok"] == true && want[1]["ok"] == true)
        << "the oracle failed: " << want.dump();
    const std::string want_openai = want[0]["out"], want_anthropic = want[1]["out"];
    // The template shows the schema's keys: in the client's order (Gemma 4's sorts them itself).
    ASSERT_NE(want_openai.find("aunit"), std::string::npos);
    client_order += want_openai.find("zcity") < want_openai.find("aunit");

    const text::Tokenizer tok = text::Tokenizer::from_dir(dir);
    const ModelConfig mc = scripted_config(f, dir);
    Server s({}, mc);
    // /tokenize
    auto r = s.client().Post("/tokenize", openai_body(""), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(decode(tok, ids_of(ojson::parse(r->body)["tokens"])), want_openai);
    // A real request's prompt (vLLM's return_token_ids), whole and streamed.
    r = s.client().Post("/v1/chat/completions", openai_body(R"(, "max_tokens": 1, "return_token_ids": true)"),
                        "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const ojson answer = ojson::parse(r->body);
    EXPECT_EQ(decode(tok, ids_of(answer["prompt_token_ids"])), want_openai);
    EXPECT_EQ(answer["choices"][0]["token_ids"].size(), 1u);
    r = s.client().Post("/v1/chat/completions",
                        openai_body(R"(, "max_tokens": 1, "return_token_ids": true, "stream": true)"),
                        "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const size_t first = r->body.find("data: ") + 6;
    const ojson chunk = ojson::parse(r->body.substr(first, r->body.find("\n\n") - first));
    EXPECT_EQ(decode(tok, ids_of(chunk["prompt_token_ids"])), want_openai);
    // Anthropic: the body the route hands the engine, rendered by the served model, and its count.
    ServedModel sm(mc, BackendConfig{}, serve_registry());
    ApiError err;
    const auto req = parse_messages(
        anthropic_body(), [&](const std::string&, ApiError*) { return &sm; }, ServerConfig::Limits{}, {}, &err);
    ASSERT_TRUE(req) << err.message;
    std::string rendered;
    sm.encode_chat(*req->gen->chat_input, &rendered);
    EXPECT_EQ(rendered, want_anthropic);
    r = s.client().Post("/v1/messages/count_tokens", anthropic_body(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(ojson::parse(r->body)["input_tokens"], tok.encode(want_anthropic).size());
    fs::remove_all(dir);
  }
  EXPECT_GE(client_order, 3);  // the Qwen templates print the schemas with tojson
}

// The model writes zcity before aunit: both APIs hand the arguments back in that order.
TEST(RequestOrder, ToolCallArgumentsComeBackInTheOrderTheModelWroteThem) {
  Family f = qwen();
  f.name = "order_args";
  f.script =
      "Checking.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=zcity>\nParis\n</parameter>\n"
      "<parameter=aunit>\ncelsius\n</parameter>\n</function>\n</tool_call>";
  const std::string tools =
      std::string(R"([{"type": "function", "function": {"name": "get_weather", "parameters": )") + kSchema + "}}]";
  const std::string openai =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "temperature": 0, "tools": )" + tools + "}";
  const std::string anthropic = std::string(R"({"model": "scripted", "max_tokens": 200, "messages": [{"role": "user",
    "content": "Weather in Paris?"}], "tools": [{"name": "get_weather", "input_schema": )") +
                                kSchema + "}]}";
  // The script answers the OpenAI body; the Anthropic one renders to the same length (its
  // enable_thinking: false is not in this template), so it is answered too.
  const std::string dir = write_model(f, {{json::parse(openai), f.script}}, false);
  Server s({}, scripted_config(f, dir));
  auto r = s.client().Post("/v1/chat/completions", openai, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson o = ojson::parse(r->body);
  ASSERT_EQ(o["choices"][0]["message"]["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(o["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"zcity": "Paris", "aunit": "celsius"})");
  r = s.client().Post("/v1/messages", anthropic, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson a = ojson::parse(r->body);
  ASSERT_EQ(a["stop_reason"], "tool_use") << r->body;
  const ojson& input = a["content"].back()["input"];
  ASSERT_EQ(input.size(), 2u) << r->body;
  EXPECT_EQ(input.begin().key(), "zcity") << r->body;
  EXPECT_EQ(input.dump(), R"({"zcity":"Paris","aunit":"celsius"})");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::serve::test
