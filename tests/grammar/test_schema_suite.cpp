// The JSON-Schema-Test-Suite (draft 2020-12) through schema_to_grammar: for every test group the
// schema either compiles or is refused with a GrammarError (an unsupported keyword or
// combination), and every instance's JSON text is in the grammar's language exactly when the
// suite says it is valid.
//
// Key orders and spellings: see schema_suite.hpp (the harness shared with test_schema_matcher.cpp).
//
// Then what the suite does not cover: exact numeric ranges (checked against decimal comparison
// on many texts), integer spellings, string lengths and escapes, key exclusion, strict mode,
// whitespace limits, error locations, size and speed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/json_number.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/recognizer.hpp"
#include "grammar/schema_suite.hpp"

namespace kiln::grammar {
namespace {

using test::Json;
using test::key_orders;
using test::kMaxOrders;
using test::kStyles;
using test::Style;
using test::suite_options;
namespace fs = std::filesystem;

// The one place the harness asks whether a grammar accepts a text (test_schema_matcher.cpp asks the matcher).
bool grammar_accepts(const Grammar& g, const std::string& text) {
  return Recognizer(g).accepts(text);
}

std::string refusal_bucket(const GrammarError& e) {
  const std::string m = e.what();
  if (auto k = m.find("keyword '"); k != std::string::npos) return m.substr(k, m.find('\'', k + 9) - k + 1);
  if (auto k = m.find("format '"); k != std::string::npos) return m.substr(k, m.find('\'', k + 8) - k + 1);
  const std::string body = m.substr(e.where().empty() ? 0 : e.where().size() + 2);
  return body.substr(0, std::min<size_t>(body.size(), 60));
}

struct Summary {
  int files = 0, groups = 0, compiled = 0, empty = 0, refused = 0, instances = 0, checks = 0, oneof_divergences = 0;
  std::map<std::string, int> refused_by;
  std::vector<std::string> failures, divergences;
};

void run_group(const std::string& file, const Json& group, Summary& sum) {
  ++sum.groups;
  Grammar g;
  try {
    g = schema_to_grammar(group["schema"].dump(), suite_options());
  } catch (const GrammarError& e) {
    // An unsatisfiable schema is refused as such: right when the suite expects every instance invalid.
    if (test::refused_as_empty(e, group)) {
      ++sum.compiled;
      ++sum.empty;
      sum.instances += static_cast<int>(group["tests"].size());
      return;
    }
    ++sum.refused;
    ++sum.refused_by[refusal_bucket(e)];
    return;
  }
  ++sum.compiled;
  for (const Json& test : group["tests"]) {
    ++sum.instances;
    const bool valid = test["valid"].get<bool>();
    const std::vector<Json> orders = key_orders(test["data"], kMaxOrders);
    for (const Style& style : kStyles) {
      ++sum.checks;
      std::string text;
      const bool accepted =
          test::accepts_some_order(orders, style, &text, [&](const std::string& t) { return grammar_accepts(g, t); });
      if (accepted == valid) continue;
      const std::string line =
          fmt::format("{} | {} | {} | {} | false {} | {}", file, group["description"].get<std::string>(),
                      test["description"].get<std::string>(), style.name, accepted ? "accept" : "reject", text);
      if (accepted && test::oneof_overlap(group["schema"], test["data"], grammar_accepts)) {
        ++sum.oneof_divergences;
        sum.divergences.push_back(line);
        break;  // the same reason for every spelling
      }
      sum.failures.push_back(line);
    }
  }
}

void run_file(const test::SuiteFile& file, Summary& sum) {
  const Json groups = test::read_suite_file(file.path);
  ++sum.files;
  for (const Json& group : groups) run_group(file.label, group, sum);
}

TEST(SchemaSuite, Draft2020_12) {
  if (!fs::is_directory(test::kSuite)) GTEST_SKIP() << "JSON-Schema-Test-Suite not found at " << test::kSuite;
  Summary sum;
  std::vector<std::string> skipped;
  const std::vector<test::SuiteFile> files = test::suite_files(&skipped);
  for (const std::string& line : skipped) fmt::print("{}\n", line);
  for (const test::SuiteFile& f : files) run_file(f, sum);

  fmt::print(
      "files {}, groups {}: compiled {} ({} refused as unsatisfiable, all their instances invalid), refused {}; "
      "instances {} ({} checks)\n",
      sum.files, sum.groups, sum.compiled, sum.empty, sum.refused, sum.instances, sum.checks);
  for (auto& [reason, n] : sum.refused_by) fmt::print("  refused {:3}  {}\n", n, reason);
  fmt::print("documented divergences (oneOf compiled as anyOf; instance valid under two branches): {}\n",
             sum.oneof_divergences);
  for (const std::string& d : sum.divergences) fmt::print("  {}\n", d);
  fmt::print("false accepts / rejects: {}\n", sum.failures.size());
  for (const std::string& f : sum.failures) ADD_FAILURE() << f;
}

// --- beyond the suite

bool accepts(const Grammar& g, const std::string& text) {
  return Recognizer(g).accepts(text);
}

SchemaOptions loose(int ws = 24) {
  SchemaOptions o;
  o.strict = false;
  o.max_whitespace = ws;
  return o;
}

std::string random_number(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::string s = pick(rng) < 4 ? "-" : "";
  const int int_len = 1 + pick(rng) % 3;
  s += pick(rng) < 3 ? "0" : std::to_string(1 + pick(rng) % 9);
  if (s.back() != '0')
    for (int i = 1; i < int_len; ++i) s += std::to_string(pick(rng));
  if (pick(rng) < 5) {
    s += ".";
    for (int i = 0, n = 1 + pick(rng) % 3; i < n; ++i) s += pick(rng) < 4 ? "0" : std::to_string(pick(rng));
  }
  return s;
}

TEST(JsonSchemaNumbers, RangesMatchDecimalComparison) {
  const std::vector<std::string> bounds = {"-12.5", "-1", "0", "0.25", "3", "10", "100.75", "0.05"};
  std::mt19937 rng(7);
  std::vector<std::string> texts = {"0",  "-0",   "0.0",   "-0.0",   "3",      "3.0",   "3.00",
                                    "10", "9.99", "10.01", "0.25",   "0.250",  "0.2",   "0.3",
                                    "-1", "-1.0", "-12.5", "-12.50", "-12.51", "100.75"};
  for (int i = 0; i < 300; ++i) texts.push_back(random_number(rng));
  int checked = 0;
  for (const std::string& lo : bounds)
    for (const std::string& hi : bounds)
      for (int flags = 0; flags < 8; ++flags) {
        const bool ex_lo = flags & 1, ex_hi = flags & 2, integer = flags & 4;
        const std::string schema =
            fmt::format(R"({{"type":"{}","{}":{},"{}":{}}})", integer ? "integer" : "number",
                        ex_lo ? "exclusiveMinimum" : "minimum", lo, ex_hi ? "exclusiveMaximum" : "maximum", hi);
        NumberSpec spec;
        spec.integer = integer;
        add_lower(spec, {parse_decimal(lo), ex_lo});
        add_upper(spec, {parse_decimal(hi), ex_hi});
        Grammar g;
        try {
          g = schema_to_grammar(schema, loose());
        } catch (const GrammarError& e) {
          // Only an empty range may be refused.
          for (const std::string& t : texts) ASSERT_FALSE(number_in(spec, parse_decimal(t))) << schema << " " << t;
          continue;
        }
        for (const std::string& t : texts) {
          ASSERT_EQ(accepts(g, t), number_in(spec, parse_decimal(t))) << schema << " on " << t;
          ++checked;
        }
      }
  EXPECT_GT(checked, 50000);
}

TEST(JsonSchemaNumbers, OneSidedBoundsAndLongBounds) {
  const Grammar g = schema_to_grammar(R"({"type":"number","minimum":-0.001})", loose());
  for (const char* t : {"-0.001", "-0.0009", "0", "12345678901234567890.5", "-0"}) EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {"-0.0011", "-1", "-0.002", "1e5"}) EXPECT_FALSE(accepts(g, t)) << t;
  const Grammar big = schema_to_grammar(R"({"type":"integer","maximum":1e20})", loose());
  EXPECT_TRUE(accepts(big, "100000000000000000000"));
  EXPECT_FALSE(accepts(big, "100000000000000000001"));
  EXPECT_TRUE(accepts(big, "-100000000000000000000000"));
}

TEST(JsonSchemaNumbers, IntegerSpellings) {
  const Grammar g = schema_to_grammar(R"({"type":"integer"})", loose());
  for (const char* t : {"0", "-0", "1", "-17", "1.0", "1.000", "1e2", "1E+2", "1.5e1", "1.50e1", "1.25e2", "10e-1",
                        "100e-2", "100.00e-2", "0e-7", "0.0e5", "1.0e-0", "2e0", "123456789e-0"})
    EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {"1.5", "1.5e0", "1.55e1", "15e-1", "1e-1", "0.1", "01", "1.", "-", "1e", "+1", ".5"})
    EXPECT_FALSE(accepts(g, t)) << t;
  const Grammar n = schema_to_grammar(R"({"type":"number"})", loose());
  for (const char* t : {"0", "-0.5", "1e-7", "1.5E+3", "12.0"}) EXPECT_TRUE(accepts(n, t)) << t;
  for (const char* t : {"01", "1.", ".1", "1e", "--1", "NaN"}) EXPECT_FALSE(accepts(n, t)) << t;
}

