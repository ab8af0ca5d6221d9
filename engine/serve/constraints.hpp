// Constrained decoding for a request: what it asks for (response_format, tool_choice, the
// completions grammar fields) and the compiled grammar, cached per served model.
//
// The grammar covers the whole output. Where the model reasons first, the output starts with the
// reasoning block in the model's markers (qwen3 <think>…</think>, gemma4 <|channel>…<channel|>),
// unconstrained inside, then the constrained body: the mask is off while the model reasons and on
// once reasoning ends, in one automaton. Tool calls are written in the tool parser's own syntax.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.hpp"
#include "grammar/tool_calls.hpp"

namespace kiln::text {
class Tokenizer;
}

namespace kiln::serve {

struct ConstraintSpec {
  enum class Kind { none, json_object, json_schema, regex, ebnf, tools, choice };
  Kind kind = Kind::none;
  std::string text;    ///< json_schema: the schema's JSON; regex; ebnf
  std::string param;   ///< the request field it came from (400s name it)
  bool strict = true;  ///< json_schema: additionalProperties false unless the schema says otherwise
  /** json_object / json_schema: whitespace anywhere between tokens (up to a bound per gap); false:
   *  separators ", " and ": " and nothing else, so a small model cannot spend max_tokens on blanks. */
  bool flexible_whitespace = false;
  std::vector<std::string> choices;      ///< choice: the output is exactly one of these (guided_choice)
  std::vector<grammar::ToolSpec> tools;  ///< tools: the calls allowed (all for "required", one when named)
  bool parallel = true;                  ///< tools: parallel_tool_calls
  bool calls_optional = false;           ///< tools: text, or calls (tool_choice auto with strict tools)
  bool empty() const { return kind == Kind::none; }
};

/** Where the output starts with respect to the model's reasoning markers. */
struct ReasoningFrame {
  std::string open, close;         ///< empty: the model has no reasoning parser kiln knows
  bool inside = false;             ///< the prompt opened the block: the output starts in it
  std::vector<std::string> never;  ///< texts reasoning may not contain (tool-call openers: they end it too)
};

/** The frame of a reasoning parser by name ("qwen3", "gemma4"), given the rendered prompt's end and
 *  the request's thinking flag (-1 template default, 0 off, 1 on), by the parser's own rules; with
 *  thinking off (and no block opened by the prompt) there is none. */
ReasoningFrame reasoning_frame(std::string_view parser, std::string_view prompt_tail, int thinking);

/** The grammar of a whole output; throws grammar::GrammarError. */
grammar::Grammar build_grammar(const ConstraintSpec& spec, const ReasoningFrame& frame, std::string_view tool_parser);

/** Compiled grammars of one served model, shared by its requests (thread-safe). */
class GrammarCache {
 public:
  GrammarCache(const text::Tokenizer* tokenizer, size_t n_vocab, std::vector<int32_t> stop_ids, size_t capacity = 64);
  ~GrammarCache();
  /**
   * The compiled grammar for a request: found, or built and kept (least recently used out). Throws
   * grammar::GrammarError (the request's 400) or HostError (a model without a tokenizer).
   */
  std::shared_ptr<const grammar::CompiledGrammar> get(const ConstraintSpec& spec, const ReasoningFrame& frame,
                                                      std::string_view tool_parser, bool specials_as_text);
  struct Stats {
    uint64_t compiled = 0, reused = 0;
    double compile_seconds = 0;
  };
  Stats stats() const;

 private:
  std::shared_ptr<const grammar::TokenTable> tokens(bool specials_as_text);

  const text::Tokenizer* tok_;
  size_t n_vocab_;
  std::vector<int32_t> stops_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::shared_ptr<const grammar::TokenTable> tables_[2];
  struct Entry {
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    uint64_t used = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace kiln::serve
