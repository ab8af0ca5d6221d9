// Regex front end: the compiled grammar's language against std::regex (ECMAScript) on random
// patterns and strings, JSON-string spelling, nullable repetitions, and the constructs refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
// GCC 12 with sanitizers reports a false maybe-uninitialized inside <regex> (std::function in its
// NFA states), which -Werror turns into a failed build.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#else
#include <regex>
#endif
#include <string>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/recognizer.hpp"
#include "grammar/regex.hpp"
#include "sanitized.hpp"

namespace kiln::grammar::test {
namespace {

Grammar compile(std::string_view pattern, RegexOptions opts = {}) {
  Grammar g;
  g.root = compile_regex(g, pattern, opts).index;
  g.validate();
  return g;
}

bool accepts(std::string_view pattern, std::string_view text, RegexOptions opts = {}) {
  Grammar g = compile(pattern, opts);
  return Recognizer(g).accepts(text);
}

RegexOptions search() {
  return {.json_string = false, .search = true};
}
RegexOptions json(bool search_mode = true) {
  return {.json_string = true, .search = search_mode};
}

// ---------------------------------------------------------------------------------------------
// Differential test against std::regex

// Random patterns over a, b, c, 1 and space: literals, classes, escapes, groups, alternation and
// every quantifier form. Top-level alternatives may be anchored at either end.
class PatternGen {
 public:
  explicit PatternGen(uint32_t seed) : rng_(seed) {}

  std::string pattern() {
    std::string out;
    const int n = pick(4) == 0 ? 2 : 1;
    for (int i = 0; i < n; ++i) {
      if (i) out += '|';
      if (pick(4) == 0) out += '^';
      out += sequence(0);
      if (pick(4) == 0) out += '$';
    }
    return out;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::string alternation(int depth) {
    std::string out = sequence(depth);
    while (pick(3) == 0) out += "|" + sequence(depth);
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    for (int n = pick(4); n > 0; --n) out += term(depth);
    return out;
  }

  std::string term(int depth) {
    static const char* const kQuantifiers[] = {"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0,}", "{1}", "{0}"};
    std::string out = atom(depth);
    if (pick(3) == 0) {
      out += kQuantifiers[pick(10)];
      if (pick(4) == 0) out += '?';  // lazy
    }
    return out;
  }

  std::string atom(int depth) {
    static const char* const kAtoms[] = {"a",      "b",      "c",   "1",      " ",     ".",      "[ab]", "[^a]",
                                         "[a-c]",  "[1b]",   "\\d", "\\D",    "\\w",   "\\W",    "\\s",  "\\S",
                                         "[\\s1]", "[^\\d]", "\\n", "[^\\n]", "\\x61", "\\u0062"};
    constexpr int kCount = sizeof(kAtoms) / sizeof(kAtoms[0]);
    if (depth < 3 && pick(4) == 0) return (pick(2) ? "(" : "(?:") + alternation(depth + 1) + ")";
    return kAtoms[pick(kCount)];
  }

  std::mt19937 rng_;
};

// Every string up to length 3 over the alphabet, and random longer ones.
std::vector<std::string> test_strings(std::mt19937& rng) {
  static const std::string kAlphabet = "abc1 \n";
  std::vector<std::string> out{""};
  for (size_t begin = 0, len = 1; len <= 3; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i)
      for (char c : kAlphabet) out.push_back(out[i] + c);
    begin = end;
  }
  std::uniform_int_distribution<int> length(4, 8), letter(0, static_cast<int>(kAlphabet.size()) - 1);
  for (int k = 0; k < 30; ++k) {
    std::string s;
    for (int n = length(rng); n > 0; --n) s += kAlphabet[letter(rng)];
    out.push_back(s);
  }
  return out;
}

// Random strings of a grammar's language over the alphabet (std::regex reads bytes, so only
// ASCII): positives that random strings seldom hit. Past a depth it takes the shortest
// alternative, which ends the recursion of star rules.
class Sampler {
 public:
  Sampler(const Grammar& g, std::mt19937& rng) : g_(g), rng_(rng) {}