TEST(JsonSchemaNumbers, ConstAcceptsEqualSpellings) {
  const Grammar g = schema_to_grammar(R"({"const":1500})", loose());
  for (const char* t : {"1500", "1500.0", "1.5e3", "1.500E+03"}) EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {"1501", "15e2x", "1.5e2"}) EXPECT_FALSE(accepts(g, t)) << t;
  const Grammar z = schema_to_grammar(R"({"enum":[0, -0.25]})", loose());
  for (const char* t : {"0", "-0", "0.0", "0e3", "-0.25", "-2.5e-1", "-0.250"}) EXPECT_TRUE(accepts(z, t)) << t;
  EXPECT_FALSE(accepts(z, "0.25"));
}

TEST(JsonSchemaStrings, EscapesAndSurrogates) {
  const Grammar g = schema_to_grammar(R"({"type":"string"})", loose());
  for (const char* t : {R"("")", R"("a\"b\\c\/\b\f\n\r\t")", R"("\u00e9\u00E9")", R"("\ud83d\ude00")", "\"é😀\""})
    EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t :
       {R"("\ud83d")", R"("\ude00")", R"("\ud83da")", R"("\x")", "\"\x01\"", "\"a", "\"\xff\"", "\"\xed\xa0\x80\""})
    EXPECT_FALSE(accepts(g, t)) << t;
}

