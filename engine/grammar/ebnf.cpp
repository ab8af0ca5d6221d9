// GBNF text to a Grammar, in two steps: parse the text into a small syntax tree (so every rule
// name is known before any body is built, and user rules keep their exact names and come first),
// then lower the tree with the Grammar builders. Grammar::to_text, the way back, is at the end.
#include "grammar/ebnf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <kiln/utf8.hpp>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace kiln::grammar {

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
// Groups nest by recursion in the parser; grammars come from requests, so bound the depth rather
// than let hostile text exhaust the stack.
constexpr int kMaxGroupDepth = 500;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}
bool is_surrogate(char32_t c) {
  return c >= 0xD800 && c <= 0xDFFF;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// ---- Syntax tree ------------------------------------------------------------------------------

struct Repetition {
  int64_t min = 0, max = -1;  ///< max < 0: unbounded
  size_t pos = 0;
};

/** A class member: a code point range, or (from \xHH escapes of 0x80–0xFF) a byte range. */
struct ClassRange {
  uint32_t lo = 0, hi = 0;
  bool is_byte = false;
};

struct Item;
using Seq = std::vector<Item>;

struct Item {
  enum Kind { literal, char_class, any_char, reference, group } kind = literal;
  size_t pos = 0;
  std::string text;                ///< literal: its bytes; reference: the rule name
  std::vector<ClassRange> ranges;  ///< char_class
  bool negated = false;            ///< char_class
  std::vector<Seq> alts;           ///< group
  std::vector<Repetition> reps;    ///< postfix operators, applied in order
};

struct RuleDef {
  std::string name;
  size_t pos = 0;
  std::vector<Seq> alts;
};

// ---- Positions --------------------------------------------------------------------------------

/** "line L:C" of a byte offset; columns count characters, not bytes, so they match an editor. */
std::string line_col(std::string_view text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      col = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++col;
    }
  }
  return fmt::format("line {}:{}", line, col);
}