  bool sample(uint32_t rule, int depth, std::string& out) {
    std::vector<const Sequence*> alts;
    for (const Sequence& s : g_.rules[rule].alts) alts.push_back(&s);
    if (depth > 12)
      std::stable_sort(alts.begin(), alts.end(), [](auto* a, auto* b) { return a->size() < b->size(); });
    else
      std::shuffle(alts.begin(), alts.end(), rng_);
    const size_t mark = out.size();
    for (const Sequence* s : alts) {
      if (sequence(*s, depth, out)) return true;
      out.resize(mark);
    }
    return false;
  }

 private:
  bool sequence(const Sequence& s, int depth, std::string& out) {
    for (const Element& e : s) {
      if (e.kind == Element::rule) {
        if (!sample(e.index, depth + 1, out)) return false;
        continue;
      }
      std::string fits;
      for (char c : std::string_view("abc1 \n"))
        if (g_.sets[e.index].has(static_cast<uint8_t>(c))) fits += c;
      if (fits.empty()) return false;
      out += fits[std::uniform_int_distribution<size_t>(0, fits.size() - 1)(rng_)];
    }
    return true;
  }

  const Grammar& g_;
  std::mt19937& rng_;
};

// The alphabet's texts as written inside a JSON string.
std::string json_escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

// std::regex backtracks in the reference's own code, which sanitizers slow by 20-100×: under them
// a tenth of the patterns (the release build runs them all).
const int kPatternScale = kiln::test::reduced() ? 10 : 1;

void differential(bool search_mode, uint32_t seed, int patterns) {
  patterns /= kPatternScale;
  PatternGen gen(seed);
  std::mt19937 rng(seed + 1);
  int matches = 0, checks = 0;
  for (int p = 0; p < patterns; ++p) {
    const std::string pattern = gen.pattern();
    SCOPED_TRACE("pattern: " + pattern);
    const std::regex re(pattern, std::regex::ECMAScript);
    Grammar g;
    ASSERT_NO_THROW(g.root = compile_regex(g, pattern, {.json_string = false, .search = search_mode}).index);
    ASSERT_NO_THROW(g.validate());
    Recognizer rec(g);
    // The same pattern in JSON string mode must accept exactly the JSON-escaped texts.
    Grammar gj;
    ASSERT_NO_THROW(gj.root = compile_regex(gj, pattern, {.json_string = true, .search = search_mode}).index);
    ASSERT_NO_THROW(gj.validate());
    Recognizer rec_json(gj);
    std::vector<std::string> texts = test_strings(rng);
    for (int k = 0; k < 20; ++k)
      if (std::string t; Sampler(g, rng).sample(g.root, 0, t) && t.size() <= 8) texts.push_back(t);
    for (const std::string& s : texts) {
      const bool want = search_mode ? std::regex_search(s, re) : std::regex_match(s, re);
      ASSERT_EQ(rec.accepts(s), want) << "text: \"" << s << '"';
      ASSERT_EQ(rec_json.accepts(json_escaped(s)), want) << "JSON text: \"" << json_escaped(s) << '"';
      matches += want;
      ++checks;
    }
  }
  // The comparison means something only if both answers are common.
  EXPECT_GT(matches, checks / 20);
  EXPECT_LT(matches, checks - checks / 20);
}

TEST(Regex, MatchesLikeStdRegex) {
  differential(false, 1234, 300);
}
TEST(Regex, SearchesLikeStdRegex) {
  differential(true, 5678, 300);
}

// ---------------------------------------------------------------------------------------------
// Hand cases

TEST(Regex, Basics) {
  EXPECT_TRUE(accepts("abc", "abc"));
  EXPECT_FALSE(accepts("abc", "abcd"));
  EXPECT_TRUE(accepts("^abc$", "abc"));  // anchors change nothing when the whole text must match
  EXPECT_TRUE(accepts("a{3}", "aaa"));
  EXPECT_FALSE(accepts("a{3}", "aa"));
  EXPECT_TRUE(accepts("a{2,}", "aaaaa"));
  EXPECT_TRUE(accepts("(?<year>\\d{4})-\\d\\d", "2024-05"));
  EXPECT_TRUE(accepts("a+?b*?", "aab"));
  EXPECT_TRUE(accepts("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$\\/\\-", ".*+?()[]{}|\\^$/-"));
  EXPECT_TRUE(accepts("[\\]\\-a]+", "]-a"));
  EXPECT_TRUE(accepts("[-a]", "-"));
  EXPECT_TRUE(accepts("[a-]", "-"));
  EXPECT_TRUE(accepts("[\\b]", "\b"));
  EXPECT_TRUE(accepts("\\t\\r\\n\\v\\f\\0", std::string_view("\t\r\n\v\f\0", 6)));
  EXPECT_TRUE(accepts("\\cJ", "\n"));
  EXPECT_TRUE(accepts("x{,2}", "x{,2}"));  // not a quantifier: literal braces (Annex B)
  EXPECT_TRUE(accepts("a}]", "a}]"));
  EXPECT_FALSE(accepts("[]", ""));  // the empty class matches nothing
  EXPECT_FALSE(accepts("[]", "a"));
  EXPECT_TRUE(accepts("[^]", "\n"));
  EXPECT_TRUE(accepts("a|[]", "a"));
  EXPECT_TRUE(accepts("[]*", ""));
}

TEST(Regex, SearchAnchors) {
  EXPECT_TRUE(accepts("b", "abc", search()));
  EXPECT_FALSE(accepts("^b", "abc", search()));
  EXPECT_TRUE(accepts("^a", "abc", search()));
  EXPECT_TRUE(accepts("c$", "abc", search()));
  EXPECT_FALSE(accepts("b$", "abc", search()));
  EXPECT_TRUE(accepts("^a|z$", "ax", search()));
  EXPECT_TRUE(accepts("^a|z$", "xz", search()));
  EXPECT_FALSE(accepts("^a|z$", "xa", search()));
  EXPECT_FALSE(accepts("^a|z$", "zx", search()));
  EXPECT_TRUE(accepts("^$", "", search()));
  EXPECT_FALSE(accepts("^$", "a", search()));
  EXPECT_TRUE(accepts("", "any\ntext", search()));
  EXPECT_TRUE(accepts("x*", "any\ntext", search()));
  EXPECT_TRUE(accepts("^^a$$", "a", search()));
}

TEST(Regex, Unicode) {
  EXPECT_TRUE(accepts("é中😀", "é中😀"));
  EXPECT_TRUE(accepts("^.{3}$", "é中😀"));
  EXPECT_FALSE(accepts("^.{2}$", "é中😀"));
  EXPECT_TRUE(accepts("\\u00e9\\u{1F600}\\uD83D\\uDE00", "é😀😀"));
  EXPECT_TRUE(accepts("[^a]", "中"));
  EXPECT_TRUE(accepts("[^a]", "😀"));
  EXPECT_FALSE(accepts("[^a]", "\xff"));          // not UTF-8
  EXPECT_FALSE(accepts("[^a]", "\xed\xa0\x80"));  // an encoded surrogate
  EXPECT_FALSE(accepts("[^a]", "\xc3"));          // a truncated character
  EXPECT_TRUE(accepts("[à-ÿ]+", "éü"));
  EXPECT_FALSE(accepts("[à-ÿ]+", "e"));
  EXPECT_TRUE(accepts("\\s", "\u3000"));
  EXPECT_TRUE(accepts("\\s", "\xef\xbb\xbf"));  // U+FEFF
  EXPECT_FALSE(accepts("\\S", "\u2028"));
  EXPECT_FALSE(accepts(".", "\u2028"));  // ECMAScript's . stops at every line terminator
  EXPECT_FALSE(accepts(".", "\r"));
  EXPECT_TRUE(accepts(".", "\u0085"));
  EXPECT_FALSE(accepts("\\uD800", "\xed\xa0\x80"));  // a lone surrogate matches nothing in UTF-8
}

// ---------------------------------------------------------------------------------------------
// JSON string mode

TEST(Regex, JsonStringEscapes) {
  EXPECT_TRUE(accepts("^[a-z\"]+$", "a\\\"b", json()));
  EXPECT_FALSE(accepts("^[a-z\"]+$", "a\"b", json()));
  EXPECT_TRUE(accepts("^\\\\$", "\\\\", json()));
  EXPECT_FALSE(accepts("^\\\\$", "\\", json()));
  EXPECT_TRUE(accepts("^\\n\\t\\r\\f[\\b]$", "\\n\\t\\r\\f\\b", json()));
  EXPECT_FALSE(accepts("^\\n$", "\n", json()));
  EXPECT_FALSE(accepts("^\\n$", "\\u000a", json()));  // controls with a short escape use it
  EXPECT_TRUE(accepts("^\\x01\\x1f$", "\\u0001\\u001f", json()));
  EXPECT_TRUE(accepts("^\\x01\\x1f$", "\\u0001\\u001F", json()));
  EXPECT_FALSE(accepts("^\\x01$", "\x01", json()));
  EXPECT_TRUE(accepts("^/$", "/", json()));
  EXPECT_TRUE(accepts("^/$", "\\/", json()));
  EXPECT_TRUE(accepts("^é中😀$", "é中😀", json()));
  EXPECT_FALSE(accepts("^é$", "\\u00e9", json()));  // never \u-escaped: the text decodes to what matched
  EXPECT_FALSE(accepts("^a$", "\\u0061", json()));
  EXPECT_TRUE(accepts("^.$", "\\t", json()));
  EXPECT_FALSE(accepts("^.$", "\\n", json()));
  EXPECT_TRUE(accepts("^.$", "\\\"", json()));
  EXPECT_FALSE(accepts("^.$", "\"", json()));
  // Search: the text around the match is any JSON string content.
  EXPECT_TRUE(accepts("a", "x\\\"a\\n\\u0007é", json()));
  EXPECT_FALSE(accepts("a", "x\"a", json()));
  EXPECT_FALSE(accepts("a", "\\qa", json()));
  EXPECT_FALSE(accepts("a", "a\n", json()));
  EXPECT_TRUE(accepts("[^a]", "\\\\", json(false)));
}

TEST(Regex, CharAlternatives) {
  Grammar g;
  // All one-byte characters share one element.
  std::vector<Sequence> alts = char_alternatives(g, {{'0', '9'}, {'a', 'z'}}, false);
  ASSERT_EQ(alts.size(), 1u);
  ASSERT_EQ(alts[0].size(), 1u);
  EXPECT_EQ(g.sets[alts[0][0].index].count(), 36);
  alts = char_alternatives(g, {{'a', 'a'}, {0xE9, 0xE9}, {0x4E2D, 0x4E2D}}, false);
  EXPECT_EQ(alts.size(), 3u);
  alts = char_alternatives(g, {{0xD800, 0xDFFF}}, false);
  EXPECT_TRUE(alts.empty());
  // JSON: raw ASCII, then '\' with the short-escape letters, then \u00XX.
  alts = char_alternatives(g, {{0, 0x7F}}, true);
  ASSERT_EQ(alts.size(), 4u);
  EXPECT_EQ(g.sets[alts[0][0].index].count(), 0x60 - 2);  // 0x20-0x7F but the quote and the backslash
  EXPECT_EQ(g.sets[alts[1][1].index].count(), 8);         // " \ / b f n r t
}

// ---------------------------------------------------------------------------------------------
// Repetitions of what can match nothing: the star rules must not be left-recursive.

TEST(Regex, NullableRepetitionsValidate) {
  const char* const kPatterns[] = {"(a*)*",       "(a?)+",     "(|a)*",    "(a*b*)*", "(a?){2,}", "((a*)*)*",
                                   "(a|b?)+c",    "()*",       "(?:)+",    "(a*){3}", "(a?b?)*c", "(a*|b)*",
                                   "((a|)(b|))+", "(a{0,2})*", "([]|a?)*", "(a*)+?b", "(()|())*"};
  for (const char* p : kPatterns) {
    SCOPED_TRACE(p);
    for (bool s : {false, true}) {
      Grammar g;
      ASSERT_NO_THROW(g.root = compile_regex(g, p, {.json_string = false, .search = s}).index);
      EXPECT_NO_THROW(g.validate());
    }
  }
  EXPECT_TRUE(accepts("(a*b*)*", "abba"));
  EXPECT_TRUE(accepts("(a*b*)*", ""));
  EXPECT_FALSE(accepts("(a*b*)*", "abca"));
  EXPECT_TRUE(accepts("(a?b?)*c", "abbac"));
  EXPECT_TRUE(accepts("(a?){2,}", ""));
  EXPECT_TRUE(accepts("(a?){2,}", "aaaaa"));
  EXPECT_TRUE(accepts("(a?){2,3}", "aaa"));
  EXPECT_FALSE(accepts("(a?){2,3}", "aaaa"));
  EXPECT_TRUE(accepts("()*", ""));
  EXPECT_FALSE(accepts("()*", "a"));
}

void expect_refused(std::string_view pattern, std::string_view names) {
  SCOPED_TRACE(std::string(pattern));
  Grammar g;
  try {
    compile_regex(g, pattern);
    ADD_FAILURE() << "accepted";
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.where(), "pattern");
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

// Hostile patterns must not take quadratic space or deep recursion.
TEST(Regex, LargePatterns) {
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "a?";
  Grammar g = compile("(" + many + "){2}");
  EXPECT_LT(g.element_count(), 20u * 20000);
  EXPECT_TRUE(Recognizer(g).accepts("aaa"));
  g = compile("(" + many + ")*");
  EXPECT_LT(g.element_count(), 100u);
  expect_refused(std::string(300, '(') + "a" + std::string(300, ')'), "nest more than");
  std::string nested = "a";
  for (int i = 0; i < 150; ++i) nested = "(?:" + nested + "|b)*";
  EXPECT_TRUE(accepts(nested, "abba"));
}

TEST(Regex, RuleName) {
  Grammar g;
  const Element e = compile_regex(g, "a|b", {}, "zip");
  ASSERT_EQ(e.kind, Element::rule);
  EXPECT_EQ(g.rules[e.index].name, "zip");
}

// ---------------------------------------------------------------------------------------------
// Refusals

TEST(Regex, Refusals) {
  expect_refused("(a)\\1", "backreference \\1");
  expect_refused("(?<x>a)\\k<x>", "named backreference");
  expect_refused("a(?=b)", "lookahead");
  expect_refused("a(?!b)", "lookahead");
  expect_refused("(?<=a)b", "lookbehind");
  expect_refused("(?<!a)b", "lookbehind");
  expect_refused("\\bword", "word boundary");
  expect_refused("a\\B", "word boundary");
  expect_refused("\\p{L}", "unicode property escape \\p");
  expect_refused("[\\P{L}]", "unicode property escape \\P");
  expect_refused("(?i)abc", "flags");
  expect_refused("(?i:abc)", "flags");
  expect_refused("a^b", "anchor ^");
  expect_refused("(^a)", "anchor ^");
  expect_refused("a$b", "anchor $");
  expect_refused("(a$)|b", "anchor $");
  expect_refused("*a", "nothing to repeat");
  expect_refused("a**", "nothing to repeat");
  expect_refused("a{2}{3}", "nothing to repeat");
  expect_refused("^*", "nothing to repeat");
  expect_refused("(a", "unterminated group");
  expect_refused("a)", "unmatched ')'");
  expect_refused("[a", "unterminated character class");
  expect_refused("[z-a]", "out of order");
  expect_refused("[\\d-z]", "class range");
  expect_refused("a{3,2}", "maximum is below the minimum");
  expect_refused("a{100001}", "above 100000");
  expect_refused("a\\", "lone backslash");
  expect_refused("\\q", "unknown escape \\q");
  expect_refused("\\x4", "\\x must be followed by two hex digits");
  expect_refused("\\u12", "\\u must be followed");
  expect_refused("\\u{110000}", "above U+10FFFF");
  expect_refused("\\01", "octal");
  expect_refused("(?<>a)", "group name");
  expect_refused("\xff", "not valid UTF-8");
  expect_refused("\xed\xa0\x80", "not valid UTF-8");
}

}  // namespace
}  // namespace kiln::grammar::test