TEST(JsonSchemaStrings, LengthCountsCodePoints) {
  const Grammar g = schema_to_grammar(R"({"type":"string","minLength":2,"maxLength":3})", loose());
  for (const char* t : {R"("ab")", R"("\ud83d\ude00a")", "\"😀é\"", R"("\n\t\u0041")"}) EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {R"("a")", "\"😀\"", R"("abcd")", R"("\ud83d\ude00")"}) EXPECT_FALSE(accepts(g, t)) << t;
  // Without "type", non-strings are unconstrained.
  const Grammar any = schema_to_grammar(R"({"minLength":2})", loose());
  EXPECT_TRUE(accepts(any, "1"));
  EXPECT_FALSE(accepts(any, R"("a")"));
}

TEST(JsonSchemaObjects, OptionalPropertiesAndCommas) {
  const Grammar g = schema_to_grammar(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
          "required":["b"],"additionalProperties":false})",
      loose(0));
  for (const char* t : {R"({"b":1})", R"({"a":1,"b":2})", R"({"b":1,"c":2})", R"({"a":1,"b":2,"c":3})"})
    EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t :
       {R"({})", R"({"a":1})", R"({"a":1,"c":3})", R"({"b":1,})", R"({,"b":1})", R"({"b":1,"d":2})", R"({"b":1 })"})
    EXPECT_FALSE(accepts(g, t)) << t;
}

TEST(JsonSchemaObjects, AdditionalKeysExcludeDeclaredOnes) {
  const Grammar g = schema_to_grammar(
      R"({"properties":{"a":{"type":"integer"},"ab":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
      loose(0));
  for (const char* t : {R"({"a":1})", R"({"a":1,"b":"x"})", R"({"abc":"x"})", R"({"":"x","A":"y"})", R"({"ab":2})"})
    EXPECT_TRUE(accepts(g, t)) << t;
  // A declared key must take its declared schema, in any spelling of it.
  for (const char* t : {R"({"a":"x"})", R"({"ab":"x"})", R"({"\u0061":"x"})", R"({"a\u0062":"x"})"})
    EXPECT_FALSE(accepts(g, t)) << t;
}

TEST(JsonSchemaObjects, StrictModeClosesDescribedObjects) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"object"}}})";
  SchemaOptions strict;
  const Grammar s = schema_to_grammar(schema, strict);
  EXPECT_TRUE(accepts(s, R"({"a":{"free":[1,{"x":null}]}})"));
  EXPECT_FALSE(accepts(s, R"({"a":{},"b":1})"));
  EXPECT_TRUE(accepts(schema_to_grammar(schema, loose()), R"({"a":{},"b":1})"));
}