// ---- Parser -----------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  std::vector<RuleDef> parse() {
    std::vector<RuleDef> rules;
    skip_space();
    while (!at_end()) {
      rules.push_back(parse_rule());
      skip_space();
    }
    return rules;
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    throw GrammarError(message, line_col(t_, pos));
  }
  bool at_end() const { return p_ >= t_.size(); }
  char peek(size_t ahead = 0) const { return p_ + ahead < t_.size() ? t_[p_ + ahead] : '\0'; }
  std::string describe_here() const {
    if (at_end()) return "the end of the text";
    const auto c = static_cast<unsigned char>(peek());
    if (c < 0x20 || c >= 0x7F) return fmt::format("byte 0x{:02X}", c);
    return fmt::format("'{}'", peek());
  }

  // Whitespace (newlines included: a rule's body runs on until the next `name ::=`) and comments.
  void skip_space() { p_ = space_end(p_); }
  size_t space_end(size_t i) const {
    while (i < t_.size()) {
      const char c = t_[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i;
      } else if (c == '#') {
        while (i < t_.size() && t_[i] != '\n') ++i;
      } else {
        break;
      }
    }
    return i;
  }
  size_t name_end(size_t i) const {
    while (i < t_.size() && is_name_char(t_[i])) ++i;
    return i;
  }
  /** Whether a rule definition `name ::=` starts here: it ends the body before it. */
  bool at_definition() const {
    const size_t e = name_end(p_);
    if (e == p_) return false;
    return t_.substr(space_end(e)).starts_with("::=");
  }

  RuleDef parse_rule() {
    RuleDef r;
    r.pos = p_;
    const size_t e = name_end(p_);
    if (e == p_)
      fail(p_, fmt::format("expected a rule name (letters, digits, '-' or '_') starting `name ::= ...`, found {}",
                           describe_here()));
    r.name = std::string(t_.substr(p_, e - p_));
    p_ = e;
    skip_space();
    if (!t_.substr(p_).starts_with("::="))
      fail(p_, fmt::format("expected '::=' after the rule name '{}', found {}", r.name, describe_here()));
    p_ += 3;
    r.alts = parse_alternatives(std::nullopt);
    if (!at_end() && peek() == ')') fail(p_, "unmatched ')': no group is open here");
    return r;
  }

  /** alt ('|' alt)*; stops before ')' / the next definition / the end. `group` is the '(' offset. */
  std::vector<Seq> parse_alternatives(std::optional<size_t> group) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(group));
    while (!at_end() && peek() == '|') {
      ++p_;
      alts.push_back(parse_sequence(group));
    }
    return alts;
  }

  Seq parse_sequence(std::optional<size_t> group) {
    Seq seq;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')') return seq;
      if (at_definition()) {
        if (group) fail(*group, "expected ')' to close this group before the next rule definition");
        return seq;
      }
      Item item = parse_atom();
      parse_postfix(item);
      seq.push_back(std::move(item));
    }
  }

  Item parse_atom() {
    Item item;
    item.pos = p_;
    const char c = peek();
    if (c == '"') {
      item.kind = Item::literal;
      item.text = parse_literal();
    } else if (c == '[') {
      item.kind = Item::char_class;
      parse_class(item);
    } else if (c == '.') {
      item.kind = Item::any_char;
      ++p_;
    } else if (c == '(') {
      item.kind = Item::group;
      ++p_;
      if (++depth_ > kMaxGroupDepth)
        fail(item.pos,
             fmt::format("groups nested deeper than {} levels; split the grammar into named rules", kMaxGroupDepth));
      item.alts = parse_alternatives(item.pos);
      --depth_;
      if (at_end()) fail(item.pos, "expected ')' to close this group, found the end of the text");
      ++p_;  // ')'
    } else if (is_name_char(c)) {
      item.kind = Item::reference;
      const size_t e = name_end(p_);
      item.text = std::string(t_.substr(p_, e - p_));
      p_ = e;
    } else {
      fail(p_, fmt::format("unexpected {}: expected a \"literal\", a [class], '.', a rule name, '(' or '|'",
                           describe_here()));
    }
    return item;
  }

  void parse_postfix(Item& item) {
    for (;;) {
      const size_t save = p_;
      skip_space();
      const char c = peek();
      Repetition r;
      r.pos = p_;
      if (c == '*') {
        ++p_;
      } else if (c == '+') {
        r.min = 1;
        ++p_;
      } else if (c == '?') {
        r.max = 1;
        ++p_;
      } else if (c == '{') {
        parse_braces(r);
      } else {
        p_ = save;  // leave the whitespace for the sequence, which checks for a definition after it
        return;
      }
      item.reps.push_back(r);
    }
  }

  // {m} {m,} {m,n}
  void parse_braces(Repetition& r) {
    ++p_;
    skip_space();
    r.min = parse_count("after '{'");
    skip_space();
    r.max = r.min;
    if (peek() == ',') {
      ++p_;
      skip_space();
      r.max = is_digit(peek()) ? parse_count("after ','") : -1;
      skip_space();
    }
    if (peek() != '}') fail(p_, fmt::format("expected '}}' to close the repetition, found {}", describe_here()));
    ++p_;
    if (r.max >= 0 && r.max < r.min)
      fail(r.pos,
           fmt::format("repetition {{{},{}}}: the maximum {} is below the minimum {}", r.min, r.max, r.max, r.min));
  }

  int64_t parse_count(const char* where) {
    if (!is_digit(peek())) fail(p_, fmt::format("expected a count {}, found {}", where, describe_here()));
    const size_t start = p_;
    int64_t n = 0;
    for (; is_digit(peek()); ++p_) {
      n = n * 10 + (peek() - '0');
      if (n > 1'000'000'000) fail(start, "repetition count too large");
    }
    return n;
  }

  std::string parse_literal() {
    const size_t open = p_++;
    std::string out;
    for (;;) {
      if (at_end() || peek() == '\n')
        fail(open, "unterminated string literal: close it with '\"' on the same line (write \\n for a newline)");
      const char c = peek();
      if (c == '"') break;
      if (c == '\\') {
        const auto [value, is_byte] = parse_escape();
        if (is_byte) {
          out += static_cast<char>(value);
        } else {
          kiln::utf8::append(out, value);
        }
      } else {
        out += c;  // raw UTF-8 bytes stay as they are
        ++p_;
      }
    }
    ++p_;
    return out;
  }

  void parse_class(Item& item) {
    const size_t open = p_++;
    if (peek() == '^') {
      item.negated = true;
      ++p_;
    }
    for (;;) {
      if (at_end() || peek() == '\n') fail(open, "unterminated character class: close it with ']' on the same line");
      if (peek() == ']') break;
      const size_t at = p_;
      ClassRange r = class_char();
      if (peek() == '-' && peek(1) != ']' && p_ + 1 < t_.size()) {
        ++p_;
        if (peek() == '\n') fail(open, "unterminated character class: close it with ']' on the same line");
        const ClassRange hi = class_char();
        // ASCII up to a byte (\x20-\xFF) is a byte range; a non-ASCII character and a byte don't mix.
        if (hi.is_byte != r.is_byte && r.lo >= 0x80)
          fail(at,
               "a range mixes a raw byte (\\xHH, 0x80 and up) with a character; write both ends as bytes or "
               "both as characters (\\u00HH for U+0080–U+00FF)");
        r.hi = hi.lo;
        r.is_byte = hi.is_byte;
        if (r.hi < r.lo && r.is_byte)
          fail(at, fmt::format("range reversed: its end 0x{:02X} is below its start 0x{:02X}", r.hi, r.lo));
        if (r.hi < r.lo)
          fail(at, fmt::format("range reversed: its end U+{:04X} is below its start U+{:04X}", r.hi, r.lo));
      }
      if (r.is_byte && r.hi >= 0x80 && item.negated)
        fail(at,
             "a negated class cannot hold raw bytes \\x80-\\xFF (negation is over characters); list the bytes "
             "without '^' or use \\u00HH for characters");
      item.ranges.push_back(r);
    }
    ++p_;
  }

  /** One class member end point: an escape, or a raw (UTF-8 decoded) character. */
  ClassRange class_char() {
    if (peek() == '\\') {
      const auto [value, is_byte] = parse_escape();
      return {value, value, is_byte && value >= 0x80};  // \x00-\x7F is the same as the ASCII character
    }
    const char32_t c = decode_utf8();
    return {c, c, false};
  }

  char32_t decode_utf8() {
    const size_t at = p_;
    const auto b0 = static_cast<unsigned char>(peek());
    const int n = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0) fail(at, fmt::format("invalid UTF-8 (byte 0x{:02X}); write raw bytes as \\xHH", b0));
    char32_t c = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(peek(i));
      if ((b & 0xC0) != 0x80) fail(at, "invalid UTF-8 (truncated sequence); write raw bytes as \\xHH");
      c = (c << 6) | (b & 0x3F);
    }
    p_ += n;
    return c;
  }

  /** After a backslash: the value, and whether it is a byte (\xHH) rather than a code point. */
  std::pair<char32_t, bool> parse_escape() {
    const size_t at = p_;
    ++p_;  // '\'
    const char c = peek();
    ++p_;
    switch (c) {
      case 'n':
        return {'\n', false};
      case 'r':
        return {'\r', false};
      case 't':
        return {'\t', false};
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '/':
      case '^':
        return {c, false};
      case 'x':
        return {parse_hex(at, 2), true};
      case 'u':
        return {code_point(at, parse_hex(at, 4)), false};
      case 'U':
        return {code_point(at, parse_hex(at, 8)), false};
      default:
        break;
    }
    fail(at, fmt::format("unknown escape '\\{}'; use \\n \\r \\t \\\\ \\\" \\] \\- \\xHH (a byte), \\uHHHH or "
                         "\\UHHHHHHHH",
                         c == '\0' || c == '\n' ? ' ' : c));
  }

  char32_t code_point(size_t at, char32_t c) const {
    if (c > kMaxCodePoint) fail(at, fmt::format("U+{:X} is beyond U+10FFFF, the last code point", uint32_t{c}));
    if (is_surrogate(c)) fail(at, fmt::format("U+{:04X} is a surrogate, not a character", uint32_t{c}));
    return c;
  }

  char32_t parse_hex(size_t at, int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i, ++p_) {
      const char h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) fail(at, fmt::format("escape needs {} hex digits, found {}", digits, describe_here()));
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  std::string_view t_;
  size_t p_ = 0;
  int depth_ = 0;
};

