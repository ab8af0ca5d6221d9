// kiln tokenize: text on stdin → JSON array of token ids (Hugging Face encode semantics).
#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "text/tokenizer.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model"}, {"--add-special", "--no-special"});
  if (!args.ok()) return usage_error("tokenize", args.error());
  if (!args.positionals().empty()) return usage_error("tokenize", "unexpected argument '" + args.positionals()[0] + "'");
  if (!args.has("--model")) return usage_error("tokenize", "--model DIR is required (a folder holding tokenizer.json)");
  try {
    text::Tokenizer tok = text::Tokenizer::from_dir(args.value("--model"));
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    text::EncodeOptions opts;
    opts.add_special = args.flag("--add-special");
    opts.allow_special = !args.flag("--no-special");
    fmt::print("{}\n", nlohmann::json(tok.encode(input, opts)).dump());
    return 0;
  } catch (const std::exception& e) {
    return failure("tokenize", e.what());
  }
}

const bool registered = register_command({
    "tokenize",
    "print the token ids of the text on stdin as a JSON array",
    "usage: kiln tokenize --model DIR [--add-special] [--no-special] < text\n\n"
    "Encodes all of stdin (bytes as given; invalid UTF-8 becomes U+FFFD) with DIR/tokenizer.json and\n"
    "prints the ids as a JSON array, exactly as Hugging Face encode(text, add_special_tokens=False):\n"
    "special-token strings in the text (e.g. <|im_end|>) are recognised as those tokens.\n\n"
    "  --model DIR      folder with tokenizer.json (and tokenizer_config.json)\n"
    "  --add-special    also apply the post-processor (e.g. Gemma's leading <bos>)\n"
    "  --no-special     treat special-token strings as plain text (for untrusted input)\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
