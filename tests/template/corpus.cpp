#include "corpus.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "source_paths.hpp"

namespace kiln::test {
namespace {

using ojson = nlohmann::ordered_json;

const char* const kTexts[] = {
    "Hello world, 你好 🙂",
    "What's the weather in Paris?",
    "  leading and trailing spaces  ",
    "line one\nline two\n\nline four",
    "quotes: 'single' \"double\" `back`",
    "braces {{ not a template }} {% raw %} {# no #}",
    "backslashes \\ \\n \\\\ and a tab\there",
    "emoji 👩‍👩‍👧 and combining e\u0301 and RTL שלום",
    "<tool_response>\nfake\n</tool_response>",
    "ends with newline\n",
    "",
    "JSON-looking {\"a\": [1, 2, {\"b\": null}]}",
    "special-looking <|im_start|> <start_of_turn> <|turn>",
    "unicode line sep \u2028 nbsp \u00a0 zero-width \u200b",
    "Ünïcödé ÀÉÎÕÜ straße",
    "x",
};

const char* const kReasoning[] = {
    "Let me think about this.\nStep 1: read.\nStep 2: answer.",
    "  short thought  ",
    "thinking with <b>tags</b> and \"quotes\"",
    "\nnewlines around\n",
};

struct Gen {
  std::mt19937 rng;
  int pick(int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); }
  bool coin(int percent = 50) { return pick(100) < percent; }
  std::string text() { return kTexts[pick(static_cast<int>(std::size(kTexts)))]; }

  ojson tool(int k) {
    ojson props = ojson::object();
    props["city"] = {{"type", "string"}, {"description", "City name, e.g. \"Paris\""}};
    if (k % 2 == 0) props["unit"] = {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}};
    if (k % 3 == 0) props["days"] = {{"type", "array"}, {"items", {{"type", "integer"}}}, {"description", "days"}};
    if (k % 4 == 1)
      props["options"] = {{"type", "object"},
                          {"properties", {{"verbose", {{"type", "boolean"}}}, {"depth", {{"type", "number"}, {"nullable", true}}}}},
                          {"required", {"verbose"}}};
    ojson fn = {{"name", "tool_" + std::to_string(k)},
                {"description", k % 2 ? "Get the weather.\nReturns JSON." : "Search the web for a query"},
                {"parameters", {{"type", "object"}, {"properties", props}, {"required", {"city"}}}}};
    return {{"type", "function"}, {"function", fn}};
  }

  ojson arguments(int k) {
    ojson a = ojson::object();
    a["city"] = text();
    if (k % 2 == 0) a["unit"] = coin() ? "celsius" : "fahrenheit";
    if (k % 3 == 0) a["days"] = {1, 2, 3};
    if (k % 4 == 1) a["options"] = {{"verbose", coin()}, {"depth", coin() ? ojson(2.5) : ojson()}};
    return a;
  }

  ojson request() {
    ojson req = ojson::object();
    ojson msgs = ojson::array();
    const bool tools = coin(40);
    const int ntools = 1 + pick(3);
    if (tools) {
      ojson t = ojson::array();
      for (int k = 0; k < ntools; ++k) t.push_back(tool(k));
      req["tools"] = t;
    }
    if (coin(50)) msgs.push_back({{"role", "system"}, {"content", coin(80) ? text() : std::string("You are terse.")}});
    const int turns = 1 + pick(3);
    int call_id = 0;
    for (int t = 0; t < turns; ++t) {
      if (coin(10))  // content parts, as multimodal clients send them
        msgs.push_back({{"role", "user"}, {"content", {{{"type", "text"}, {"text", text()}}, {{"type", "image"}}}}});
      else
        msgs.push_back({{"role", "user"}, {"content", text()}});
      const bool last = t + 1 == turns;
      if (last && coin(70)) break;  // most requests end with the user's turn
      ojson a = {{"role", "assistant"}};
      const int style = pick(4);
      if (style == 1) a["reasoning_content"] = kReasoning[pick(4)];
      std::string content = text();
      if (style == 2) content = std::string("<think>\n") + kReasoning[pick(4)] + "\n</think>\n\n" + content;
      a["content"] = content;
      if (tools && coin(60)) {
        ojson calls = ojson::array();
        const int n = 1 + pick(2);
        for (int c = 0; c < n; ++c) {
          const int k = pick(ntools);
          ojson args = arguments(k);
          ojson fn = {{"name", "tool_" + std::to_string(k)},
                      {"arguments", coin() ? ojson(args.dump()) : args}};
          calls.push_back({{"id", "call_" + std::to_string(call_id++)}, {"type", "function"}, {"function", fn}});
        }
        if (coin(30)) a["content"] = coin() ? ojson("") : ojson();  // OpenAI clients send "" or null
        a["tool_calls"] = calls;
        msgs.push_back(a);
        for (const auto& c : calls) {
          ojson tm = {{"role", "tool"}, {"tool_call_id", c["id"]}, {"content", coin() ? text() : std::string("{\"temp\": 21.5}")}};
          if (coin(30)) tm["name"] = c["function"]["name"];
          msgs.push_back(tm);
        }
        if (coin(60)) msgs.push_back({{"role", "assistant"}, {"content", text()}});
        else if (!last) continue;
      } else {
        msgs.push_back(a);
      }
    }
    req["messages"] = msgs;
    const int think = pick(3);
    if (think < 2) req["chat_template_kwargs"] = {{"enable_thinking", think == 0}};
    if (coin(25)) req["add_generation_prompt"] = false;
    return req;
  }
};

std::optional<std::string> token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::vector<ojson> make_chat_corpus(uint32_t seed, int count) {
  Gen g{std::mt19937(seed)};
  std::vector<ojson> out;
  for (int i = 0; i < count; ++i) out.push_back(g.request());
  return out;
}

ojson hf_context(const ojson& req, const ojson& config) {
  ojson ctx = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (config.contains(key))
      if (auto t = token_text(config[key])) ctx[key] = *t;
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ojson l = ojson::array();
    for (const auto& t : config["additional_special_tokens"])
      if (auto s = token_text(t)) l.push_back(*s);
    ctx["additional_special_tokens"] = l;
  }
  if (req.contains("chat_template_kwargs"))
    for (const auto& [k, v] : req["chat_template_kwargs"].items()) ctx[k] = v;
  ojson msgs = req["messages"];
  for (auto& m : msgs)
    if (m.contains("tool_calls"))
      for (auto& tc : m["tool_calls"])
        if (tc["function"]["arguments"].is_string()) tc["function"]["arguments"] = ojson::parse(tc["function"]["arguments"].get<std::string>());
  ctx["messages"] = msgs;
  ctx["tools"] = req.contains("tools") ? req["tools"] : ojson();
  ctx["documents"] = ojson();
  ctx["add_generation_prompt"] = req.value("add_generation_prompt", true);
  return ctx;
}

ojson render_with_jinja2(const ojson& cases) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln-jinja2-oracle-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.json") << cases.dump();
  const std::string cmd = "python3 " + (fs::path(KILN_TEST_SOURCE_DIR) / "tools/oracle/render_template.py").string() +
                          " --batch < " + (dir / "in.json").string() + " > " + (dir / "out.json").string();
  ojson out;
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream in(dir / "out.json", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out = ojson::parse(ss.str(), nullptr, false);
  }
  fs::remove_all(dir);
  return out;
}

}  // namespace kiln::test
