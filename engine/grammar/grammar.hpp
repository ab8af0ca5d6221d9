// A context-free grammar over bytes: the one form every front end (JSON Schema, regex, EBNF, tool
// calls) compiles to and the matcher runs. A rule is a list of alternatives; an alternative is a
// sequence of elements; an element is a set of bytes (one byte of input) or a reference to a rule.
// Text is UTF-8, so a character class over code points becomes alternatives of byte sequences.
//
// The matcher runs the grammar as a pushdown automaton (see matcher.hpp), so a rule may not be
// left-recursive (directly or through rules that can match nothing); validate() refuses that with
// the rule's name. Repetition is right-recursive with the recursion last, which the matcher runs
// in constant stack depth.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::grammar {

/** A bad grammar, schema, pattern or EBNF text. `where` names the place: a JSON pointer into a
 *  schema ("/properties/age/minimum"), "pattern", "line 3:7" of EBNF text. */
class GrammarError : public std::runtime_error {
 public:
  GrammarError(std::string message, std::string where = {})
      : std::runtime_error(where.empty() ? message : where + ": " + message), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

/** 256 bits: which bytes an element accepts. */
struct ByteSet {
  std::array<uint64_t, 4> w{};
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add(lo, hi);
    return s;
  }
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
  }
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return !(w[0] | w[1] | w[2] | w[3]); }
  int count() const;
  ByteSet complement() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w[i] = ~w[i];
    return s;
  }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum Kind : uint8_t { bytes, rule };
  Kind kind = bytes;
  uint32_t index = 0;  ///< bytes: into Grammar::sets; rule: a rule id
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alts;  ///< an empty sequence matches the empty string
  bool defined = false;
};

/**
 * The grammar, with the builder functions front ends use. Rules are created with rule() (declare,
 * then define() once: recursion refers to a rule before it is defined) or with the helpers that
 * make a fresh rule and return a reference to it. Names are unique: rule("x") twice gives "x" and
 * "x-1".
 */
class Grammar {
 public:
  std::vector<Rule> rules;
  std::vector<ByteSet> sets;  ///< interned: equal sets share an index
  uint32_t root = 0;

  /** Declares a rule; define it later. */
  uint32_t rule(std::string_view name);
  void define(uint32_t rule, std::vector<Sequence> alts);
  /** A new rule with these alternatives; returns a reference to it. */
  Element add(std::string_view name, std::vector<Sequence> alts);

  Element bytes(const ByteSet& s);
  Element byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  static Element ref(uint32_t rule) { return {Element::rule, rule}; }
  /** The bytes of `text` one element each. */
  Sequence literal(std::string_view text);

  // Repetition of a sequence, each as a fresh rule (names derive from `name`).
  Element optional(std::string_view name, Sequence s);  ///< s?
  Element star(std::string_view name, Sequence s);      ///< s*
  Element plus(std::string_view name, Sequence s);      ///< s+
  /** s{min,max}; max < 0: unbounded. Linear in max: bounded counts nest optionals. */
  Element repeat(std::string_view name, const Sequence& s, int64_t min, int64_t max);
  /** (s (sep s){min-1,max-1})? when min == 0, s (sep s){min-1,max-1} otherwise. */
  Element separated(std::string_view name, const Sequence& s, const Sequence& sep, int64_t min, int64_t max);

  /** Throws GrammarError: undefined rules, left recursion (with the rule's name), no root. Also
   *  removes nothing: unreachable rules are harmless. */
  void validate() const;
  /** EBNF text (the syntax ebnf.hpp reads; root first). */
  std::string to_text() const;
  /** Copies every rule of `other` into this grammar (names made unique); returns the id its root has here. */
  uint32_t import(const Grammar& other);

  size_t element_count() const;

 private:
  std::string unique_name(std::string_view name);
  std::unordered_map<std::string, uint32_t> names_;
  std::unordered_map<std::string, uint32_t> suffix_;
  std::unordered_map<std::string, uint32_t> set_index_;  ///< interned byte sets by their 32 bytes
  size_t indexed_ = 0;                                   ///< sets[0, indexed_) are in set_index_
};

/** Any bytes that contain none of `markers` (an Aho-Corasick automaton as one rule per state). */
Element text_excluding(Grammar& g, std::string_view name, const std::vector<std::string>& markers);
/** Any bytes up to and including the first occurrence of `marker` (e.g. reasoning up to </think>),
 *  containing none of `never` (e.g. a tool-call opener, which would end reasoning too). */
Element text_until(Grammar& g, std::string_view name, std::string_view marker,
                   const std::vector<std::string>& never = {});

/** The UTF-8 encodings of the code points [lo, hi] as byte-set sequences (alternatives), each a
 *  valid UTF-8 sequence; surrogates (U+D800–U+DFFF) are excluded. */
std::vector<Sequence> utf8_range(Grammar& g, char32_t lo, char32_t hi);

}  // namespace kiln::grammar
