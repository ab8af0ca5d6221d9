// kiln template: renders an OpenAI chat-completions request with a model's chat template and
// prints the prompt exactly as the model will see it (before tokenization).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.hpp"
#include "template/chat_render.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--request"}, {});
  if (!args.ok()) return usage_error("template", args.error());
  if (!args.positionals().empty()) return usage_error("template", "unexpected argument '" + args.positionals()[0] + "'");
  if (!args.has("--model")) return usage_error("template", "--model DIR is required");
  if (!args.has("--request")) return usage_error("template", "--request FILE is required ('-' reads stdin)");
  std::stringstream body;
  const std::string path = args.value("--request");
  if (path == "-") {
    body << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return failure("template", "cannot read " + path);
    body << in.rdbuf();
  }
  try {
    const ChatTemplate ct = ChatTemplate::from_model_dir(args.value("--model"));
    const std::string prompt = ct.render_request(body.str());
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  } catch (const TemplateError& e) {
    return failure("template", e.what());
  } catch (const HostError& e) {
    return failure("template", e.what());
  }
}

const bool registered = register_command({
    "template",
    "render a chat-completions request with a model's chat template",
    "usage: kiln template --model DIR --request FILE\n\n"
    "Renders an OpenAI chat-completions request body (messages, tools, chat_template_kwargs,\n"
    "add_generation_prompt, true unless the request says otherwise) with the model's chat template\n"
    "and prints the prompt, byte for byte as Hugging Face transformers would render it.\n"
    "The template comes from DIR/chat_template.jinja if present, else DIR/chat_template.json, else\n"
    "DIR/tokenizer_config.json (chat_template: a string, or named templates 'default'/'tool_use');\n"
    "bos_token, eos_token and the other special tokens come from tokenizer_config.json.\n"
    "A template error (e.g. raise_exception) is printed to stderr and makes the exit status 1.\n\n"
    "  --model DIR      model directory\n"
    "  --request FILE   JSON request body ('-' reads stdin)\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
