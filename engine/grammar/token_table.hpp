// A model's vocabulary as the matcher sees it: each token's bytes, arranged as a trie in preorder
// so that one walk over it, pruning every subtree the grammar rejects, gives a step's mask.
// Built once per served model and shared (immutable) by every request's matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::text {
class Tokenizer;
}

namespace kiln::grammar {

class TokenTable {
 public:
  /**
   * `bytes[id]` is what token `id` adds to the text. Tokens with empty bytes never match (unused
   * ids, and control tokens the caller leaves out). `stop_ids` end a sequence: allowed exactly
   * when the grammar can end there.
   */
  TokenTable(std::vector<std::string> bytes, std::vector<int32_t> stop_ids);
  /**
   * From a tokenizer: vocabulary tokens by their bytes. Special (control) tokens match by their text
   * when `specials_as_text` (the detokenizer keeps them: a chat format's tags such as Gemma 4's
   * <|tool_call>), else never (the detokenizer drops them, so the text the grammar saw would not be
   * the text the client gets). `n_vocab` is the model's (ids past the tokenizer's never match).
   */
  static std::shared_ptr<const TokenTable> from_tokenizer(const text::Tokenizer& tok, size_t n_vocab,
                                                          const std::vector<int32_t>& stop_ids, bool specials_as_text);

  struct Node {
    uint32_t end;    ///< one past this node's subtree (preorder index)
    int32_t token;   ///< the token whose bytes end here, or -1 (equal tokens: see `same`)
    uint16_t depth;  ///< 1 for a first byte
    uint8_t byte;
  };

  size_t vocab() const { return bytes_.size(); }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  const std::vector<Node>& trie() const { return trie_; }
  /** The longest token's length in bytes (the trie's depth). */
  size_t max_depth() const { return max_depth_; }
  /** Tokens with the same bytes as the one a node names (rare: duplicates in a vocabulary). */
  const std::vector<std::pair<int32_t, int32_t>>& duplicates() const { return dups_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& stop_ids() const { return stops_; }
  bool is_stop(int32_t id) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stops_;
  std::vector<Node> trie_;
  size_t max_depth_ = 0;
  std::vector<std::pair<int32_t, int32_t>> dups_;  ///< (token in trie, duplicate)
};

}  // namespace kiln::grammar