TEST(JsonSchemaObjects, RecursionThroughRefs) {
  const Grammar g = schema_to_grammar(
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},
          "required":["v"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"next":{"v":2,"next":{"v":3}}})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"next":{"next":{"v":3}}})"));
}

TEST(JsonSchemaWhitespace, LimitPerGap) {
  const Grammar g = schema_to_grammar(R"({"type":"array","items":{"type":"integer"}})", loose(2));
  EXPECT_TRUE(accepts(g, "[  1,\n\t2 ]"));
  EXPECT_FALSE(accepts(g, "[1,   2]"));
  EXPECT_FALSE(accepts(g, " [1]"));
  const Grammar c = schema_to_grammar(R"({"type":"array"})", loose(0));
  EXPECT_TRUE(accepts(c, R"([1,{"a":[]}])"));
  EXPECT_FALSE(accepts(c, "[1, 2]"));
}

TEST(JsonSchemaArrays, PrefixItemsAndCounts) {
  const Grammar g = schema_to_grammar(
      R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":{"type":"boolean"},"minItems":1,"maxItems":4})",
      loose(0));
  for (const char* t : {R"(["a"])", R"(["a",1])", R"(["a",1,true])", R"(["a",1,true,false])"})
    EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {"[]", R"([1])", R"(["a","b"])", R"(["a",1,true,false,true])", R"(["a",1,2])"})
    EXPECT_FALSE(accepts(g, t)) << t;
}

// Drafts 4 to 2019-09 write tuples as items: [schemas], with additionalItems for the rest (ignored
// beside a schema-valued items, as those drafts say); 2020-12 has prefixItems and items.
TEST(JsonSchemaArrays, OlderDraftsTuplesAndAdditionalItems) {
  const Grammar closed = schema_to_grammar(
      R"({"type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false})", loose(0));
  for (const char* t : {"[]", "[1]", R"([1,"a"])"}) EXPECT_TRUE(accepts(closed, t)) << t;
  for (const char* t : {R"([1,"a",2])", R"(["a"])", R"([1,2])"}) EXPECT_FALSE(accepts(closed, t)) << t;
  const Grammar rest =
      schema_to_grammar(R"({"items":[{"type":"integer"}],"additionalItems":{"type":"boolean"}})", loose(0));
  EXPECT_TRUE(accepts(rest, "[1,true,false]"));
  EXPECT_FALSE(accepts(rest, "[1,2]"));
  const Grammar open = schema_to_grammar(R"({"items":[{"type":"integer"}]})", loose(0));
  EXPECT_TRUE(accepts(open, R"([1,"x",null])"));
  EXPECT_FALSE(accepts(open, R"(["x"])"));
  const Grammar ignored = schema_to_grammar(R"({"items":{"type":"integer"},"additionalItems":false})", loose(0));
  EXPECT_TRUE(accepts(ignored, "[1,2,3]"));
  EXPECT_THROW(schema_to_grammar(R"({"prefixItems":[{}],"items":[{}]})"), GrammarError);
  EXPECT_THROW(schema_to_grammar(R"({"items":[{}],"additionalItems":3})"), GrammarError);
}

// Member counts where the object's shape decides them; others are refused, naming the keyword.
TEST(JsonSchemaObjects, MinAndMaxPropertiesWhereTheShapeDecides) {
  const Grammar one =
      schema_to_grammar(R"({"type":"object","properties":{"a":{},"b":{}},"minProperties":1})", loose(0));
  EXPECT_FALSE(accepts(one, "{}"));
  for (const char* t : {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})", R"({"c":1})"})
    EXPECT_TRUE(accepts(one, t)) << t;
  const Grammar none = schema_to_grammar(R"({"type":"object","maxProperties":0})", loose(0));
  EXPECT_TRUE(accepts(none, "{}"));
  EXPECT_FALSE(accepts(none, R"({"a":1})"));
  const Grammar closed = schema_to_grammar(
      R"({"properties":{"a":{},"b":{}},"additionalProperties":false,"maxProperties":2,"minProperties":1,"required":["a"]})",
      loose(0));
  EXPECT_TRUE(accepts(closed, R"({"a":1,"b":2})"));
  EXPECT_FALSE(accepts(closed, R"({"b":2})"));
  for (const char* schema : {R"({"type":"object","minProperties":2})", R"({"type":"object","maxProperties":3})"}) {
    try {
      schema_to_grammar(schema);
      ADD_FAILURE() << schema;
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find("Properties"), std::string::npos) << e.what();
      EXPECT_TRUE(e.where() == "/minProperties" || e.where() == "/maxProperties") << e.where();
    }
  }
  // No object of the type at all: the counts never matter.
  EXPECT_NO_THROW(schema_to_grammar(R"({"type":"string","minProperties":5})"));
}

