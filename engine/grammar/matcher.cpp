// The matcher: a pushdown automaton over the flattened grammar.
//
// A position is an index into one flat array holding every alternative of every rule, each
// terminated by END. A stack is an interned node (position, parent), its parent the position to
// return to after the current rule; ROOT (node 0) is below the root rule. A state is the sorted
// set of stacks whose top is a byte element, plus whether the input so far is complete (accept).
// Advancing by a byte keeps the stacks whose top accepts it, moves each past that element and
// closes it: a rule reference pushes the return position and continues at each alternative (a
// reference last in its alternative pushes nothing: tail calls keep right recursion flat); END
// pops. Nodes, states and each state's 256 transitions are interned per matcher, so walking the
// vocabulary trie a second time through the same states costs a table lookup per byte.
#include "grammar/matcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace kiln::grammar {

namespace {
enum : uint8_t { kBytes, kRule, kEnd };
struct Flat {
  uint8_t kind;
  uint32_t index;  // bytes: set index; rule: rule id
};
constexpr int32_t kDead = -1;
constexpr int32_t kUnknown = -2;
// Per request: ambiguous grammars can make the parse stacks multiply with every byte; past these a
// request fails alone (its choice ends with the error) rather than taking the server's memory.
constexpr size_t kMaxStacks = 4096, kMaxNodes = 2u << 20, kMaxStates = 200000;

uint64_t pair_key(uint32_t a, uint32_t b) {
  return (uint64_t{a} << 32) | b;
}
}  // namespace

// ---- the compiled grammar, shared by requests

struct CompiledGrammar::Impl {
  Grammar g;
  std::shared_ptr<const TokenTable> tokens;
  std::vector<Flat> flat;
  std::vector<std::vector<uint32_t>> alts;  // per rule: start positions

  // Masks by state key. Entries are immutable once in; the whole cache is dropped when it
  // outgrows its budget (states recur within a request, so it refills with what is in use).
  size_t cache_budget = 0;
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> masks;
  mutable MaskCacheStats stats;
};

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> tokens, size_t cache_bytes)
    : impl_(std::make_unique<Impl>()) {
  g.validate();
  Impl& m = *impl_;
  m.g = std::move(g);
  m.tokens = std::move(tokens);
  m.cache_budget = cache_bytes;
  m.alts.resize(m.g.rules.size());
  m.flat.reserve(m.g.element_count());
  for (size_t r = 0; r < m.g.rules.size(); ++r)
    for (const Sequence& s : m.g.rules[r].alts) {
      m.alts[r].push_back(static_cast<uint32_t>(m.flat.size()));
      for (const Element& e : s) m.flat.push_back({e.kind == Element::bytes ? kBytes : kRule, e.index});
      m.flat.push_back({kEnd, 0});
    }
}

CompiledGrammar::~CompiledGrammar() = default;
const Grammar& CompiledGrammar::grammar() const {
  return impl_->g;
}
const TokenTable& CompiledGrammar::tokens() const {
  return *impl_->tokens;
}
MaskCacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

// ---- per-request state

struct Matcher::State {
  struct Node {
    uint32_t pos, parent;
  };
  struct Set {
    std::vector<uint32_t> nodes;  // sorted
    bool accept = false;
    ByteSet first;  // bytes some stack accepts
  };

  const CompiledGrammar::Impl& c;
  std::vector<Node> nodes{{0, 0}};  // 0: ROOT
  std::unordered_map<uint64_t, uint32_t> node_ids;
  std::vector<Set> sets;
  // Transitions, 256 per state in one array, a state's row made on its first advance: kUnknown
  // until computed, kDead from the start for the bytes no stack accepts (the trie walk then needs
  // one load per node).
  std::vector<int32_t> next;
  std::vector<int32_t> row;  // per state: its row in `next`, or -1
  std::unordered_map<std::string, int32_t> set_ids;
  std::vector<int32_t> history;  // states after each accepted token; front: the start
  std::vector<uint8_t> ended;    // per history entry: a stop token ended the match there
  // Scratch for closures.
  std::vector<uint32_t> out;
  std::vector<std::pair<uint32_t, uint32_t>> work;
  std::unordered_set<uint64_t> seen;
  bool accept = false;
  std::vector<int32_t> walk;  // trie walk: state per depth

  explicit State(const CompiledGrammar::Impl& impl) : c(impl) {}

  [[noreturn]] static void too_big(const char* what, size_t limit) {
    throw GrammarError(
        fmt::format("the grammar is too ambiguous to run: more than {} {}; simplify it (an anyOf "
                    "or recursion whose branches start alike)",
                    limit, what));
  }

