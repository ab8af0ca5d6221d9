// Running a grammar over a model's tokens.
//
// CompiledGrammar: a grammar prepared for matching (flattened, validated) with the vocabulary it
// masks, and a cache of masks by parser state shared by every request using it (thread-safe).
// Matcher: one per request. Its state is the set of pushdown stacks the input so far allows; each
// step it fills a mask (a bit per token id: may this token come next?), then accepts the sampled
// token. rollback(n) undoes the last n tokens; forced() gives the bytes that must come next when
// only one continuation exists (jump-forward).
//
// A mask is computed by walking the vocabulary trie from the current state, advancing the stacks
// by each byte and skipping a subtree as soon as no stack survives. States recur (the stack inside
// a string value is the same each time), so masks are cached by state and a recurring state costs
// a copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/token_table.hpp"

namespace kiln::grammar {

struct MaskCacheStats {
  uint64_t hits = 0, misses = 0, entries = 0, bytes = 0;
};

class CompiledGrammar {
 public:
  /** Validates `g` (GrammarError) and flattens it. `cache_bytes` bounds the shared mask cache. */
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> tokens, size_t cache_bytes = 16u << 20);
  ~CompiledGrammar();
  const Grammar& grammar() const;
  const TokenTable& tokens() const;
  MaskCacheStats cache_stats() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> g);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  /** Fills `mask` (TokenTable::mask_words() words; bit t of word t/64 set: token t allowed). Stop
   *  tokens are allowed exactly when can_end(). */
  void fill_mask(uint64_t* mask);
  /** Advances by a token; false (state unchanged) when the grammar does not allow it. A stop token
   *  is accepted when can_end() and ends the match (is_ended()). */
  bool accept_token(int32_t id);
  /** Advances by raw bytes (tests, jump-forward); false and unchanged when not allowed. */
  bool accept_bytes(std::string_view bytes);
  /** Undoes the last n accepted tokens (or accept_bytes calls). */
  void rollback(size_t n);
  size_t history() const;

  /** The input so far is a complete sentence of the grammar. */
  bool can_end() const;
  /** Complete, and nothing may follow: the sequence must end now. */
  bool must_end() const;
  /** A stop token was accepted. */
  bool is_ended() const;
  /** The bytes that must come next (possibly empty): the longest run where every state allows
   *  exactly one byte and cannot end. */
  std::string forced() const;

 private:
  struct State;
  std::shared_ptr<const CompiledGrammar> g_;
  std::unique_ptr<State> st_;
};

}  // namespace kiln::grammar