// patternProperties where it is exact: one pattern closing the object (additionalProperties false).
TEST(JsonSchemaObjects, OnePatternClosingTheObject) {
  const Grammar g = schema_to_grammar(
      R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
          "patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false})",
      loose(0));
  for (const char* t : {R"({"id":1})", R"({"id":1,"x-a":"v"})", R"({"id":1,"x-a":"v","x-":"w"})"})
    EXPECT_TRUE(accepts(g, t)) << t;
  for (const char* t : {R"({"id":1,"x-a":2})", R"({"id":1,"y":"v"})", R"({"x-a":"v"})"})
    EXPECT_FALSE(accepts(g, t)) << t;
  // Refused where a grammar would be wider or narrower, naming the pattern: keys matching no
  // pattern allowed, several patterns, a pattern a declared key matches (a generated key could
  // repeat it).
  for (const char* schema : {R"({"patternProperties":{"^a":{}}})",
                             R"({"properties":{"ab":{}},"patternProperties":{"^a":{}},"additionalProperties":false})",
                             R"({"patternProperties":{"^a":{},"^b":{}},"additionalProperties":false})"}) {
    try {
      schema_to_grammar(schema, loose(0));
      ADD_FAILURE() << schema;
    } catch (const GrammarError& e) {
      EXPECT_EQ(e.where().rfind("/patternProperties/", 0), 0u) << e.where();
    }
  }
  EXPECT_NO_THROW(schema_to_grammar(R"({"type":"array","patternProperties":{"^a":{},"^b":{}}})"));
}

