// The GBNF front end (parse_ebnf) and its inverse (Grammar::to_text): languages checked with the
// independent Recognizer, round trips on sampled and mutated strings, and the error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "grammar/ebnf.hpp"
#include "grammar/grammar.hpp"
#include "grammar/recognizer.hpp"

using namespace kiln::grammar;
using kiln::grammar::Recognizer;

namespace {

void expect_language(const Grammar& g, const std::vector<std::string>& yes, const std::vector<std::string>& no) {
  Recognizer r(g);
  for (const std::string& s : yes) EXPECT_TRUE(r.accepts(s)) << "should accept: " << s;
  for (const std::string& s : no) EXPECT_FALSE(r.accepts(s)) << "should reject: " << s;
}

/** The error parse_ebnf throws for `text` (fails the test if none). */
GrammarError error_of(std::string_view text) {
  try {
    parse_ebnf(text);
  } catch (const GrammarError& e) {
    return e;
  }
  ADD_FAILURE() << "no GrammarError for:\n" << text;
  return GrammarError("none");
}

const char* kArithmetic = R"gbnf(
# integer arithmetic with precedence
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor
number ::= [0-9]+
)gbnf";

// llama.cpp's grammars/json.gbnf, from memory.
const char* kJson = R"gbnf(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

const char* kList = R"gbnf(
root ::= "[" (item ("," item){1,3})? "]"
item ::= [a-c]{2} | [0-9]{1,} | "x"{0}"y"{2,}
)gbnf";

const char* kUnicode = R"gbnf(
root  ::= "\"" char* "\"" | "é" "中"? | any
char  ::= [^"\\] | "\\" ["\\]
any   ::= "<" . ">"
)gbnf";

// ---- Languages ---------------------------------------------------------------------------------

TEST(Ebnf, Arithmetic) {
  const Grammar g = parse_ebnf(kArithmetic);
  expect_language(g, {"1", "12+3", "1*(2-3)/4", "-(-7)", "((1))", "10*-2"}, {"", "1+", "(1", "1)", "a", "1 + 2", "*1"});
}

TEST(Ebnf, Json) {
  const Grammar g = parse_ebnf(kJson);
  expect_language(g,
                  {"{}", R"({"a": 1})", R"({"a":[1, 2.5e3, true, null, "x\"y"], "b": {"c": -0}})",
                   "{ \"k\" :\n  \"v\\u00e9\" }", "{\"\xC3\xA9\": \"\xE4\xB8\xAD\xF0\x9F\x98\x80\"}"},
                  {"", "[]", "{", R"({"a" 1})", R"({"a": 01x})", R"({"a": "\q"})", "{\"a\": \"\x01\"}", R"({"a": tru})",
                   R"({"a": 1,})"});
}

TEST(Ebnf, CountedRepetitions) {
  const Grammar g = parse_ebnf(kList);
  expect_language(g, {"[]", "[ab,1,yy]", "[cc,0,1,yyy]", "[12,34,ab,yyyyy]"},
                  {"[ab]", "[ab,1,2,3,4]", "[a,b]", "[abc,1]", "[y,1]", "[x,1]", "[xyy,1]"});
}

TEST(Ebnf, NegatedClassAndAnyCharCoverUnicode) {
  const Grammar g = parse_ebnf(kUnicode);
  expect_language(
      g,
      {"\"\"", "\"abc\"", "\"caf\xC3\xA9\"", "\"\xE4\xB8\xAD\xE6\x96\x87\"", "\"\xF0\x9F\x98\x80\"", "\"a\\\"b\\\\\"",
       "\xC3\xA9", "\xC3\xA9\xE4\xB8\xAD", "<a>", "<\xF0\x9F\x98\x80>", "<\xC3\xA9>", "<\n>"},
      {"\"a\"b\"", "\"\\\"", "\"\\n\"", "\"\xC3\"", "\"\xFF\"", "\"\xED\xA0\x80\"", "<>", "<ab>", "<\xC3>",
       "<\xE4\xB8>", "\xE4\xB8\xAD"});
}

