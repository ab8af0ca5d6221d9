#include "grammar/token_table.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "text/tokenizer.hpp"

namespace kiln::grammar {

TokenTable::TokenTable(std::vector<std::string> bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(bytes)), stops_(std::move(stop_ids)) {
  for (int32_t s : stops_)
    if (s >= 0 && static_cast<size_t>(s) < bytes_.size()) bytes_[static_cast<size_t>(s)].clear();  // never by bytes
  // Sort the matchable tokens by their bytes; the trie in preorder is then one pass with the
  // longest common prefix of neighbours.
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string &x = bytes_[static_cast<size_t>(a)], &y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  std::vector<uint32_t> open;  // node index at each depth of the current path
  const std::string* prev = nullptr;
  int32_t prev_id = -1;
  for (int32_t id : order) {
    const std::string& t = bytes_[static_cast<size_t>(id)];
    if (t.size() > 0xFFFF)
      throw_error("[grammar] token {} is {} bytes long; at most 65535 are supported", id, t.size());
    if (prev && *prev == t) {
      dups_.push_back({prev_id, id});
      continue;
    }
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    // Close the nodes past the common prefix.
    while (open.size() > common) {
      trie_[open.back()].end = static_cast<uint32_t>(trie_.size());
      open.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      open.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back({0, -1, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(t[d])});
    }
    trie_[open.back()].token = id;
    max_depth_ = std::max(max_depth_, t.size());
    prev = &t;
    prev_id = id;
  }
  while (!open.empty()) {
    trie_[open.back()].end = static_cast<uint32_t>(trie_.size());
    open.pop_back();
  }
}

bool TokenTable::is_stop(int32_t id) const {
  return std::find(stops_.begin(), stops_.end(), id) != stops_.end();
}

std::shared_ptr<const TokenTable> TokenTable::from_tokenizer(const text::Tokenizer& tok, size_t n_vocab,
                                                             const std::vector<int32_t>& stop_ids,
                                                             bool specials_as_text) {
  std::vector<std::string> bytes(n_vocab);
  const size_t n = std::min(n_vocab, tok.vocab_size());
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<text::TokenId>(i);
    if (tok.id_to_token(id).empty()) continue;  // an unused id
    if (tok.is_special(id)) {
      if (specials_as_text) bytes[i] = std::string(tok.id_to_token(id));
      continue;
    }
    bytes[i] = tok.token_bytes(id);
  }
  return std::make_shared<const TokenTable>(std::move(bytes), stop_ids);
}

}  // namespace kiln::grammar
