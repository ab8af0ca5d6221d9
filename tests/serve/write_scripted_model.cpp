// Writes a scripted test model for the Anthropic client test (anthropic_client_test.mjs): the qwen
// family's tokenizer and template, a script answering the first turn with reasoning, text and a
// get_weather call, and one answering the turn after its tool_result; plus a kiln YAML config
// serving it with the scripted plugin module and the qwen3 parsers.
//   write_scripted_model DIR PLUGIN_DIR
#include <cstdio>
#include <fstream>

#include "scripted_model.hpp"
#include "serve/anthropic.hpp"

using namespace kiln::serve::test;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR PLUGIN_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const Family f = qwen();
  // The two turns the client sends, as Anthropic bodies (the client reads them from DIR).
  const json tools = json::parse(R"([{"name": "get_weather", "description": "Weather forecast",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
    "metric": {"type": "boolean"}}, "required": ["city", "days"]}}])");
  json turn1 = {{"model", "scripted"},
                {"max_tokens", 600},
                {"temperature", 0},
                {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris for the next 3 days?"}}}},
                {"tools", tools}};
  // The call's id is the client's to echo; the template renders content only, so any id renders alike.
  json turn2 = turn1;
  turn2["model"] = "scripted-round-trip";  // its own script table: the turns' rows would overlap
  turn2["max_tokens"] = 100;
  turn2["messages"].push_back({{"role", "assistant"},
                               {"content",
                                {{{"type", "text"}, {"text", "Let me look that up.\n"}},
                                 {{"type", "tool_use"},
                                  {"id", "toolu_1"},
                                  {"name", "get_weather"},
                                  {"input", {{"city", "Paris"}, {"days", 3}}}}}}});
  turn2["messages"].push_back(
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "sunny, 21 C"}}}}});
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto place = [&](const std::string& from, const std::string& name) {
    std::filesystem::copy(from, dir + "/" + name, std::filesystem::copy_options::recursive);
    std::filesystem::remove_all(from);
  };
  place(write_model(f), "model");
  place(write_model(f,
                    {{json::parse(kiln::serve::anthropic_chat_body(turn2.dump())),
                      "Sunny all week.\n</think>\n\nIt is sunny in Paris."}},
                    false),
        "model-round-trip");
  std::ofstream(dir + "/turn1.json") << turn1.dump();
  std::ofstream(dir + "/turn2.json") << turn2.dump();
  std::ofstream(dir + "/config.yaml") << "plugins: {paths: [" << argv[2] << "]}\n"
                                      << "models:\n";
  for (const char* m : {"scripted", "scripted-round-trip"})
    std::ofstream(dir + "/config.yaml", std::ios::app)
        << "  - name: " << m << "\n    path: " << (std::string(m) == "scripted" ? "model" : "model-round-trip") << "\n"
        << "    tool_parser: qwen3_coder\n    reasoning_parser: qwen3\n    cache: {memory: 1MiB}\n";
  return 0;
}
