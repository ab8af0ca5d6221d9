#include "serve/constraints.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/regex.hpp"
#include "text/tokenizer.hpp"

namespace kiln::serve {

using grammar::Element;
using grammar::Grammar;
using grammar::GrammarError;
using grammar::Sequence;

ReasoningFrame reasoning_frame(std::string_view parser, std::string_view tail, int thinking) {
  ReasoningFrame f;
  // The markers and start rules of the reasoning parsers kiln ships (docs/parsers.md); a parser
  // kiln does not know leaves the output unframed, so its reasoning cannot precede the body.
  const auto opened = [&] {
    const size_t open = tail.rfind(f.open), close = tail.rfind(f.close);
    return open != std::string_view::npos && (close == std::string_view::npos || open > close);
  };
  if (parser == "qwen3") {
    f.open = "<think>";
    f.close = "</think>";
    f.inside = opened() || (tail.empty() && thinking != 0);
  } else if (parser == "gemma4") {
    f.open = "<|channel>";
    f.close = "<channel|>";
    f.inside = opened();
  }
  // Thinking turned off and not opened by the prompt: the constrained output has no reasoning
  // block (the parsers would still read one the model opened on its own; the grammar does not let it).
  if (thinking == 0 && !f.inside) f = ReasoningFrame{};
  return f;
}

namespace {

constexpr int kBodyWhitespace = 8;      // around a JSON body, and after reasoning
constexpr int kValueWhitespace = 24;    // between JSON tokens (pretty printing nests a few levels)
constexpr int kToolJsonWhitespace = 2;  // inside JSON values of tool calls

Element whitespace(Grammar& g, int most) {
  grammar::ByteSet ws;
  for (char c : {' ', '\t', '\n', '\r'}) ws.add(static_cast<uint8_t>(c));
  return g.repeat("ws", {g.bytes(ws)}, 0, most);
}

Element body(Grammar& g, const ConstraintSpec& spec, std::string_view tool_parser) {
  using Kind = ConstraintSpec::Kind;
  switch (spec.kind) {
    case Kind::json_object:
    case Kind::json_schema: {
      grammar::SchemaOptions so;
      so.strict = spec.kind == Kind::json_schema && spec.strict;
      so.canonical_numbers = true;
      if (spec.flexible_whitespace) {
        so.max_whitespace = kValueWhitespace;
      } else {
        so.max_whitespace = 0;
        so.item_separator = ", ";
        so.key_separator = ": ";
      }
      const std::string text = spec.kind == Kind::json_object ? std::string(R"({"type": "object"})") : spec.text;
      const Element v = grammar::add_schema(g, text, so, "value");
      if (!spec.flexible_whitespace) return v;
      const Element ws = whitespace(g, kBodyWhitespace);
      return g.add("body", {{ws, v, ws}});
    }
    case Kind::choice: {
      std::vector<Sequence> alternatives;
      for (const std::string& c : spec.choices) alternatives.push_back(g.literal(c));
      return g.add("choice", std::move(alternatives));
    }
    case Kind::regex:
      return grammar::compile_regex(g, spec.text, {.json_string = false, .search = false}, "body");
    case Kind::ebnf: {
      Grammar other = grammar::parse_ebnf(spec.text);
      return Grammar::ref(g.import(other));
    }
    case Kind::tools: {
      const auto syntax = grammar::tool_syntax(tool_parser);
      if (!syntax)
        throw GrammarError(tool_parser.empty()
                               ? std::string("this model has no tool-call parser, so a call cannot be forced; "
                                             "configure tool_parser or use tool_choice 'auto'")
                               : fmt::format("kiln cannot write calls for the '{}' tool-call parser (it can for "
                                             "qwen3_coder and gemma4); use tool_choice 'auto'",
                                             tool_parser));
      grammar::ToolCallOptions o;
      o.syntax = *syntax;
      o.parallel = spec.parallel;
      o.max_whitespace = kToolJsonWhitespace;
      const Element calls = grammar::add_tool_calls(g, spec.tools, o);
      if (!spec.calls_optional) return calls;
      // Text that does not open a call, then optionally the calls: the parser reads the text as
      // content and each call as usual.
      const Element text = grammar::text_excluding(g, "content", grammar::tool_call_openers(*syntax));
      return g.add("content-or-calls", {{text, g.optional("calls", {calls})}});
    }
    case Kind::none:
      break;
  }
  throw GrammarError("no constraint was asked for");
}

}  // namespace

Grammar build_grammar(const ConstraintSpec& spec, const ReasoningFrame& frame, std::string_view tool_parser) {
  Grammar g;
  const uint32_t root = g.rule("root");
  Sequence s;
  if (!frame.close.empty()) {
    Sequence block;
    if (!frame.inside) {
      block.push_back(whitespace(g, kBodyWhitespace));
      const Sequence open = g.literal(frame.open);
      block.insert(block.end(), open.begin(), open.end());
    }
    block.push_back(grammar::text_until(g, "reasoning", frame.close, frame.never));
    block.push_back(whitespace(g, kBodyWhitespace));
    s.push_back(frame.inside ? g.add("reasoning-block", {std::move(block)}) : g.optional("reasoning-block", block));
  }
  s.push_back(body(g, spec, tool_parser));
  g.define(root, {std::move(s)});
  g.root = root;
  return g;
}

GrammarCache::GrammarCache(const text::Tokenizer* tokenizer, size_t n_vocab, std::vector<int32_t> stop_ids,
                           size_t capacity)
    : tok_(tokenizer), n_vocab_(n_vocab), stops_(std::move(stop_ids)), capacity_(capacity) {}

GrammarCache::~GrammarCache() = default;

std::shared_ptr<const grammar::TokenTable> GrammarCache::tokens(bool specials_as_text) {
  std::lock_guard lock(mu_);
  auto& t = tables_[specials_as_text ? 1 : 0];
  // Built under the lock: once per model and flag (≈0.1 s for a 150k vocabulary), and every
  // request that needs it waits for the same table rather than building its own.
  if (!t) t = grammar::TokenTable::from_tokenizer(*tok_, n_vocab_, stops_, specials_as_text);
  return t;
}

std::shared_ptr<const grammar::CompiledGrammar> GrammarCache::get(const ConstraintSpec& spec,
                                                                  const ReasoningFrame& frame,
                                                                  std::string_view tool_parser, bool specials_as_text) {
  if (!tok_) throw_error("[serve] this model has no tokenizer, so its output cannot be constrained");
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|", static_cast<int>(spec.kind), spec.strict,
                                spec.parallel, spec.calls_optional, spec.flexible_whitespace, frame.open, frame.close,
                                frame.inside, fmt::join(frame.never, "\x1f"), tool_parser, specials_as_text);
  key += spec.text;
  for (const std::string& c : spec.choices) key += fmt::format("|{}|{}", c.size(), c);
  for (const grammar::ToolSpec& t : spec.tools) key += fmt::format("|{}|{}|{}", t.name.size(), t.name, t.parameters);
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      it->second.used = ++clock_;
      ++stats_.reused;
      return it->second.grammar;
    }
  }
  auto table = tokens(specials_as_text);
  const auto t0 = std::chrono::steady_clock::now();
  // Built outside the lock: two requests with the same new grammar may both compile it (the
  // second result is dropped), but no request waits behind another's compilation.
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(build_grammar(spec, frame, tool_parser), table);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.compiled;
  stats_.compile_seconds += secs;
  auto [it, fresh] = entries_.try_emplace(key, Entry{compiled, ++clock_});
  if (!fresh) return it->second.grammar;
  while (entries_.size() > capacity_) {
    auto old = std::min_element(entries_.begin(), entries_.end(),
                                [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    entries_.erase(old);
  }
  return compiled;
}

GrammarCache::Stats GrammarCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace kiln::serve
