// Does a grammar's language contain a byte string? A memoized top-down recognizer (for every rule
// and start offset, the set of end offsets), independent of the matcher's pushdown automaton: the
// JSON Schema compiler checks enum values against patterns and formats with it, and tests use it
// as the matcher's oracle. Validated grammars have no left recursion, so the recursion terminates.
// Fine for short texts; not for generation.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

class Recognizer {
 public:
  explicit Recognizer(const Grammar& g) : g_(g) {}

  bool accepts(std::string_view text) {
    text_ = text;
    memo_.clear();
    return ends(g_.root, 0).count(text.size()) > 0;
  }

 private:
  const std::set<size_t>& ends(uint32_t rule, size_t pos) {
    auto key = std::make_pair(rule, pos);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<size_t> out;
    for (const Sequence& s : g_.rules[rule].alts) {
      std::set<size_t> cur{pos};
      for (const Element& e : s) {
        std::set<size_t> next;
        for (size_t p : cur) {
          if (e.kind == Element::bytes) {
            if (p < text_.size() && g_.sets[e.index].has(static_cast<uint8_t>(text_[p]))) next.insert(p + 1);
          } else {
            const auto& r = ends(e.index, p);
            next.insert(r.begin(), r.end());
          }
        }
        cur.swap(next);
        if (cur.empty()) break;
      }
      out.insert(cur.begin(), cur.end());
    }
    return memo_[key] = std::move(out);
  }

  const Grammar& g_;
  std::string_view text_;
  std::map<std::pair<uint32_t, size_t>, std::set<size_t>> memo_;
};

}  // namespace kiln::grammar
