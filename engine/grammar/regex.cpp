// Regex to grammar in three steps: decode the pattern's UTF-8 into code points, parse them into a
// small tree (character sets, sequences, alternations, repetitions), and emit rules from the tree.
//
// The tree's constructors keep one invariant the grammar needs: the body of every repetition
// matches no empty string. Grammar::star(x) is `S ::= x S | ε`, which is left-recursive when x
// can match nothing; (a*)*, (a?)+ and (|a)* would all produce that. When ε ∈ x the language is
// kept with a body that excludes ε: x{m,n} = (x\ε){0,n}, and x{m,} = (p1|…|pk)* with parts p of
// x that cannot match nothing (star_parts).
#include "grammar/regex.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

namespace kiln::grammar {

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr int64_t kMaxRepeat = 100000;  // Grammar::repeat's limit, checked here to report it as "pattern"
constexpr int kMaxNesting = 200;        // groups in groups: bounds the recursion of the parser and emitter

[[noreturn]] void refuse(std::string message) {
  throw GrammarError(std::move(message), "pattern");
}

// ---------------------------------------------------------------------------------------------
// Code point sets

CharRanges normalize(CharRanges r) {
  std::sort(r.begin(), r.end());
  CharRanges out;
  for (auto [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

CharRanges complement(const CharRanges& normalized) {
  CharRanges out;
  char32_t next = 0;
  for (auto [lo, hi] : normalized) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

const CharRanges& digit_chars() {
  static const CharRanges r{{'0', '9'}};
  return r;
}
const CharRanges& word_chars() {
  static const CharRanges r{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
// ECMAScript's WhiteSpace and LineTerminator code points.
const CharRanges& space_chars() {
  static const CharRanges r = normalize({{0x09, 0x0D},
                                         {0x20, 0x20},
                                         {0xA0, 0xA0},
                                         {0x1680, 0x1680},
                                         {0x2000, 0x200A},
                                         {0x2028, 0x2029},
                                         {0x202F, 0x202F},
                                         {0x205F, 0x205F},
                                         {0x3000, 0x3000},
                                         {0xFEFF, 0xFEFF}});
  return r;
}
// ECMAScript's `.` without the s flag: everything but the line terminators.
const CharRanges& dot_chars() {
  static const CharRanges r = complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
  return r;
}
const CharRanges& all_chars() {
  static const CharRanges r{{0, kMaxCodePoint}};
  return r;
}

// ---------------------------------------------------------------------------------------------
// Characters as byte sequences

// Raw UTF-8 of [lo, hi]: one-byte characters go into `ascii` (one element for all of them), the
// rest become sequences.
void add_raw(Grammar& g, char32_t lo, char32_t hi, ByteSet& ascii, std::vector<Sequence>& multi) {
  if (lo <= 0x7F) {
    ascii.add(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<char32_t>(hi, 0x7F)));
    lo = 0x80;
  }
  if (lo > hi) return;
  for (Sequence& s : utf8_range(g, lo, hi)) multi.push_back(std::move(s));
}

std::vector<Sequence> raw_alternatives(Grammar& g, const CharRanges& ranges) {
  ByteSet ascii;
  std::vector<Sequence> multi;
  for (auto [lo, hi] : ranges) add_raw(g, lo, hi, ascii, multi);
  std::vector<Sequence> alts;
  if (!ascii.empty()) alts.push_back({g.bytes(ascii)});
  for (Sequence& s : multi) alts.push_back(std::move(s));
  return alts;
}

ByteSet hex_digit(unsigned v) {
  ByteSet s = ByteSet::of(static_cast<uint8_t>("0123456789abcdef"[v]));
  s.add(static_cast<uint8_t>("0123456789ABCDEF"[v]));
  return s;
}

// The spellings inside a JSON string literal. Every escape starts with '\', so the two-byte ones
// share one element for their second byte and the \u00XX ones one per high digit.
std::vector<Sequence> json_alternatives(Grammar& g, const CharRanges& ranges) {
  ByteSet raw_ascii, escaped;  // escaped: the byte after '\'
  ByteSet unicode_low[2];      // \u00XY: the spellings of Y for X = 0 and X = 1
  std::vector<Sequence> multi;
  for (auto [lo, hi] : ranges) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); ++c) {
      switch (c) {
        case '\b':
          escaped.add('b');
          break;
        case '\t':
          escaped.add('t');
          break;
        case '\n':
          escaped.add('n');
          break;
        case '\f':
          escaped.add('f');
          break;
        case '\r':
          escaped.add('r');
          break;
        case '"':
          escaped.add('"');
          break;
        case '\\':
          escaped.add('\\');
          break;
        case '/':  // JSON allows \/ too; accept what a model may write
          escaped.add('/');
          raw_ascii.add('/');
          break;
        default:
          if (c < 0x20)
            unicode_low[c >> 4].add(hex_digit(c & 15));
          else
            raw_ascii.add(static_cast<uint8_t>(c));
      }
    }
    if (hi >= 0x80) add_raw(g, std::max<char32_t>(lo, 0x80), hi, raw_ascii, multi);
  }
  std::vector<Sequence> alts;
  if (!raw_ascii.empty()) alts.push_back({g.bytes(raw_ascii)});
  if (!escaped.empty()) alts.push_back({g.byte('\\'), g.bytes(escaped)});
  for (int x = 0; x < 2; ++x) {
    if (unicode_low[x].empty()) continue;
    Sequence s = g.literal("\\u00");
    s.push_back(g.byte(static_cast<uint8_t>('0' + x)));
    s.push_back(g.bytes(unicode_low[x]));
    alts.push_back(std::move(s));
  }
  for (Sequence& s : multi) alts.push_back(std::move(s));
  return alts;
}

// ---------------------------------------------------------------------------------------------
// The pattern as a tree

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum Kind { chars, seq, alt, repeat };
  Kind kind = seq;
  CharRanges ranges;          ///< chars: never empty (an empty set is `nothing`)
  std::vector<NodePtr> kids;  ///< seq, alt: the parts; repeat: the body
  int64_t min = 0, max = 0;   ///< repeat; max < 0: unbounded
  bool nullable = false;
  bool own_rule = false;  ///< seq: emitted as a rule of its own because several places share it
};

// An alternation of nothing: matches no string at all ([], [^\s\S], a lone surrogate).
NodePtr nothing() {
  static const NodePtr n = std::make_shared<Node>(Node{Node::alt, {}, {}, 0, 0, false});
  return n;
}
bool is_nothing(const NodePtr& n) {
  return n->kind == Node::alt && n->kids.empty();
}

NodePtr empty() {
  static const NodePtr n = std::make_shared<Node>(Node{Node::seq, {}, {}, 0, 0, true});
  return n;
}

NodePtr make_chars(CharRanges ranges) {
  // Surrogates cannot occur in UTF-8 text: a set of only those matches nothing.
  const bool any =
      std::any_of(ranges.begin(), ranges.end(), [](auto r) { return r.first < 0xD800 || r.second > 0xDFFF; });
  if (!any) return nothing();
  return std::make_shared<Node>(Node{Node::chars, std::move(ranges), {}, 0, 0, false});
}

NodePtr make_seq(const std::vector<NodePtr>& parts) {
  std::vector<NodePtr> kids;
  bool nullable = true;
  for (const NodePtr& p : parts) {
    if (is_nothing(p)) return nothing();
    if (p->kind == Node::seq && !p->own_rule)
      kids.insert(kids.end(), p->kids.begin(), p->kids.end());
    else
      kids.push_back(p);
    nullable = nullable && p->nullable;
  }
  if (kids.size() == 1) return kids[0];
  if (kids.empty()) return empty();
  return std::make_shared<Node>(Node{Node::seq, {}, std::move(kids), 0, 0, nullable});
}

NodePtr make_alt(const std::vector<NodePtr>& parts) {
  std::vector<NodePtr> kids;
  bool nullable = false;
  for (const NodePtr& p : parts) {
    if (p->kind == Node::alt)
      kids.insert(kids.end(), p->kids.begin(), p->kids.end());  // nothing() adds nothing
    else
      kids.push_back(p);
    nullable = nullable || p->nullable;
  }
  if (kids.size() == 1) return kids[0];
  return std::make_shared<Node>(Node{Node::alt, {}, std::move(kids), 0, 0, nullable});
}

NodePtr make_repeat(NodePtr body, int64_t min, int64_t max);

// The language of `n` without the empty string; never nullable.
NodePtr non_empty(const NodePtr& n) {
  if (!n->nullable) return n;
  switch (n->kind) {
    case Node::alt: {
      std::vector<NodePtr> kids;
      for (const NodePtr& k : n->kids) kids.push_back(non_empty(k));
      return make_alt(kids);
    }
    case Node::repeat:  // nullable means min == 0 (the body is never nullable)
      return make_repeat(n->kids[0], 1, n->max);
    case Node::seq: {
      // Every part x_i is nullable: the union over i of (x_i\ε) x_i+1 … x_k. The suffixes are
      // shared rules (rest_i = x_i rest_i+1), which keeps this linear in k.
      std::vector<NodePtr> alts;
      NodePtr rest = empty();
      for (size_t i = n->kids.size(); i-- > 0;) {
        const NodePtr& x = n->kids[i];
        alts.push_back(make_seq({non_empty(x), rest}));
        rest = rest == empty() ? x : std::make_shared<Node>(Node{Node::seq, {}, {x, rest}, 0, 0, true, true});
      }
      return make_alt(alts);
    }
    case Node::chars:
      break;
  }
  return n;
}

// Parts whose star is the star of `n`, none nullable: (x y)* = (x|y)* when x and y can be empty,
// (x|y)* = (x|y\ε)*, (z{0,k})* = z*. Flatter and less ambiguous than non_empty(n)*; a part seen
// twice ((a?a?)*) is kept once.
void star_parts(const NodePtr& n, std::vector<NodePtr>& out, std::set<const Node*>& seen,
                std::set<CharRanges>& seen_chars) {
  if (n->nullable) {
    if (n->kind == Node::repeat) return star_parts(n->kids[0], out, seen, seen_chars);
    for (const NodePtr& k : n->kids) star_parts(k, out, seen, seen_chars);
    return;
  }
  if (!seen.insert(n.get()).second) return;
  if (n->kind == Node::chars && !seen_chars.insert(n->ranges).second) return;
  out.push_back(n);
}

NodePtr make_repeat(NodePtr body, int64_t min, int64_t max) {
  if (max == 0) return empty();
  if (is_nothing(body)) return min == 0 ? empty() : nothing();
  if (body->nullable && max < 0) {
    // ε ∈ x: x{m,} = x*. Its body must not be nullable: that is what keeps star rules free of
    // left recursion.
    std::vector<NodePtr> parts;
    std::set<const Node*> seen;
    std::set<CharRanges> seen_chars;
    star_parts(body, parts, seen, seen_chars);
    if (parts.empty()) return empty();
    body = make_alt(parts);
    min = 0;
    if (is_nothing(body)) return empty();
  } else if (body->nullable) {
    // ε ∈ x: x{m,n} = (x\ε){0,n}: fewer and less ambiguous rules than nesting optionals of x.
    body = non_empty(body);
    min = 0;
    if (is_nothing(body)) return empty();
  }
  if (min == 1 && max == 1) return body;
  // (x+)* = x* and (x+)+ = x+: one star rule instead of two nested, ambiguous ones.
  if (max < 0 && min <= 1 && body->kind == Node::repeat && body->min == 1 && body->max < 0)
    return make_repeat(body->kids[0], min, -1);
  return std::make_shared<Node>(Node{Node::repeat, {}, {std::move(body)}, min, max, min == 0});
}

// ---------------------------------------------------------------------------------------------
// Parsing

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    char32_t c = len == 1 ? b0 : len == 2 ? b0 & 0x1F : len == 3 ? b0 & 0x0F : b0 & 0x07;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      ok = (b >> 6) == 2;
      c = (c << 6) | (b & 0x3F);
    }
    static constexpr char32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok) ok = c >= kMinForLength[len] && c <= kMaxCodePoint && (c < 0xD800 || c > 0xDFFF);
    if (!ok) refuse(fmt::format("the pattern is not valid UTF-8 (byte 0x{:02X} at byte offset {})", b0, i));
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