TEST(Ebnf, ClassesOfBytesAndCharacters) {
  const Grammar g = parse_ebnf(R"(
root ::= ascii | bytes | chars | escapes
ascii ::= "a" [a-cx\-\]]
bytes ::= "b" [\x80-\xBF\x00] | "B" [\x41-\x80]
chars ::= "c" [\u00e9-\u00ea\U0001F600中]
escapes ::= "d" "\x41\u0041\t\\\"\/"
)");
  expect_language(g,
                  {"aa", "ac", "ax", "a-", "a]", "b\x80", "b\xBF", std::string("b\0", 2), "c\xC3\xA9", "c\xC3\xAA",
                   "c\xF0\x9F\x98\x80", "c\xE4\xB8\xAD", "dAA\t\\\"/", "BA", "B\x80", "Bz"},
                  {"ad", "a\\", "b\xC0", "ba", "c\xC3\xAB", "c\xE9", "c\xF0\x9F\x98\x81", "dAA\t\\\"\\/"});
  // An ASCII-only class is one byte set, not a rule.
  const Grammar one = parse_ebnf("root ::= [a-z_]");
  ASSERT_EQ(one.rules[one.root].alts.size(), 1u);
  ASSERT_EQ(one.rules[one.root].alts[0].size(), 1u);
  EXPECT_EQ(one.rules[one.root].alts[0][0].kind, Element::bytes);
}

TEST(Ebnf, LayoutCommentsAndReferencesBeforeDefinitions) {
  const Grammar g = parse_ebnf(
      "# leading comment\n"
      "root ::= a # trailing comment\n"
      "  | b\n"
      "  b # the body runs on to the next `name ::=`\n"
      "a ::=\n"
      "  \"x\" \"\"  # empty literal\n"
      "b::=\"y\"|\n");
  expect_language(g, {"x", "yy", "y", ""}, {"z", "xy", "yyy"});
}

TEST(Ebnf, UserRulesKeepTheirNamesAndRootComesFirst) {
  const Grammar g = parse_ebnf("item ::= \"a\"*\nroot ::= item item-star\nitem-star ::= \"b\"");
  EXPECT_EQ(g.rules[g.root].name, "root");
  EXPECT_EQ(g.root, 0u);
  EXPECT_EQ(g.rules[1].name, "item");
  EXPECT_EQ(g.rules[2].name, "item-star");
  expect_language(g, {"b", "aab"}, {"", "aa", "bb"});
}

// ---- Round trip --------------------------------------------------------------------------------

// Random strings from a grammar: derivations, preferring the shallowest alternatives once deep so
// they end; then mutated copies, which are mostly outside the language.
class Sampler {
 public:
  Sampler(const Grammar& g, uint32_t seed) : g_(g), rng_(seed) { heights(); }

  std::string sample() {
    std::string out;
    derive(g_.root, 0, out);
    return out;
  }

  std::string mutate(std::string s) {
    const std::string alphabet = "ab01,[]{}\"\\:-+*/() \n\xC3\xA9\xE4\xB8\xAD\x80\xFF";
    const int op = static_cast<int>(rng_() % 3);
    const size_t at = s.empty() ? 0 : rng_() % (s.size() + (op == 0 ? 1 : 0));
    const char c = alphabet[rng_() % alphabet.size()];
    if (op == 0 || s.empty()) {
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(std::min(at, s.size())), c);
    } else if (op == 1) {
      s.erase(at, 1);
    } else {
      s[at] = c;
    }
    return s;
  }

 private:
  // Height of the shallowest derivation of each rule (fixpoint).
  void heights() {
    constexpr int kInf = 1 << 20;
    height_.assign(g_.rules.size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < g_.rules.size(); ++i)
        for (const Sequence& s : g_.rules[i].alts) {
          const int h = alt_height(s);
          if (h < height_[i]) height_[i] = h, changed = true;
        }
    }
  }
  int alt_height(const Sequence& s) const {
    int h = 1;
    for (const Element& e : s)
      if (e.kind == Element::rule) h = std::max(h, height_[e.index] + 1);
    return h;
  }

  void derive(uint32_t rule, int depth, std::string& out) {
    const auto& alts = g_.rules[rule].alts;
    size_t pick = rng_() % alts.size();
    if (depth > 8)
      pick = static_cast<size_t>(
          std::min_element(alts.begin(), alts.end(),
                           [&](const Sequence& a, const Sequence& b) { return alt_height(a) < alt_height(b); }) -
          alts.begin());
    for (const Element& e : alts[pick]) {
      if (e.kind == Element::rule) {
        derive(e.index, depth + 1, out);
        continue;
      }
      const ByteSet& set = g_.sets[e.index];
      std::vector<uint8_t> members;
      for (unsigned b = 0; b < 256; ++b)
        if (set.has(static_cast<uint8_t>(b))) members.push_back(static_cast<uint8_t>(b));
      out += static_cast<char>(members[rng_() % members.size()]);
    }
  }

  const Grammar& g_;
  std::mt19937 rng_;
  std::vector<int> height_;
};

