// kiln grammar: compiles a JSON Schema, regex or EBNF grammar as the server would for constrained
// decoding, reports what is refused (naming the keyword's place), prints the grammar as EBNF, and
// optionally checks a text against it.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "grammar/regex.hpp"

namespace kiln::cli {
namespace {

bool read_input(const std::string& path, std::string* out) {
  std::stringstream s;
  if (path == "-") {
    s << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    s << in.rdbuf();
  }
  *out = s.str();
  return true;
}

/** Every byte a token: the check then walks the text byte by byte through the real matcher. */
std::shared_ptr<const grammar::TokenTable> byte_tokens() {
  std::vector<std::string> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  return std::make_shared<const grammar::TokenTable>(std::move(bytes), std::vector<int32_t>{});
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--schema", "--regex", "--ebnf", "--check", "--max-whitespace"},
            {"--json-object", "--loose", "--quiet"});
  if (!args.ok()) return usage_error("grammar", args.error());
  if (!args.positionals().empty()) return usage_error("grammar", "unexpected argument '" + args.positionals()[0] + "'");
  const int sources = args.has("--schema") + args.has("--regex") + args.has("--ebnf") + args.flag("--json-object");
  if (sources != 1)
    return usage_error("grammar", "give exactly one of --schema FILE, --regex PATTERN, --ebnf FILE, --json-object");
  try {
    grammar::Grammar g;
    grammar::SchemaOptions so;
    so.strict = !args.flag("--loose");
    if (args.has("--max-whitespace")) so.max_whitespace = std::stoi(args.value("--max-whitespace"));
    if (args.has("--schema")) {
      std::string text;
      if (!read_input(args.value("--schema"), &text))
        return failure("grammar", "cannot read " + args.value("--schema"));
      g = grammar::schema_to_grammar(text, so);
    } else if (args.flag("--json-object")) {
      g = grammar::json_object_grammar(so);
    } else if (args.has("--regex")) {
      g.root = grammar::compile_regex(g, args.value("--regex"), {}, "root").index;
    } else {
      std::string text;
      if (!read_input(args.value("--ebnf"), &text)) return failure("grammar", "cannot read " + args.value("--ebnf"));
      g = grammar::parse_ebnf(text);
    }
    g.validate();
    if (!args.flag("--quiet")) {
      const std::string text = g.to_text();
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fprintf(stderr, "grammar: %zu rules, %zu elements, %zu byte sets\n", g.rules.size(), g.element_count(),
                 g.sets.size());
    if (!args.has("--check")) return 0;
    std::string input;
    if (!read_input(args.value("--check"), &input)) return failure("grammar", "cannot read " + args.value("--check"));
    grammar::Matcher m(std::make_shared<const grammar::CompiledGrammar>(std::move(g), byte_tokens()));
    for (size_t i = 0; i < input.size(); ++i)
      if (!m.accept_bytes(std::string_view(input).substr(i, 1))) {
        std::fprintf(stderr, "rejected: byte %zu (0x%02x) is not allowed after \"%s\"\n", i,
                     static_cast<unsigned char>(input[i]), input.substr(i > 40 ? i - 40 : 0, i > 40 ? 40 : i).c_str());
        return 1;
      }
    if (!m.can_end()) {
      std::fprintf(stderr, "rejected: the text is incomplete (it could continue with \"%s\")\n", m.forced().c_str());
      return 1;
    }
    std::fprintf(stderr, "accepted\n");
    return 0;
  } catch (const grammar::GrammarError& e) {
    return failure("grammar", e.what());
  } catch (const std::exception& e) {
    return failure("grammar", e.what());
  }
}

const bool registered = register_command({
    "grammar",
    "compile a JSON Schema, regex or EBNF grammar for constrained decoding; print it, check a text",
    "usage: kiln grammar (--schema FILE | --regex PATTERN | --ebnf FILE | --json-object) [options]\n\n"
    "Compiles what a request's response_format / json_schema / regex / grammar field would, prints\n"
    "the grammar as EBNF (the syntax --ebnf reads) and its size on stderr. A schema keyword kiln does\n"
    "not support is an error naming its place (e.g. /properties/age/multipleOf), exit status 1.\n\n"
    "  --schema FILE          JSON Schema ('-' reads stdin); strict: additionalProperties false unless given\n"
    "  --loose                plain JSON Schema semantics (additional properties allowed unless false)\n"
    "  --max-whitespace N     whitespace between JSON tokens (default 24; 0: compact)\n"
    "  --regex PATTERN        the whole text matches PATTERN (ECMAScript subset)\n"
    "  --ebnf FILE            GBNF-style grammar with a root rule ('-' reads stdin)\n"
    "  --json-object          any JSON object (response_format json_object)\n"
    "  --check FILE           also run FILE's bytes through the matcher: accepted (exit 0) or where it fails\n"
    "  --quiet                do not print the grammar\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