// ---- Lowering ---------------------------------------------------------------------------------

class Lowering {
 public:
  Lowering(std::string_view text, Grammar& g) : text_(text), g_(g) {}

  void run(const std::vector<RuleDef>& defs) {
    declare(defs);
    for (const RuleDef& d : defs) {
      std::vector<Sequence> alts;
      for (const Seq& s : d.alts) alts.push_back(sequence(s, d.name));
      g_.define(ids_.at(d.name), std::move(alts));
    }
    check_unbounded_repetitions();
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    throw GrammarError(message, line_col(text_, pos));
  }

  // Every rule exists before any body is built, so references may come before definitions.
  void declare(const std::vector<RuleDef>& defs) {
    for (const RuleDef& d : defs) {
      if (auto it = first_def_.find(d.name); it != first_def_.end())
        fail(d.pos, fmt::format("rule '{}' is defined twice (first at {}); join the alternatives with '|'", d.name,
                                line_col(text_, it->second)));
      first_def_[d.name] = d.pos;
    }
    if (!first_def_.count("root"))
      throw GrammarError("no rule named 'root': the grammar starts at root, so define `root ::= ...`");
    // root first: it is where the grammar starts, and so where a reader of to_text() starts.
    ids_["root"] = g_.rule("root");
    g_.root = ids_["root"];
    for (const RuleDef& d : defs)
      if (!ids_.count(d.name)) ids_[d.name] = g_.rule(d.name);
  }