TEST(JsonSchemaStrings, UriUriReferenceAndDurationFormats) {
  const Grammar uri = schema_to_grammar(R"({"type":"string","format":"uri"})", loose(0));
  for (const char* t : {R"("https://user:pw@example.com:8080/a/b%20c?q=1&r=x/y?#top")", R"("urn:isbn:0451450523")",
                        R"("http://[2001:db8::1]/")", R"("mailto:a@b.c")"})
    EXPECT_TRUE(accepts(uri, t)) << t;
  for (const char* t : {R"("/relative")", R"("no scheme")", R"("http://a b")", R"("http://x/%zz")", R"("1a:b")"})
    EXPECT_FALSE(accepts(uri, t)) << t;
  const Grammar ref = schema_to_grammar(R"({"type":"string","format":"uri-reference"})", loose(0));
  for (const char* t : {R"("../a/b?c#d")", R"("")", R"("//host/p")", R"("#f")"}) EXPECT_TRUE(accepts(ref, t)) << t;
  for (const char* t : {R"("a:b:c d")", R"("1:b")"}) EXPECT_FALSE(accepts(ref, t)) << t;
  const Grammar dur = schema_to_grammar(R"({"type":"string","format":"duration"})", loose(0));
  for (const char* t : {R"("P1Y2M3DT4H5M6S")", R"("PT36H")", R"("P2W")", R"("P1M2D")"})
    EXPECT_TRUE(accepts(dur, t)) << t;
  for (const char* t : {R"("P")", R"("P1Y2D")", R"("PT1H2S")", R"("P1WT1H")", R"("PT0.5S")"})
    EXPECT_FALSE(accepts(dur, t)) << t;
}

TEST(JsonSchemaErrors, NameKeywordAndPlace) {
  try {
    schema_to_grammar(R"({"properties":{"a":{"multipleOf":2}}})");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.where(), "/properties/a/multipleOf");
    EXPECT_NE(std::string(e.what()).find("multipleOf"), std::string::npos);
  }
  try {
    schema_to_grammar(R"({"type":"string","format":"hostname"})");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.where(), "/format");
    EXPECT_NE(std::string(e.what()).find("hostname"), std::string::npos);
  }
  try {
    schema_to_grammar(R"({"type":"string","pattern":"^a","maxLength":3})");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("pattern"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("maxLength"), std::string::npos);
  }
  EXPECT_THROW(schema_to_grammar(R"({"$ref":"http://example.com/s.json"})"), GrammarError);
  EXPECT_THROW(schema_to_grammar(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), GrammarError);  // empty
  // A pattern on a non-string type never matters.
  EXPECT_NO_THROW(schema_to_grammar(R"({"type":"integer","pattern":"^a","maxLength":3})"));
}

TEST(JsonSchemaErrors, AnnotationsAndUnknownKeywordsAreIgnoredValidationKeywordsRefused) {
  // Real schemas carry draft-04 ids, extensions, readonly flags and keywords of their own
  // (Snowplow's self): none changes the language.
  const char* plain = R"({"type":"object","properties":{"a":{"type":"integer","minimum":1}},"required":["a"]})";
  const char* annotated = R"({"id":"http://x/s#","$schema":"http://json-schema.org/draft-04/schema#",
      "self":{"vendor":"v","name":"n","version":"1-0-0"},"x-order":3,"type":"object",
      "properties":{"a":{"type":"integer","minimum":1,"readonly":true,"example":5,"x-unit":"s",
      "typo_keyword":{"type":"string"}}},"required":["a"]})";
  const Grammar g = schema_to_grammar(plain, loose(0)), h = schema_to_grammar(annotated, loose(0));
  for (const char* t : {R"({"a":1})", R"({"a":7,"b":null})", R"({"a":0})", R"({"a":"x"})", R"({})", R"({"a":1.5})"})
    EXPECT_EQ(accepts(h, t), accepts(g, t)) << t;
  EXPECT_TRUE(accepts(h, R"({"a":1})"));
  // A validation keyword kiln does not implement is never ignored, wherever it stands.
  for (const char* k : {"not", "if", "uniqueItems", "dependencies", "dependentRequired", "contains", "propertyNames",
                        "unevaluatedProperties", "multipleOf", "$dynamicRef"}) {
    const std::string schema = fmt::format(R"({{"properties":{{"a":{{"{}":{{}}}}}}}})", k);
    try {
      schema_to_grammar(schema);
      ADD_FAILURE() << k << " was not refused";
    } catch (const GrammarError& e) {
      EXPECT_EQ(e.where(), fmt::format("/properties/a/{}", k));
    }
  }
}

TEST(JsonSchemaEmbedding, AddSchemaPrefixesErrors) {
  Grammar g;
  const Element e = add_schema(g, R"({"type":"boolean"})", SchemaOptions{}, "args", "/tools/0");
  g.root = e.index;
  EXPECT_TRUE(accepts(g, "true"));
  try {
    add_schema(g, R"({"not":{}})", SchemaOptions{}, "args", "/tools/1");
    FAIL();
  } catch (const GrammarError& err) {
    EXPECT_EQ(err.where(), "/tools/1/not");
  }
  const Grammar obj = json_object_grammar();
  EXPECT_TRUE(accepts(obj, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(obj, "[1]"));
}

TEST(JsonSchemaSize, TypicalSchemaCompilesFast) {
  const char* schema = R"({
    "type":"object","additionalProperties":false,
    "properties":{
      "id":{"type":"string","format":"uuid"},
      "name":{"type":"string","minLength":1,"maxLength":64},
      "email":{"type":"string","format":"email"},
      "created":{"type":"string","format":"date-time"},
      "age":{"type":"integer","minimum":0,"maximum":150},
      "score":{"type":"number","exclusiveMinimum":0,"maximum":1},
      "role":{"enum":["admin","user","guest"]},
      "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]+$"},"maxItems":10},
      "address":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/address"}]}
    },
    "required":["id","name","role"],
    "$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street"]}}})";
  const auto t0 = std::chrono::steady_clock::now();
  const Grammar g = schema_to_grammar(schema);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("typical schema: {} rules, {} elements, {:.2f} ms\n", g.rules.size(), g.element_count(), ms);
  EXPECT_LT(g.element_count(), 60000u);
  EXPECT_TRUE(
      accepts(g, R"({"id":"2eb8aa08-aa98-11ea-b4aa-73b441d16380","name":"Ann","created":"2024-02-29T23:59:60Z",)"
                 R"("age":150,"score":1,"role":"user","tags":["a","bc"],"address":{"street":"x","zip":"12345"}})"));
  EXPECT_FALSE(accepts(g, R"({"id":"2eb8aa08-aa98-11ea-b4aa-73b441d16380","name":"Ann","age":151,"role":"user"})"));
}

}  // namespace
}  // namespace kiln::grammar