void expect_round_trip(const Grammar& g, uint32_t seed) {
  const std::string text = g.to_text();
  SCOPED_TRACE(text);
  const Grammar back = parse_ebnf(text);
  EXPECT_EQ(back.to_text(), text) << "printing the re-read grammar gives the same text";
  Recognizer a(g), b(back);
  Sampler sampler(g, seed);
  int accepted = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string s = sampler.sample();
    const std::string m = sampler.mutate(s);
    EXPECT_TRUE(a.accepts(s)) << "sampled from the grammar: " << s;
    EXPECT_TRUE(b.accepts(s)) << s;
    EXPECT_EQ(a.accepts(m), b.accepts(m)) << m;
    accepted += a.accepts(m);
  }
  EXPECT_LT(accepted, 300) << "the mutations should leave the language sometimes";
}

TEST(EbnfRoundTrip, HandWrittenGrammars) {
  uint32_t seed = 1;
  for (const char* text : {kArithmetic, kJson, kList, kUnicode}) expect_round_trip(parse_ebnf(text), seed++);
}

TEST(EbnfRoundTrip, BuilderGrammarWithOddNamesAndByteSets) {
  Grammar g;
  const uint32_t root = g.rule("the root");  // not named root
  const uint32_t other = g.rule("root");     // a non-root rule named root
  const uint32_t dotted = g.rule("a.b");
  const uint32_t dashed = g.rule("a-b");  // what a.b would sanitize to
  ByteSet odd;
  for (uint8_t b : {0x00, 0x0A, 0x20, 0x22, 0x2D, 0x5C, 0x5E, 0x7F}) odd.add(b);
  odd.add(0x80, 0xBF);
  odd.add(0xFE, 0xFF);
  g.root = root;
  g.define(root, {{g.ref(other), g.ref(dotted)}, {g.ref(dashed)}});
  g.define(other, {g.literal("\"q\\\n\x01\xFF"), {}});
  g.define(dotted, {{g.bytes(odd), g.bytes(ByteSet::range(0, 255))}});
  ByteSet bracket_ab = ByteSet::range('a', 'b');
  bracket_ab.add(']');
  g.define(dashed, {{g.bytes(bracket_ab), g.bytes(ByteSet::range('x', 'z'))}});
  g.validate();

  const std::string text = g.to_text();
  EXPECT_EQ(text.rfind("root ::= ", 0), 0u) << text;
  EXPECT_NE(text.find("\na-b ::= "), std::string::npos) << text;
  EXPECT_NE(text.find("\na-b-1 ::= "), std::string::npos) << text;
  EXPECT_NE(text.find("\nroot-1 ::= "), std::string::npos) << text;
  EXPECT_NE(text.find(R"([\x00\x0A "\-\\\^\x7F-\xBF\xFE\xFF] [\x00-\xFF])"), std::string::npos) << text;
  EXPECT_NE(text.find(R"([\]ab] [x-z])"), std::string::npos) << text;
  expect_round_trip(g, 42);

  // Byte sets come back as the same sets.
  const Grammar back = parse_ebnf(text);
  for (const ByteSet& s : g.sets) EXPECT_NE(std::find(back.sets.begin(), back.sets.end(), s), back.sets.end());
}

TEST(EbnfRoundTrip, EmptyThingsPrint) {
  Grammar g;
  const uint32_t root = g.rule("root");
  const uint32_t never = g.rule("never");
  g.define(root, {{}, {g.ref(never)}, {g.bytes(ByteSet{}), g.byte('a')}});
  g.define(never, {});
  EXPECT_EQ(g.to_text(), "root ::= \"\" | never | [] \"a\"\nnever ::= []\n");
  const Grammar back = parse_ebnf(g.to_text());
  expect_language(back, {""}, {"a", " "});
}

// ---- Errors ------------------------------------------------------------------------------------

