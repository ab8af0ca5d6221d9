// kiln parse: runs a reasoning parser and/or a tool-call parser over raw model output read from stdin
// and prints the assistant message in OpenAI's shape. A tool for debugging what a model produced.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "parse/message.hpp"
#include "parse/pipeline.hpp"

namespace kiln::cli {
namespace {

/** The request's tools array from FILE: a JSON array, or any object with a `tools` array (a request body). */
bool read_tools(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read --tools file '" + path + "'";
    return false;
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("tools")) j = nlohmann::json(j["tools"]);
  if (!j.is_array()) {
    *error = "--tools file '" + path + "' must hold the request's `tools` array (or a request body with one)";
    return false;
  }
  *out = j.dump();
  return true;
}

bool parse_size(const std::string& s, size_t* out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && *out > 0;
}

int run(const std::vector<std::string>& argv) {
  Args args(argv,
            {"--config", "--reasoning-parser", "--tool-parser", "--tools", "--stream-split", "--thinking",
             "--prompt-tail", "--seed", "--load"},
            {"--deltas"});
  if (!args.ok()) return usage_error("parse", args.error());
  if (!args.positionals().empty()) return usage_error("parse", "unexpected argument '" + args.positionals()[0] + "'");

  ParserRequest request;
  if (args.has("--tools")) {
    std::string error;
    if (!read_tools(args.value("--tools"), &request.tools_json, &error)) return failure("parse", error);
  }
  std::string thinking = args.value("--thinking", "default");
  if (thinking == "on") {
    request.thinking = 1;
  } else if (thinking == "off") {
    request.thinking = 0;
  } else if (thinking != "default") {
    return usage_error("parse", "--thinking takes on, off or default, not '" + thinking + "'");
  }
  request.prompt_tail = args.value("--prompt-tail");
  size_t split = 0, seed = 0;
  if (args.has("--stream-split") && !parse_size(args.value("--stream-split"), &split))
    return usage_error("parse", "--stream-split takes a positive number of bytes");
  if (args.has("--seed") && !parse_size(args.value("--seed"), &seed) && args.value("--seed") != "0")
    return usage_error("parse", "--seed takes a number");

  Config config = load_config_or_empty(args.value("--config"));
  PluginRegistry registry;
  load_plugins(registry, config);
  if (args.has("--load") && !registry.load_file(args.value("--load")))
    return failure("parse", "cannot load plugin '" + args.value("--load") + "': " + registry.refused().back().reason);
  const Component* reasoning = nullptr;
  const Component* tools = nullptr;
  if (args.has("--reasoning-parser"))
    reasoning = &parse::find_parser(registry, KILN_COMPONENT_REASONING_PARSER, args.value("--reasoning-parser"));
  if (args.has("--tool-parser"))
    tools = &parse::find_parser(registry, KILN_COMPONENT_TOOL_PARSER, args.value("--tool-parser"));

  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());

  // Ids come from a fixed seed so that the output is reproducible and both paths agree.
  parse::ParserPipeline once(reasoning, tools, request);
  parse::AssistantMessage message = parse::parse_message(once, input, parse::CallIds(seed));

  if (split > 0) {
    // The streaming path, exactly as a server runs it: N-byte deltas -> events -> OpenAI deltas,
    // and the message a client rebuilds from those deltas.
    parse::ParserPipeline streamed(reasoning, tools, request);
    parse::EventMapper mapper{parse::CallIds(seed)};
    parse::AssistantMessage rebuilt;
    std::vector<ParseEvent> events;
    // Each delta goes through its wire text, as a client receives it.
    auto send = [&](const std::optional<parse::Delta>& delta) {
      if (!delta) return;
      const std::string text = parse::delta_json(*delta);
      if (args.flag("--deltas")) fmt::print("{}\n", text);
      parse::apply_delta(text, rebuilt);
    };
    for (size_t i = 0; i < input.size(); i += split) {
      events.clear();
      streamed.feed(std::string_view(input).substr(i, split), events);
      for (const auto& e : events) send(mapper.on_event(e));
    }
    events.clear();
    streamed.finish(events);
    for (const auto& e : events) send(mapper.on_event(e));
    for (const auto& d : mapper.flush()) send(d);
    for (const auto& p : mapper.check()) fmt::print(stderr, "kiln parse: warning: {}\n", p);
    if (args.flag("--deltas")) fmt::print("{{\"finish_reason\":\"{}\"}}\n", parse::finish_reason(rebuilt));
    if (rebuilt != message) {
      fmt::print(stderr, "kiln parse: the streamed result differs from the one-shot result (a parser bug)\n"
                         "one-shot: {}\nstreamed: {}\n",
                 parse::message_json(message), parse::message_json(rebuilt));
      return 1;
    }
    message = rebuilt;
  }
  fmt::print("{}\n", parse::message_json(message, 2));
  return 0;
}

const bool registered = register_command({
    "parse",
    "parse raw model output (stdin) into an OpenAI assistant message",
    "usage: kiln parse [--reasoning-parser NAME] [--tool-parser NAME] [--tools FILE] [--stream-split N]\n"
    "                  [--thinking on|off|default] [--prompt-tail TEXT] [--deltas] [--seed N] [--config FILE]\n"
    "                  [--load PLUGIN.so]\n\n"
    "Reads raw model output on stdin, runs the reasoning parser and then the tool-call parser on it, and\n"
    "prints the assistant message as OpenAI JSON: content, reasoning_content, tool_calls (ids are\n"
    "call_<24 hex> from --seed, default 0, so output is reproducible). Parsers come from the registry:\n"
    "built-in plugins, the config's plugins.paths, and the plugins/ folder beside kiln (`kiln plugins`\n"
    "lists them).\n\n"
    "  --reasoning-parser NAME  e.g. qwen3, gemma4\n"
    "  --tool-parser NAME       e.g. qwen3_coder, gemma4\n"
    "  --tools FILE             the request's `tools` array (JSON; a whole request body also works);\n"
    "                           argument values are typed by these schemas\n"
    "  --stream-split N         feed the input in N-byte deltas through the streaming path and print the\n"
    "                           message rebuilt from the OpenAI deltas; fails if it differs from one-shot\n"
    "  --deltas                 with --stream-split: also print each OpenAI delta, one JSON per line\n"
    "  --thinking MODE          how the prompt was rendered: on, off, default (the template's default)\n"
    "  --prompt-tail TEXT       the end of the rendered prompt (e.g. an opened <think>)\n"
    "  --config FILE            a kiln YAML config (for plugins.paths)\n"
    "  --load FILE              also load this one plugin file (e.g. an out-of-tree parser)\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
