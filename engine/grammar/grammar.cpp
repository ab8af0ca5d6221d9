// The grammar IR's builders (repetition, UTF-8 ranges, marker-free text) and its validation.
#include "grammar/grammar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>

namespace kiln::grammar {

int ByteSet::count() const {
  return std::popcount(w[0]) + std::popcount(w[1]) + std::popcount(w[2]) + std::popcount(w[3]);
}

std::string Grammar::unique_name(std::string_view name) {
  std::string base(name.empty() ? "rule" : name);
  std::string n = base;
  // The next suffix to try is remembered per base name: repeat() makes thousands of one name.
  for (uint32_t& k = suffix_[base]; names_.count(n);) n = fmt::format("{}-{}", base, ++k);
  return n;
}

uint32_t Grammar::rule(std::string_view name) {
  // A bound on what one request can make the server build (several long maxLength strings, a
  // regex of counted repeats): each rule costs ~100 bytes here and again once flattened.
  constexpr size_t kMaxRules = 250000;
  if (rules.size() >= kMaxRules)
    throw GrammarError(
        fmt::format("the grammar would need more than {} rules (long counted repetitions such as "
                    "maxLength, maxItems or {{n,m}} add one per count); ask for smaller counts",
                    kMaxRules));
  const auto id = static_cast<uint32_t>(rules.size());
  Rule r;
  r.name = unique_name(name);
  names_[r.name] = id;
  rules.push_back(std::move(r));
  return id;
}

void Grammar::define(uint32_t id, std::vector<Sequence> alts) {
  Rule& r = rules.at(id);
  if (r.defined) throw GrammarError(fmt::format("rule '{}' is defined twice", r.name));
  r.alts = std::move(alts);
  r.defined = true;
}

Element Grammar::add(std::string_view name, std::vector<Sequence> alts) {
  const uint32_t id = rule(name);
  define(id, std::move(alts));
  return ref(id);
}

Element Grammar::bytes(const ByteSet& s) {
  const auto key = [](const ByteSet& b) { return std::string(reinterpret_cast<const char*>(b.w.data()), sizeof b.w); };
  for (; indexed_ < sets.size(); ++indexed_)  // sets pushed to `sets` directly are indexed on first use
    set_index_.try_emplace(key(sets[indexed_]), static_cast<uint32_t>(indexed_));
  auto [it, fresh] = set_index_.try_emplace(key(s), static_cast<uint32_t>(sets.size()));
  if (fresh) {
    sets.push_back(s);
    indexed_ = sets.size();
  }
  return {Element::bytes, it->second};
}

Sequence Grammar::literal(std::string_view text) {
  Sequence s;
  s.reserve(text.size());
  for (unsigned char c : text) s.push_back(byte(c));
  return s;
}

namespace {
// A sequence of one element is used as is; a longer one gets its own rule, so that repeating it
// copies one reference rather than the whole sequence.
Sequence as_unit(Grammar& g, std::string_view name, Sequence s) {
  if (s.size() <= 1) return s;
  return {g.add(name, {std::move(s)})};
}
Sequence cat(Sequence a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

Element Grammar::optional(std::string_view name, Sequence s) {
  return add(fmt::format("{}-opt", name), {std::move(s), {}});
}

Element Grammar::star(std::string_view name, Sequence s) {
  if (s.empty()) throw GrammarError(fmt::format("'{}': repeating nothing matches nothing more", name));
  const uint32_t id = rule(fmt::format("{}-star", name));
  Sequence body = std::move(s);
  body.push_back(ref(id));  // recursion last: constant stack depth in the matcher
  define(id, {std::move(body), {}});
  return ref(id);
}

Element Grammar::plus(std::string_view name, Sequence s) {
  Sequence unit = as_unit(*this, fmt::format("{}-item", name), std::move(s));
  const Element more = star(name, unit);
  return add(fmt::format("{}-plus", name), {cat(unit, {more})});
}

Element Grammar::repeat(std::string_view name, const Sequence& s, int64_t min, int64_t max) {
  if (min < 0) min = 0;
  if (max >= 0 && max < min)
    throw GrammarError(fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
  constexpr int64_t kLimit = 100000;
  if (min > kLimit || max > kLimit)
    throw GrammarError(
        fmt::format("repetition counts above {} are not supported (asked {})", kLimit, std::max(min, max)));
  const Sequence unit = as_unit(*this, fmt::format("{}-item", name), s);
  Sequence out;
  for (int64_t i = 0; i < min; ++i) out.insert(out.end(), unit.begin(), unit.end());
  if (max < 0) {
    out.push_back(star(name, unit));
  } else if (max > min) {
    // opt_k ::= unit opt_{k-1} | ε, built from the innermost out.
    Element tail{};
    bool have = false;
    for (int64_t k = 1; k <= max - min; ++k) {
      Sequence body = unit;
      if (have) body.push_back(tail);
      tail = add(fmt::format("{}-upto", name), {std::move(body), {}});
      have = true;
    }
    out.push_back(tail);
  }
  return add(name, {std::move(out)});
}

Element Grammar::separated(std::string_view name, const Sequence& s, const Sequence& sep, int64_t min, int64_t max) {
  if (max >= 0 && max < min)
    throw GrammarError(fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
  if (max == 0) return add(name, {{}});
  const Sequence unit = as_unit(*this, fmt::format("{}-item", name), s);
  const Element rest =
      repeat(fmt::format("{}-rest", name), cat(sep, unit), std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
  Sequence one = cat(unit, {rest});
  if (min == 0) return add(name, {std::move(one), {}});
  return add(name, {std::move(one)});
}

void Grammar::validate() const {
  if (rules.empty() || root >= rules.size()) throw GrammarError("the grammar has no root rule");
  for (const Rule& r : rules)
    if (!r.defined) throw GrammarError(fmt::format("rule '{}' is used but never defined", r.name));
  // Nullable rules (fixpoint), then the "may start with" graph through nullable prefixes; a cycle
  // in it is left recursion, which a pushdown matcher cannot run.
  std::vector<char> nullable(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (nullable[i]) continue;
      for (const Sequence& s : rules[i].alts) {
        bool all = std::all_of(s.begin(), s.end(),
                               [&](const Element& e) { return e.kind == Element::rule && nullable[e.index]; });
        if (all) {
          nullable[i] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> starts(rules.size());
  for (size_t i = 0; i < rules.size(); ++i)
    for (const Sequence& s : rules[i].alts)
      for (const Element& e : s) {
        if (e.kind == Element::bytes) break;
        starts[i].push_back(e.index);
        if (!nullable[e.index]) break;
      }
  std::vector<uint8_t> color(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t r0 = 0; r0 < rules.size(); ++r0) {
    if (color[r0]) continue;
    stack.push_back({r0, 0});
    color[r0] = 1;
    while (!stack.empty()) {
      auto& [r, k] = stack.back();
      if (k == starts[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const uint32_t n = starts[r][k++];
      if (color[n] == 1)
        throw GrammarError(
            fmt::format("rule '{}' is left-recursive (it can start with itself); rewrite the "
                        "recursion to come after something that consumes input",
                        rules[n].name));
      if (color[n] == 0) {
        color[n] = 1;
        stack.push_back({n, 0});
      }
    }
  }
}

uint32_t Grammar::import(const Grammar& source) {
  const Grammar copy = &source == this ? source : Grammar();  // importing itself: from a snapshot
  const Grammar& other = &source == this ? copy : source;
  const auto base = static_cast<uint32_t>(rules.size());
  std::vector<uint32_t> set_map(other.sets.size());
  for (size_t i = 0; i < other.sets.size(); ++i) set_map[i] = bytes(other.sets[i]).index;
  for (const Rule& r : other.rules) rule(r.name);
  for (size_t i = 0; i < other.rules.size(); ++i) {
    if (!other.rules[i].defined) continue;  // stays undefined: validate() names it
    std::vector<Sequence> alts = other.rules[i].alts;
    for (Sequence& s : alts)
      for (Element& e : s) e.index = e.kind == Element::rule ? e.index + base : set_map[e.index];
    define(base + static_cast<uint32_t>(i), std::move(alts));
  }
  return base + other.root;
}

size_t Grammar::element_count() const {
  size_t n = 0;
  for (const Rule& r : rules)
    for (const Sequence& s : r.alts) n += s.size() + 1;
  return n;
}

namespace {
// The byte automaton of "has seen one of the markers": trie states with failure links folded into
// a full transition table (Aho-Corasick). A state is final when a marker ends there.
struct MarkerAutomaton {
  std::vector<std::array<int32_t, 256>> next;
  std::vector<char> final;  // 0: no marker ends here; 1: marker 0 (a terminator); 2: another one
  MarkerAutomaton(const std::vector<std::string>& markers, bool first_terminates) {
    next.push_back({});
    next[0].fill(-1);
    final.push_back(0);
    for (size_t mi = 0; mi < markers.size(); ++mi) {
      const std::string& m = markers[mi];
      if (m.empty()) throw GrammarError("an empty marker cannot be excluded from text");
      int32_t s = 0;
      for (unsigned char c : m) {
        if (next[static_cast<size_t>(s)][c] < 0) {
          next[static_cast<size_t>(s)][c] = static_cast<int32_t>(next.size());
          next.push_back({});
          next.back().fill(-1);
          final.push_back(0);
        }
        s = next[static_cast<size_t>(s)][c];
      }
      final[static_cast<size_t>(s)] =
          std::max<char>(final[static_cast<size_t>(s)], mi == 0 && first_terminates ? 1 : 2);
    }
    // Breadth-first: fill missing transitions through the failure link; a state where a longer
    // marker's suffix completes another marker is final for it too (the other markers win).
    std::vector<int32_t> fail(next.size(), 0), queue;
    for (int c = 0; c < 256; ++c) {
      int32_t& t = next[0][static_cast<size_t>(c)];
      if (t < 0)
        t = 0;
      else
        queue.push_back(t);
    }
    for (size_t qi = 0; qi < queue.size(); ++qi) {
      const int32_t s = queue[qi];
      char& f = final[static_cast<size_t>(s)];
      f = std::max(f, final[static_cast<size_t>(fail[static_cast<size_t>(s)])]);
      for (int c = 0; c < 256; ++c) {
        int32_t& t = next[static_cast<size_t>(s)][static_cast<size_t>(c)];
        const int32_t via = next[static_cast<size_t>(fail[static_cast<size_t>(s)])][static_cast<size_t>(c)];
        if (t < 0) {
          t = via;
        } else {
          fail[static_cast<size_t>(t)] = via;
          queue.push_back(t);
        }
      }
    }
  }
};

// One rule per non-final state: for each target state the bytes leading there, then the target's
// rule. `until`: reaching the terminator (marker 0) ends the text, and no state may end otherwise;
// else every state may end. Other markers' final states are never entered.
Element marker_rules(Grammar& g, std::string_view name, const MarkerAutomaton& a, bool until) {
  std::vector<uint32_t> ids(a.next.size(), UINT32_MAX);
  for (size_t s = 0; s < a.next.size(); ++s)
    if (!a.final[s]) ids[s] = g.rule(fmt::format("{}-{}", name, s));
  for (size_t s = 0; s < a.next.size(); ++s) {
    if (a.final[s]) continue;
    std::vector<ByteSet> to(a.next.size());
    for (int c = 0; c < 256; ++c)
      to[static_cast<size_t>(a.next[s][static_cast<size_t>(c)])].add(static_cast<uint8_t>(c));
    std::vector<Sequence> alts;
    for (size_t t = 0; t < to.size(); ++t) {
      if (to[t].empty()) continue;
      if (a.final[t] == 1 && until) alts.push_back({g.bytes(to[t])});
      if (!a.final[t]) alts.push_back({g.bytes(to[t]), Grammar::ref(ids[t])});
    }
    if (!until) alts.push_back({});
    g.define(ids[s], std::move(alts));
  }
  return Grammar::ref(ids[0]);
}

int utf8_len(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}
void encode(char32_t c, uint8_t* out) {
  switch (utf8_len(c)) {
    case 1:
      out[0] = static_cast<uint8_t>(c);
      break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  }
}

// The classic split of a code point range into ranges whose encodings differ only by a byte range
// at each position (as in Rust's utf8-ranges).
void split_utf8(char32_t lo, char32_t hi, std::vector<std::pair<std::array<uint8_t, 4>, std::array<uint8_t, 4>>>& out,
                std::vector<int>& lens) {
  if (lo > hi) return;
  for (char32_t b : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}})
    if (lo <= b && b < hi) {
      split_utf8(lo, b, out, lens);
      split_utf8(b + 1, hi, out, lens);
      return;
    }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out, lens);
        split_utf8((lo | m) + 1, hi, out, lens);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out, lens);
        split_utf8(hi & ~m, hi, out, lens);
        return;
      }
    }
  }
  std::array<uint8_t, 4> a{}, b{};
  encode(lo, a.data());
  encode(hi, b.data());
  out.push_back({a, b});
  lens.push_back(n);
}
}  // namespace

Element text_excluding(Grammar& g, std::string_view name, const std::vector<std::string>& markers) {
  return marker_rules(g, name, MarkerAutomaton(markers, false), false);
}

Element text_until(Grammar& g, std::string_view name, std::string_view marker, const std::vector<std::string>& never) {
  std::vector<std::string> all = {std::string(marker)};
  all.insert(all.end(), never.begin(), never.end());
  return marker_rules(g, name, MarkerAutomaton(all, true), true);
}

std::vector<Sequence> utf8_range(Grammar& g, char32_t lo, char32_t hi) {
  hi = std::min<char32_t>(hi, 0x10FFFF);
  std::vector<Sequence> alts;
  auto one = [&](char32_t a, char32_t b) {
    std::vector<std::pair<std::array<uint8_t, 4>, std::array<uint8_t, 4>>> parts;
    std::vector<int> lens;
    split_utf8(a, b, parts, lens);
    for (size_t k = 0; k < parts.size(); ++k) {
      Sequence s;
      for (int i = 0; i < lens[k]; ++i) s.push_back(g.bytes(ByteSet::range(parts[k].first[i], parts[k].second[i])));
      alts.push_back(std::move(s));
    }
  };
  if (lo > hi) return alts;
  if (hi < 0xD800 || lo > 0xDFFF) {
    one(lo, hi);
  } else {
    if (lo < 0xD800) one(lo, 0xD7FF);
    if (hi > 0xDFFF) one(0xE000, hi);
  }
  return alts;
}

}  // namespace kiln::grammar