TEST(EbnfErrors, UndefinedRuleNamesTheReference) {
  const GrammarError e = error_of("root ::= a\na ::= \"x\"\n  | \"y\" missing\n");
  EXPECT_EQ(e.where(), "line 3:9");
  EXPECT_NE(std::string(e.what()).find("'missing' is used but never defined"), std::string::npos) << e.what();
}

TEST(EbnfErrors, MissingRoot) {
  const GrammarError e = error_of("start ::= \"a\"");
  EXPECT_NE(std::string(e.what()).find("no rule named 'root'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(error_of("# only a comment\n").what()).find("root"), std::string::npos);
}

TEST(EbnfErrors, Unterminated) {
  GrammarError e = error_of("root ::= \"abc\n");
  EXPECT_EQ(e.where(), "line 1:10");
  EXPECT_NE(std::string(e.what()).find("unterminated string"), std::string::npos) << e.what();
  e = error_of("root ::= \"a\" [a-z");
  EXPECT_EQ(e.where(), "line 1:14");
  EXPECT_NE(std::string(e.what()).find("unterminated character class"), std::string::npos) << e.what();
  e = error_of("root ::= (\"a\" | \"b\"\n");
  EXPECT_EQ(e.where(), "line 1:10");
  EXPECT_NE(std::string(e.what()).find("expected ')'"), std::string::npos) << e.what();
  e = error_of("root ::= (\"a\"\nx ::= \"b\"");
  EXPECT_NE(std::string(e.what()).find("expected ')'"), std::string::npos) << e.what();
}

TEST(EbnfErrors, BadRepetition) {
  GrammarError e = error_of("root ::= \"a\"{3,1}");
  EXPECT_EQ(e.where(), "line 1:13");
  EXPECT_NE(std::string(e.what()).find("maximum 1 is below the minimum 3"), std::string::npos) << e.what();
  e = error_of("root ::= \"a\"{,2}");
  EXPECT_NE(std::string(e.what()).find("expected a count"), std::string::npos) << e.what();
  e = error_of("root ::= \"a\"{2");
  EXPECT_NE(std::string(e.what()).find("expected '}'"), std::string::npos) << e.what();
  e = error_of("root ::= (\"a\"?)*");
  EXPECT_EQ(e.where(), "line 1:16");
  EXPECT_NE(std::string(e.what()).find("can match the empty string"), std::string::npos) << e.what();
}

TEST(EbnfErrors, DeepNestingIsRefusedNotACrash) {
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  const GrammarError e = error_of(deep);
  EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  const std::string fine = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  expect_language(parse_ebnf(fine), {"a"}, {"", "aa"});
}

TEST(EbnfErrors, LeftRecursion) {
  const GrammarError e = error_of("root ::= root \"a\" | \"b\"");
  EXPECT_NE(std::string(e.what()).find("'root' is left-recursive"), std::string::npos) << e.what();
}

TEST(EbnfErrors, Syntax) {
  struct Case {
    const char* text;
    const char* where;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"root = \"a\"", "line 1:6", "expected '::='"},
           {"root ::= \"a\" ; \"b\"", "line 1:14", "unexpected ';'"},
           {"root ::= \"a\")", "line 1:13", "unmatched ')'"},
           {"root ::= \"\\q\"", "line 1:11", "unknown escape"},
           {"root ::= \"\\u12\"", "line 1:11", "4 hex digits"},
           {"root ::= [z-a]", "line 1:11", "range reversed"},
           {"root ::= [\\xFF-\\x80]", "line 1:11", "its end 0x80 is below its start 0xFF"},
           {"root ::= [\\u00e9-\\xFF]", "line 1:11", "a range mixes a raw byte"},
           {"root ::= [^\\x80]", "line 1:12", "negated class"},
           {"root ::= \"\\uD800\"", "line 1:11", "surrogate"},
           {"root ::= \"a\"\nroot ::= \"b\"", "line 2:1", "defined twice"},
           {"::= \"a\"", "line 1:1", "expected a rule name"},
           {"root ::= \"\xC3\xA9\" @", "line 1:14", "unexpected '@'"},
       }) {
    const GrammarError e = error_of(c.text);
    EXPECT_EQ(e.where(), c.where) << c.text;
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.text << " -> " << e.what();
  }
}

}  // namespace
