// kiln detokenize: JSON array of token ids on stdin → the decoded text (Hugging Face decode).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "text/tokenizer.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model"}, {"--skip-special"});
  if (!args.ok()) return usage_error("detokenize", args.error());
  if (!args.positionals().empty()) return usage_error("detokenize", "unexpected argument '" + args.positionals()[0] + "'");
  if (!args.has("--model")) return usage_error("detokenize", "--model DIR is required (a folder holding tokenizer.json)");
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::vector<text::TokenId> ids;
  try {
    auto j = nlohmann::json::parse(input);
    if (!j.is_array()) throw std::runtime_error("not an array");
    for (const auto& v : j) {
      if (!v.is_number_integer()) throw std::runtime_error("element " + v.dump() + " is not an integer");
      ids.push_back(v.get<text::TokenId>());
    }
  } catch (const std::exception& e) {
    return failure("detokenize", std::string("stdin must be a JSON array of token ids, e.g. [9707, 1879]: ") + e.what());
  }
  try {
    text::Tokenizer tok = text::Tokenizer::from_dir(args.value("--model"));
    text::DecodeOptions opts;
    opts.skip_special = args.flag("--skip-special");
    std::string out = tok.decode(ids, opts);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const std::exception& e) {
    return failure("detokenize", e.what());
  }
}

const bool registered = register_command({
    "detokenize",
    "print the text of a JSON array of token ids read from stdin",
    "usage: kiln detokenize --model DIR [--skip-special] < ids.json\n\n"
    "Decodes the ids with DIR/tokenizer.json's decoder and writes the text to stdout with no added\n"
    "newline, exactly as Hugging Face decode(ids).\n\n"
    "  --model DIR       folder with tokenizer.json (and tokenizer_config.json)\n"
    "  --skip-special    leave out special tokens\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