  uint32_t node(uint32_t pos, uint32_t parent) {
    auto [it, fresh] = node_ids.try_emplace(pair_key(pos, parent), static_cast<uint32_t>(nodes.size()));
    if (fresh) {
      if (nodes.size() >= kMaxNodes) too_big("parse stack entries", kMaxNodes);
      nodes.push_back({pos, parent});
    }
    return it->second;
  }

  // The stacks reached from (pos, parent) without consuming input: an explicit worklist, since a
  // chain of rule references as deep as the grammar is long would overflow the thread's stack.
  void close(uint32_t pos0, uint32_t parent0) {
    work.assign(1, {pos0, parent0});
    while (!work.empty()) {
      const auto [pos, parent] = work.back();
      work.pop_back();
      const Flat& f = c.flat[pos];
      if (f.kind == kBytes) {
        out.push_back(node(pos, parent));
        continue;
      }
      if (!seen.insert(pair_key(pos, parent)).second) continue;  // reached before by another path
      if (f.kind == kEnd) {
        if (parent == 0) {
          accept = true;
        } else {
          const Node p = nodes[parent];
          work.push_back({p.pos, p.parent});
        }
        continue;
      }
      const uint32_t ret = c.flat[pos + 1].kind == kEnd ? parent : node(pos + 1, parent);
      for (uint32_t a : c.alts[f.index]) work.push_back({a, ret});
    }
  }