bool is_digit(char32_t c) {
  return c >= '0' && c <= '9';
}
bool is_ascii_alnum(char32_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
int hex_value(char32_t c) {
  if (is_digit(c)) return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

// A top-level alternative and whether it is anchored at either end.
struct Branch {
  NodePtr node;
  bool at_start = false, at_end = false;
};

// One class atom or escape: a single code point or a set (\d, \w, ...).
struct Atom {
  bool is_set = false;
  char32_t cp = 0;
  CharRanges set;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : s_(decode_utf8(pattern)) {}

  std::vector<Branch> parse() {
    std::vector<Branch> branches;
    do branches.push_back(top_alternative());
    while (eat('|'));
    if (!done()) refuse(fmt::format("unmatched ')' at position {}; escape it as \\) for a literal", pos_));
    return branches;
  }

 private:
  bool done() const { return pos_ >= s_.size(); }
  char32_t peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : char32_t{0}; }
  bool at(char32_t c, size_t ahead = 0) const { return pos_ + ahead < s_.size() && s_[pos_ + ahead] == c; }
  bool eat(char32_t c) {
    if (!at(c)) return false;
    ++pos_;
    return true;
  }

  Branch top_alternative() {
    Branch b;
    while (eat('^')) b.at_start = true;
    std::vector<NodePtr> terms;
    while (!done() && !at('|') && !at(')')) {
      if (at('$') && trailing_dollars()) {
        b.at_end = true;
        break;
      }
      terms.push_back(term());
    }
    b.node = make_seq(terms);
    return b;
  }

  // At a '$': is it (with any '$' after it) the end of a top-level alternative? Consumes it if so.
  bool trailing_dollars() {
    size_t j = pos_;
    while (j < s_.size() && s_[j] == '$') ++j;
    if (j < s_.size() && s_[j] != '|') return false;
    pos_ = j;
    return true;
  }

  NodePtr disjunction() {
    std::vector<NodePtr> alts;
    do {
      std::vector<NodePtr> terms;
      while (!done() && !at('|') && !at(')')) terms.push_back(term());
      alts.push_back(make_seq(terms));
    } while (eat('|'));
    return make_alt(alts);
  }

  NodePtr term() {
    NodePtr a = atom();
    int64_t min = 0, max = 0;
    if (!quantifier(min, max)) return a;
    eat('?');  // lazy: the same language
    return make_repeat(std::move(a), min, max);
  }

  bool quantifier(int64_t& min, int64_t& max) {
    if (eat('*')) return min = 0, max = -1, true;
    if (eat('+')) return min = 1, max = -1, true;
    if (eat('?')) return min = 0, max = 1, true;
    if (!at('{')) return false;
    const size_t open = pos_;
    if (!braced_quantifier(min, max)) return false;
    if (max >= 0 && max < min)
      refuse(fmt::format("quantifier {{{},{}}} at position {}: the maximum is below the minimum", min, max, open));
    return true;
  }

  // {n} {n,} {n,m}; anything else leaves pos_ alone (a literal '{', as ECMAScript's Annex B reads it).
  bool braced_quantifier(int64_t& min, int64_t& max) {
    const size_t start = pos_;
    ++pos_;
    if (!number(min)) return pos_ = start, false;
    max = min;
    if (eat(',')) {
      max = -1;
      if (is_digit(peek())) number(max);
    }
    if (!eat('}')) return pos_ = start, false;
    return true;
  }

  bool number(int64_t& out) {
    if (!is_digit(peek())) return false;
    const size_t start = pos_;
    out = 0;
    while (is_digit(peek())) {
      out = std::min<int64_t>(out * 10 + (peek() - '0'), kMaxRepeat + 1);
      ++pos_;
    }
    if (out > kMaxRepeat)
      refuse(
          fmt::format("repetition count at position {} is above {}, the most supported; use a smaller count or * / +",
                      start, kMaxRepeat));
    return true;
  }

  NodePtr atom() {
    const size_t start = pos_;
    const char32_t c = s_[pos_++];
    switch (c) {
      case '.':
        return make_chars(dot_chars());
      case '(':
        return group(start);
      case '[':
        return char_class(start);
      case '\\': {
        Atom a = escape(false, start);
        return make_chars(a.is_set ? std::move(a.set) : CharRanges{{a.cp, a.cp}});
      }
      case '*':
      case '+':
      case '?':
        nothing_to_repeat(c, start);
      case '^':
        refuse(
            fmt::format("anchor ^ at position {} is only supported at the start of the pattern or of a "
                        "top-level alternative; escape it as \\^ for a literal",
                        start));
      case '$':
        refuse(
            fmt::format("anchor $ at position {} is only supported at the end of the pattern or of a "
                        "top-level alternative; escape it as \\$ for a literal",
                        start));
      case '{': {
        --pos_;
        int64_t min = 0, max = 0;
        if (braced_quantifier(min, max)) nothing_to_repeat(c, start);
        ++pos_;
        return make_chars({{c, c}});
      }
      default:
        return make_chars({{c, c}});
    }
  }

  [[noreturn]] void nothing_to_repeat(char32_t c, size_t at) const {
    refuse(
        fmt::format("quantifier '{}' at position {} has nothing to repeat; put it after a character, class or "
                    "group, or escape it for a literal",
                    static_cast<char>(c), at));
  }

  NodePtr group(size_t open) {
    if (eat('?')) {
      if (eat(':')) {
      } else if (at('=') || at('!')) {
        refuse(fmt::format("lookahead (?{}...) at position {} is not supported: a grammar cannot look ahead",
                           static_cast<char>(peek()), open));
      } else if (at('<') && (at('=', 1) || at('!', 1))) {
        refuse(fmt::format("lookbehind (?<{}...) at position {} is not supported: a grammar cannot look behind",
                           static_cast<char>(peek(1)), open));
      } else if (eat('<')) {
        group_name(open);
      } else {
        refuse(
            fmt::format("inline flags or modifiers '(?{}' at position {} are not supported; regex flags "
                        "(such as case-insensitive matching) cannot be used, spell the cases out, e.g. [aA]",
                        done() ? std::string() : std::string(1, static_cast<char>(peek())), open));
      }
    }
    if (++depth_ > kMaxNesting)
      refuse(fmt::format("groups nest more than {} deep at position {}; flatten the pattern", kMaxNesting, open));
    NodePtr inner = disjunction();
    if (!eat(')')) refuse(fmt::format("unterminated group '(' at position {}; close it with ')'", open));
    --depth_;
    return inner;
  }

  void group_name(size_t open) {
    const size_t start = pos_;
    while (!done() && (is_ascii_alnum(peek()) || at('_') || at('$') || peek() >= 0x80)) ++pos_;
    if (pos_ == start || !eat('>'))
      refuse(
          fmt::format("bad group name in '(?<' at position {}; write (?<name>...) with a name of letters, "
                      "digits and _",
                      open));
  }

  NodePtr char_class(size_t open) {
    const bool negate = eat('^');
    CharRanges r;
    for (;;) {
      if (done()) refuse(fmt::format("unterminated character class '[' at position {}; close it with ']'", open));
      if (eat(']')) break;
      const size_t start = pos_;
      Atom a = class_atom(open);
      if (at('-') && !at(']', 1) && pos_ + 1 < s_.size()) {
        ++pos_;
        Atom b = class_atom(open);
        if (a.is_set || b.is_set)
          refuse(
              fmt::format("class range at position {} has a class escape such as \\d as an end; write a "
                          "literal '-' as \\-",
                          start));
        if (a.cp > b.cp)
          refuse(fmt::format("class range at position {} is out of order (U+{:04X} > U+{:04X})", start,
                             static_cast<uint32_t>(a.cp), static_cast<uint32_t>(b.cp)));
        r.push_back({a.cp, b.cp});
      } else if (a.is_set) {
        r.insert(r.end(), a.set.begin(), a.set.end());
      } else {
        r.push_back({a.cp, a.cp});
      }
    }
    r = normalize(std::move(r));
    return make_chars(negate ? complement(r) : r);
  }

  Atom class_atom(size_t open) {
    if (done()) refuse(fmt::format("unterminated character class '[' at position {}; close it with ']'", open));
    const size_t start = pos_;
    const char32_t c = s_[pos_++];
    if (c == '\\') return escape(true, start);
    return Atom{false, c, {}};
  }

  // After a backslash at `start`.
  Atom escape(bool in_class, size_t start) {
    if (done()) refuse("the pattern ends with a lone backslash; write \\\\ for a literal backslash");
    const char32_t c = s_[pos_++];
    auto one = [](char32_t cp) { return Atom{false, cp, {}}; };
    auto set = [](const CharRanges& r) { return Atom{true, 0, r}; };
    switch (c) {
      case 'd':
        return set(digit_chars());
      case 'D':
        return set(complement(digit_chars()));
      case 'w':
        return set(word_chars());
      case 'W':
        return set(complement(word_chars()));
      case 's':
        return set(space_chars());
      case 'S':
        return set(complement(space_chars()));
      case 'n':
        return one('\n');
      case 't':
        return one('\t');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        if (is_digit(peek()))
          refuse(fmt::format("legacy octal escape \\0{} at position {} is not supported; use \\xHH",
                             static_cast<char>(peek()), start));
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        refuse(fmt::format("word boundary assertion \\b at position {} is not supported", start));
      case 'B':
        refuse(fmt::format("word boundary assertion \\B at position {} is not supported", start));
      case 'c':
        if (!(is_ascii_alnum(peek()) && !is_digit(peek())))
          refuse(fmt::format("control escape \\c at position {} must be followed by a letter A-Z", start));
        return one(s_[pos_++] % 32);
      case 'x':
        return one(hex_digits(2, start, "\\x must be followed by two hex digits"));
      case 'u':
        return one(unicode_escape(start));
      case 'k':
        refuse(
            fmt::format("named backreference \\k at position {} is not supported: a grammar cannot match "
                        "repeated text",
                        start));
      case 'p':
      case 'P':
        refuse(
            fmt::format("unicode property escape \\{}{{...}} at position {} is not supported; use a "
                        "character class such as [A-Za-z]",
                        static_cast<char>(c), start));
      default:
        break;
    }
    if (is_digit(c))
      refuse(
          fmt::format("backreference \\{} at position {} is not supported: a grammar cannot match repeated "
                      "text",
                      static_cast<char>(c), start));
    if (is_ascii_alnum(c))
      refuse(fmt::format("unknown escape \\{} at position {}; escape only punctuation", static_cast<char>(c), start));
    return one(c);  // an escaped metacharacter or other punctuation stands for itself
  }

  char32_t hex_digits(int n, size_t start, std::string_view what) {
    char32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const int d = hex_value(peek());
      if (d < 0) refuse(fmt::format("{} (at position {})", what, start));
      v = v * 16 + static_cast<char32_t>(d);
      ++pos_;
    }
    return v;
  }

  // \uHHHH (a surrogate pair written as two of them is one character) or \u{H...}.
  char32_t unicode_escape(size_t start) {
    constexpr std::string_view kWhat = "\\u must be followed by four hex digits or by {hex digits}";
    if (eat('{')) {
      char32_t v = 0;
      size_t digits = 0;
      for (; hex_value(peek()) >= 0; ++pos_, ++digits) {
        v = v * 16 + static_cast<char32_t>(hex_value(peek()));
        if (v > kMaxCodePoint) refuse(fmt::format("\\u{{...}} at position {} is above U+10FFFF", start));
      }
      if (digits == 0 || !eat('}')) refuse(fmt::format("{} (at position {})", kWhat, start));
      return v;
    }
    const char32_t v = hex_digits(4, start, kWhat);
    if (v >= 0xD800 && v <= 0xDBFF && at('\\') && at('u', 1)) {
      const size_t save = pos_;
      pos_ += 2;
      int lo = 0;
      bool ok = true;
      for (int i = 0; i < 4 && ok; ++i, ++pos_) {
        const int d = hex_value(peek());
        ok = d >= 0;
        lo = lo * 16 + d;
      }
      if (ok && lo >= 0xDC00 && lo <= 0xDFFF)
        return 0x10000 + ((v - 0xD800) << 10) + (static_cast<char32_t>(lo) - 0xDC00);
      pos_ = save;
    }
    return v;
  }

  std::vector<char32_t> s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Emitting rules

class Emitter {
 public:
  Emitter(Grammar& g, bool json_string, std::string_view name) : g_(g), json_(json_string), name_(name) {}

  Sequence emit(const NodePtr& n) {
    if (n->kind == Node::chars) return {chars(n->ranges)};
    if (n->kind == Node::seq && !n->own_rule) return concatenation(*n);
    if (n->kind == Node::seq) return {shared_suffix(n.get())};
    // A node used twice (parts non_empty copies, the search wrapper's any-text) becomes one rule.
    if (auto it = done_.find(n.get()); it != done_.end()) return {it->second};
    const Element e = n->kind == Node::alt ? alternation(*n) : repetition(*n);
    done_[n.get()] = e;
    return {e};
  }

  /** The alternatives of `n` itself, for the rule the caller names. */
  std::vector<Sequence> alternatives(const NodePtr& n) {
    if (n->kind != Node::alt) return {emit(n)};
    std::vector<Sequence> alts;
    for (const NodePtr& k : n->kids) alts.push_back(emit(k));
    return alts;
  }

 private:
  Element chars(const CharRanges& r) {
    if (auto it = chars_.find(r); it != chars_.end()) return it->second;
    std::vector<Sequence> alts = char_alternatives(g_, r, json_);
    const Element e = alts.size() == 1 && alts[0].size() == 1 ? alts[0][0] : g_.add(name_ + "-char", std::move(alts));
    chars_.emplace(r, e);
    return e;
  }

  Sequence concatenation(const Node& n) {
    Sequence out;
    for (const NodePtr& k : n.kids) {
      Sequence s = emit(k);
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }

  // A chain of shared suffixes (see non_empty), emitted from its end so that the recursion stays
  // shallow however long the chain.
  Element shared_suffix(const Node* n) {
    std::vector<const Node*> chain;
    for (const Node* p = n; p->kind == Node::seq && p->own_rule && !done_.count(p); p = p->kids.back().get())
      chain.push_back(p);
    for (size_t i = chain.size(); i-- > 0;) done_[chain[i]] = g_.add(name_ + "-rest", {concatenation(*chain[i])});
    return done_.at(n);
  }

  Element alternation(const Node& n) {
    std::vector<Sequence> alts;
    for (const NodePtr& k : n.kids) alts.push_back(emit(k));
    return g_.add(name_ + "-alt", std::move(alts));
  }

  Element repetition(const Node& n) {
    Sequence body = emit(n.kids[0]);
    if (n.min == 0 && n.max < 0) return g_.star(name_, std::move(body));
    if (n.min == 1 && n.max < 0) return g_.plus(name_, std::move(body));
    if (n.min == 0 && n.max == 1) return g_.optional(name_, std::move(body));
    return g_.repeat(name_ + "-rep", body, n.min, n.max);
  }

  Grammar& g_;
  bool json_;
  std::string name_;
  std::unordered_map<const Node*, Element> done_;
  std::map<CharRanges, Element> chars_;
};

// JSON Schema `pattern` semantics: the text contains a match. An alternative not anchored at an
// end gets any text on that side; with no anchors at all the whole pattern is wrapped once.
NodePtr search_wrap(const std::vector<Branch>& branches) {
  const NodePtr any = make_repeat(make_chars(all_chars()), 0, -1);
  auto wrap = [&](const NodePtr& n, bool at_start, bool at_end) {
    if (n->nullable && !(at_start && at_end)) return any;  // .* x .*, x .* and .* x are .* when ε ∈ x
    return make_seq({at_start ? empty() : any, n, at_end ? empty() : any});
  };
  const bool anchored =
      std::any_of(branches.begin(), branches.end(), [](const Branch& b) { return b.at_start || b.at_end; });
  std::vector<NodePtr> alts;
  if (!anchored) {
    for (const Branch& b : branches) alts.push_back(b.node);
    return wrap(make_alt(alts), false, false);
  }
  for (const Branch& b : branches) alts.push_back(wrap(b.node, b.at_start, b.at_end));
  return make_alt(alts);
}

}  // namespace

std::vector<Sequence> char_alternatives(Grammar& g, const CharRanges& ranges, bool json_string) {
  return json_string ? json_alternatives(g, ranges) : raw_alternatives(g, ranges);
}

Element compile_regex(Grammar& g, std::string_view pattern, const RegexOptions& opts, std::string_view name) {
  const std::vector<Branch> branches = Parser(pattern).parse();
  NodePtr top;
  if (opts.search) {
    top = search_wrap(branches);
  } else {
    std::vector<NodePtr> alts;
    for (const Branch& b : branches) alts.push_back(b.node);
    top = make_alt(alts);
  }
  Emitter emitter(g, opts.json_string, name.empty() ? std::string_view("pattern") : name);
  return g.add(name, emitter.alternatives(top));
}

}  // namespace kiln::grammar