  Sequence sequence(const Seq& s, const std::string& rule) {
    Sequence out;
    for (const Item& item : s) {
      Sequence part = repeated(item, rule);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }

  Sequence repeated(const Item& item, const std::string& rule) {
    Sequence s = atom(item, rule);
    for (const Repetition& r : item.reps) s = {repetition(s, r, rule)};
    return s;
  }

  Element repetition(const Sequence& s, const Repetition& r, const std::string& rule) {
    if (r.max < 0) unbounded_.push_back({s, r.pos});
    try {
      if (r.min == 0 && r.max < 0) return g_.star(rule, s);
      if (r.min == 1 && r.max < 0) return g_.plus(rule, s);
      if (r.min == 0 && r.max == 1) return g_.optional(rule, s);
      return g_.repeat(fmt::format("{}-rep", rule), s, r.min, r.max);
    } catch (const GrammarError& e) {
      if (!e.where().empty()) throw;
      fail(r.pos, e.what());
    }
  }

  Sequence atom(const Item& item, const std::string& rule) {
    switch (item.kind) {
      case Item::literal:
        return g_.literal(item.text);
      case Item::reference:
        return {reference(item)};
      case Item::group:
        return group(item, rule);
      case Item::char_class:
        return char_class(item, rule);
      case Item::any_char:
        return {any_char()};
    }
    return {};
  }

  Element reference(const Item& item) const {
    auto it = ids_.find(item.text);
    if (it == ids_.end())
      fail(item.pos,
           fmt::format("rule '{}' is used but never defined; define it with `{} ::= ...`", item.text, item.text));
    return Grammar::ref(it->second);
  }

  /** One alternative is spliced in place; several get a rule of their own. */
  Sequence group(const Item& item, const std::string& rule) {
    std::vector<Sequence> alts;
    for (const Seq& s : item.alts) alts.push_back(sequence(s, rule));
    if (alts.size() == 1) return std::move(alts[0]);
    return {g_.add(fmt::format("{}-group", rule), std::move(alts))};
  }

  Element any_char() {
    if (!any_) any_ = g_.add("char", utf8_range(g_, 0, kMaxCodePoint));
    return *any_;
  }

  Sequence char_class(const Item& item, const std::string& rule) {
    ByteSet raw;  // bytes from \x80-\xFF
    std::vector<std::pair<char32_t, char32_t>> cps;
    for (const ClassRange& r : item.ranges) {
      if (r.is_byte) {
        raw.add(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      } else {
        cps.push_back({r.lo, r.hi});
      }
    }
    cps = normalize(std::move(cps));
    if (item.negated) cps = complement(cps);
    const bool ascii = std::all_of(cps.begin(), cps.end(), [](const auto& r) { return r.second < 0x80; });
    if (ascii) {  // one byte of input: one set
      for (const auto& [lo, hi] : cps) raw.add(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      return {g_.bytes(raw)};
    }
    return utf8_class(raw, cps, rule);
  }

  /** Characters of several UTF-8 lengths: alternatives, the one-byte ones merged into one set. */
  Sequence utf8_class(ByteSet single, const std::vector<std::pair<char32_t, char32_t>>& cps, const std::string& rule) {
    std::string key(reinterpret_cast<const char*>(single.w.data()), sizeof(single.w));
    for (const auto& [lo, hi] : cps) key += fmt::format(",{:X}-{:X}", uint32_t{lo}, uint32_t{hi});
    if (auto it = classes_.find(key); it != classes_.end()) return {it->second};
    std::vector<Sequence> alts, longer;
    for (const auto& [lo, hi] : cps)
      for (Sequence& s : utf8_range(g_, lo, hi)) {
        if (s.size() == 1) {
          single.add(g_.sets[s[0].index]);
        } else {
          longer.push_back(std::move(s));
        }
      }
    if (!single.empty()) alts.push_back({g_.bytes(single)});
    for (Sequence& s : longer) alts.push_back(std::move(s));
    if (alts.size() == 1) return alts[0];  // e.g. [é]: one byte sequence, spliced in place
    const Element e = g_.add(fmt::format("{}-class", rule), std::move(alts));
    classes_.emplace(std::move(key), e);
    return {e};
  }

  static std::vector<std::pair<char32_t, char32_t>> normalize(std::vector<std::pair<char32_t, char32_t>> r) {
    std::sort(r.begin(), r.end());
    std::vector<std::pair<char32_t, char32_t>> out;
    for (const auto& x : r) {
      if (!out.empty() && x.first <= out.back().second + 1) {
        out.back().second = std::max(out.back().second, x.second);
      } else {
        out.push_back(x);
      }
    }
    return out;
  }

  /** Over all code points (utf8_range leaves the surrogates out). Input sorted and disjoint. */
  static std::vector<std::pair<char32_t, char32_t>> complement(const std::vector<std::pair<char32_t, char32_t>>& r) {
    std::vector<std::pair<char32_t, char32_t>> out;
    char32_t next = 0;
    for (const auto& [lo, hi] : r) {
      if (lo > next) out.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
  }

  // x* where x can match nothing would make the repetition rule left-recursive; validate() would
  // name a generated rule, so say it here with the place in the text.
  void check_unbounded_repetitions() const {
    const std::vector<char> nullable = nullable_rules();
    for (const auto& [s, pos] : unbounded_) {
      const bool empty = std::all_of(s.begin(), s.end(),
                                     [&](const Element& e) { return e.kind == Element::rule && nullable[e.index]; });
      if (empty)
        fail(pos,
             "the repeated item can match the empty string, so repeating it without bound never ends; make "
             "the item always consume input (e.g. drop an inner '?' or '*')");
    }
  }

  std::vector<char> nullable_rules() const {
    std::vector<char> nullable(g_.rules.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < g_.rules.size(); ++i) {
        if (nullable[i]) continue;
        for (const Sequence& s : g_.rules[i].alts)
          if (std::all_of(s.begin(), s.end(),
                          [&](const Element& e) { return e.kind == Element::rule && nullable[e.index]; })) {
            nullable[i] = changed = true;
            break;
          }
      }
    }
    return nullable;
  }

  std::string_view text_;
  Grammar& g_;
  std::map<std::string, size_t> first_def_;
  std::map<std::string, uint32_t> ids_;
  std::map<std::string, Element> classes_;
  std::optional<Element> any_;
  std::vector<std::pair<Sequence, size_t>> unbounded_;
};

// ---- Printing ---------------------------------------------------------------------------------

bool printable(unsigned b) {
  return b >= 0x20 && b < 0x7F;
}

std::string class_byte(unsigned b) {
  if (b == ']' || b == '\\' || b == '-' || b == '^') return fmt::format("\\{}", static_cast<char>(b));
  if (printable(b)) return std::string(1, static_cast<char>(b));
  return fmt::format("\\x{:02X}", b);
}

std::string literal_byte(unsigned b) {
  if (b == '"' || b == '\\') return fmt::format("\\{}", static_cast<char>(b));
  if (b == '\n') return "\\n";
  if (b == '\r') return "\\r";
  if (b == '\t') return "\\t";
  if (printable(b)) return std::string(1, static_cast<char>(b));
  return fmt::format("\\x{:02X}", b);
}

std::string print_class(const ByteSet& s) {
  std::string out = "[";
  for (unsigned b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    unsigned e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    out += class_byte(b);
    if (e > b + 1) out += '-';
    if (e > b) out += class_byte(e);
    b = e + 1;
  }
  return out + "]";
}

std::optional<uint8_t> single_byte(const ByteSet& s) {
  if (s.count() != 1) return std::nullopt;
  for (unsigned b = 0; b < 256; ++b)
    if (s.has(static_cast<uint8_t>(b))) return static_cast<uint8_t>(b);
  return std::nullopt;
}

/** Names as GBNF allows them ([a-zA-Z0-9-_]+), unique, the root named "root"; valid names kept. */
std::vector<std::string> printable_names(const Grammar& g) {
  std::vector<std::string> names(g.rules.size());
  std::set<std::string> used;
  if (g.root < g.rules.size()) {
    names[g.root] = "root";
    used.insert("root");
  }
  auto valid = [](const std::string& n) { return !n.empty() && std::all_of(n.begin(), n.end(), is_name_char); };
  for (size_t i = 0; i < g.rules.size(); ++i)
    if (i != g.root && valid(g.rules[i].name) && used.insert(g.rules[i].name).second) names[i] = g.rules[i].name;
  for (size_t i = 0; i < g.rules.size(); ++i) {
    if (!names[i].empty()) continue;
    std::string base = g.rules[i].name.empty() ? "rule" : g.rules[i].name;
    std::replace_if(
        base.begin(), base.end(), [](char c) { return !is_name_char(c); }, '-');
    std::string n = base;
    for (int k = 1; used.count(n); ++k) n = fmt::format("{}-{}", base, k);
    used.insert(n);
    names[i] = n;
  }
  return names;
}

std::string print_sequence(const Grammar& g, const Sequence& s, const std::vector<std::string>& names) {
  if (s.empty()) return "\"\"";
  std::string out, run;  // run: consecutive single bytes, printed as one literal
  auto sep = [&] {
    if (!out.empty()) out += ' ';
  };
  auto flush = [&] {
    if (run.empty()) return;
    sep();
    out += '"' + run + '"';
    run.clear();
  };
  for (const Element& e : s) {
    if (e.kind == Element::rule) {
      flush();
      sep();
      out += e.index < names.size() ? names[e.index] : fmt::format("missing-rule-{}", e.index);
      continue;
    }
    const ByteSet& set = g.sets.at(e.index);
    if (auto b = single_byte(set)) {
      run += literal_byte(*b);
    } else {
      flush();
      sep();
      out += print_class(set);
    }
  }
  flush();
  return out;
}

std::string print_rule(const Grammar& g, uint32_t id, const std::vector<std::string>& names) {
  const Rule& r = g.rules[id];
  std::string out = names[id] + " ::= ";
  if (r.alts.empty()) return out + "[]";  // no alternatives: matches nothing, like the empty class
  for (size_t i = 0; i < r.alts.size(); ++i) {
    if (i) out += " | ";
    out += print_sequence(g, r.alts[i], names);
  }
  return out;
}

}  // namespace

Grammar parse_ebnf(std::string_view text) {
  const std::vector<RuleDef> defs = Parser(text).parse();
  Grammar g;
  Lowering(text, g).run(defs);
  g.validate();
  return g;
}

std::string Grammar::to_text() const {
  const std::vector<std::string> names = printable_names(*this);
  std::string out;
  if (root < rules.size()) out += print_rule(*this, root, names) + "\n";
  for (uint32_t i = 0; i < rules.size(); ++i)
    if (i != root) out += print_rule(*this, i, names) + "\n";
  return out;
}

}  // namespace kiln::grammar