  int32_t intern() {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.empty() && !accept) return kDead;
    if (out.size() > kMaxStacks) too_big("parses open at once", kMaxStacks);
    std::string key(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(uint32_t));
    key.push_back(accept ? 'a' : '-');
    auto [it, fresh] = set_ids.try_emplace(std::move(key), static_cast<int32_t>(sets.size()));
    if (fresh) {
      if (sets.size() >= kMaxStates) too_big("parser states", kMaxStates);
      Set s;
      s.nodes = out;
      s.accept = accept;
      for (uint32_t n : s.nodes) s.first.add(c.g.sets[c.flat[nodes[n].pos].index]);
      sets.push_back(std::move(s));
      row.push_back(-1);
    }
    return it->second;
  }

  size_t row_of(int32_t id) {
    int32_t& r = row[static_cast<size_t>(id)];
    if (r < 0) {
      r = static_cast<int32_t>(next.size() / 256);
      next.resize(next.size() + 256, kDead);
      const ByteSet& first = sets[static_cast<size_t>(id)].first;
      for (int b = 0; b < 256; ++b)
        if (first.has(static_cast<uint8_t>(b))) next[static_cast<size_t>(r) * 256 + static_cast<size_t>(b)] = kUnknown;
    }
    return static_cast<size_t>(r);
  }

  int32_t start() {
    out.clear();
    seen.clear();
    accept = false;
    for (uint32_t a : c.alts[c.g.root]) close(a, 0);
    return intern();
  }

  int32_t advance(int32_t from, uint8_t byte) {
    const size_t slot = row_of(from) * 256 + byte;
    if (next[slot] != kUnknown) return next[slot];
    out.clear();
    seen.clear();
    accept = false;
    // Copy: interning below may grow `sets`.
    const std::vector<uint32_t> stacks = sets[static_cast<size_t>(from)].nodes;
    for (uint32_t n : stacks) {
      const Node nd = nodes[n];
      if (c.g.sets[c.flat[nd.pos].index].has(byte)) close(nd.pos + 1, nd.parent);
    }
    const int32_t to = intern();
    next[slot] = to;
    return to;
  }

  /** The state's content: each stack as its positions from top to ROOT, the stacks sorted, so that
   *  the same state has the same key in every matcher whatever the order it interned nodes in. */
  std::string key(int32_t id) const {
    const Set& s = sets[static_cast<size_t>(id)];
    std::vector<std::string> stacks;
    stacks.reserve(s.nodes.size());
    for (uint32_t n : s.nodes) {
      std::string one;
      for (uint32_t at = n; at != 0; at = nodes[at].parent) {
        const uint32_t pos = nodes[at].pos;
        one.append(reinterpret_cast<const char*>(&pos), sizeof pos);
      }
      stacks.push_back(std::move(one));
    }
    std::sort(stacks.begin(), stacks.end());
    std::string k;
    for (const std::string& one : stacks) {
      const auto len = static_cast<uint32_t>(one.size());
      k.append(reinterpret_cast<const char*>(&len), sizeof len);  // length-prefixed: unambiguous
      k += one;
    }
    k.push_back(s.accept ? 'a' : '-');
    return k;
  }

  void compute_mask(int32_t from, uint64_t* mask) {
    const TokenTable& t = *c.tokens;
    std::memset(mask, 0, t.mask_words() * sizeof(uint64_t));
    const auto& trie = t.trie();
    walk.resize(t.max_depth() + 1);
    walk[0] = from;
    for (size_t i = 0; i < trie.size();) {
      const TokenTable::Node& n = trie[i];
      const int32_t from = walk[n.depth - 1u], r = row[static_cast<size_t>(from)];
      const int32_t known = r >= 0 ? next[static_cast<size_t>(r) * 256 + n.byte] : kUnknown;
      const int32_t s = known != kUnknown ? known : advance(from, n.byte);
      if (s == kDead) {
        i = n.end;
        continue;
      }
      walk[n.depth] = s;
      if (n.token >= 0) mask[n.token >> 6] |= uint64_t{1} << (n.token & 63);
      ++i;
    }
    for (auto [tok, dup] : t.duplicates())
      if ((mask[tok >> 6] >> (tok & 63)) & 1) mask[dup >> 6] |= uint64_t{1} << (dup & 63);
    if (sets[static_cast<size_t>(from)].accept)
      for (int32_t id : t.stop_ids())
        if (id >= 0 && static_cast<size_t>(id) < t.vocab()) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> g)
    : g_(std::move(g)), st_(std::make_unique<State>(g_->impl())) {
  st_->history.push_back(st_->start());
  st_->ended.push_back(0);
  if (st_->history.back() == kDead) throw GrammarError("the grammar matches nothing");
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::fill_mask(uint64_t* mask) {
  State& s = *st_;
  const CompiledGrammar::Impl& c = s.c;
  const size_t words = c.tokens->mask_words();
  if (s.ended.back()) {
    std::memset(mask, 0, words * sizeof(uint64_t));
    return;
  }
  const int32_t cur = s.history.back();
  std::string key = s.key(cur);
  {
    std::lock_guard lock(c.mu);
    if (auto it = c.masks.find(key); it != c.masks.end()) {
      ++c.stats.hits;
      std::memcpy(mask, it->second->data(), words * sizeof(uint64_t));
      return;
    }
    ++c.stats.misses;
  }
  auto m = std::make_shared<std::vector<uint64_t>>(words);
  s.compute_mask(cur, m->data());
  std::memcpy(mask, m->data(), words * sizeof(uint64_t));
  const size_t bytes = words * sizeof(uint64_t) + key.size() + 64;
  std::lock_guard lock(c.mu);
  if (c.stats.bytes + bytes > c.cache_budget) {
    c.masks.clear();
    c.stats.bytes = c.stats.entries = 0;
  }
  if (c.masks.emplace(std::move(key), std::move(m)).second) {
    c.stats.bytes += bytes;
    ++c.stats.entries;
  }
}

bool Matcher::accept_token(int32_t id) {
  State& s = *st_;
  if (s.ended.back()) return false;
  const TokenTable& t = *s.c.tokens;
  if (id < 0 || static_cast<size_t>(id) >= t.vocab()) return false;
  if (t.is_stop(id)) {
    if (!can_end()) return false;
    s.history.push_back(s.history.back());
    s.ended.push_back(1);
    return true;
  }
  const std::string& b = t.bytes(id);
  if (b.empty()) return false;
  return accept_bytes(b);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  State& s = *st_;
  if (s.ended.back()) return false;
  int32_t cur = s.history.back();
  for (unsigned char b : bytes) {
    cur = s.advance(cur, b);
    if (cur == kDead) return false;
  }
  s.history.push_back(cur);
  s.ended.push_back(0);
  return true;
}

void Matcher::rollback(size_t n) {
  State& s = *st_;
  n = std::min(n, s.history.size() - 1);
  s.history.resize(s.history.size() - n);
  s.ended.resize(s.ended.size() - n);
}

size_t Matcher::history() const {
  return st_->history.size() - 1;
}

bool Matcher::can_end() const {
  return st_->sets[static_cast<size_t>(st_->history.back())].accept;
}

bool Matcher::must_end() const {
  const auto& set = st_->sets[static_cast<size_t>(st_->history.back())];
  return set.accept && set.nodes.empty();
}

bool Matcher::is_ended() const {
  return st_->ended.back() != 0;
}

std::string Matcher::forced() const {
  State& s = *st_;
  std::string out;
  int32_t cur = s.history.back();
  while (out.size() < 4096) {
    const auto& set = s.sets[static_cast<size_t>(cur)];
    if (set.accept || set.first.count() != 1) break;
    uint8_t b = 0;
    while (!set.first.has(b)) ++b;
    out.push_back(static_cast<char>(b));
    cur = s.advance(cur, b);
    if (cur == kDead) break;  // cannot happen: `first` holds only bytes some stack accepts
  }
  return out;
}

}  // namespace kiln::grammar
