// The JSON-Schema-Test-Suite (draft 2020-12) harness shared by test_schema_suite.cpp (the grammar's
// language through the recognizer) and test_schema_matcher.cpp (the matcher over real tokens):
// which files run, the instances' spellings and key orders, and the oneOf divergence check. Each
// caller says how it decides whether a grammar accepts a text.
//
// The grammar writes object properties in one fixed order (the schema's), while the suite's
// instances are unordered objects. So an instance counts as accepted when some order of its keys
// is accepted (all orders are tried, nested objects included, up to kMaxOrders): a valid instance
// must have an accepted order, an invalid one none. Each instance is checked in three spellings:
// minified, with a space after ',' and ':', and pretty-printed with indent 2.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "grammar/json_schema.hpp"
#include "source_paths.hpp"

namespace kiln::grammar::test {

using Json = nlohmann::ordered_json;

inline const std::filesystem::path kSuite =
    std::filesystem::path(KILN_TEST_SOURCE_DIR) / "../shared/fixtures/json-schema-test-suite/tests/draft2020-12";

// Files whose subject conflicts with what the grammar engine asserts, with the reason.
inline const std::map<std::string, std::string> kSkipped = {
    {"format.json", "format is only an annotation in this file; the engine asserts formats (optional/format/*.json)"},
    {"vocabulary.json", "needs a custom metaschema that disables vocabularies"},
};
inline const std::vector<std::string> kFormatFiles = {
    "date-time.json", "date.json", "time.json", "duration.json",      "uuid.json",   "email.json",
    "ipv4.json",      "ipv6.json", "uri.json",  "uri-reference.json", "unknown.json"};

constexpr size_t kMaxOrders = 5000;

struct SuiteFile {
  std::filesystem::path path;
  std::string label;  ///< the name failures are reported under
};

/** The files the harness runs, in its order; a line per skipped file (with the reason) goes to `skipped`. */
inline std::vector<SuiteFile> suite_files(std::vector<std::string>* skipped = nullptr) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(kSuite))
    if (entry.path().extension() == ".json") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  std::vector<SuiteFile> out;
  for (const std::filesystem::path& p : paths) {
    const std::string name = p.filename().string();
    if (auto it = kSkipped.find(name); it != kSkipped.end()) {
      if (skipped) skipped->push_back(fmt::format("skipped {}: {}", name, it->second));
      continue;
    }
    out.push_back({p, name});
  }
  for (const std::string& name : kFormatFiles)
    out.push_back({kSuite / "optional" / "format" / name, "optional/format/" + name});
  return out;
}

inline Json read_suite_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// Every key order of `v` (recursively), up to `limit` variants.
inline std::vector<Json> key_orders(const Json& v, size_t limit) {
  if (v.is_array()) {
    std::vector<Json> out = {Json::array()};
    for (const Json& e : v) {
      std::vector<Json> next;
      for (const Json& sub : key_orders(e, limit))
        for (const Json& prefix : out) {
          if (next.size() >= limit) break;
          Json a = prefix;
          a.push_back(sub);
          next.push_back(std::move(a));
        }
      out = std::move(next);
    }
    return out;
  }
  if (!v.is_object()) return {v};
  std::vector<std::string> keys;
  for (auto& [k, e] : v.items()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  std::vector<Json> out;
  do {
    std::vector<Json> partial = {Json::object()};
    for (const std::string& k : keys) {
      std::vector<Json> next;
      for (const Json& sub : key_orders(v[k], limit))
        for (const Json& prefix : partial) {
          if (next.size() >= limit) break;
          Json o = prefix;
          o[k] = sub;
          next.push_back(std::move(o));
        }
      partial = std::move(next);
    }
    for (Json& o : partial)
      if (out.size() < limit) out.push_back(std::move(o));
  } while (out.size() < limit && std::next_permutation(keys.begin(), keys.end()));
  return out;
}

inline std::string spaced(const Json& v) {
  if (v.is_object()) {
    std::string s = "{";
    for (auto& [k, e] : v.items()) s += (s.size() > 1 ? ", " : "") + Json(k).dump() + ": " + spaced(e);
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (const Json& e : v) s += (s.size() > 1 ? ", " : "") + spaced(e);
    return s + "]";
  }
  return v.dump();
}

struct Style {
  const char* name;
  std::string (*write)(const Json&);
};
inline const Style kStyles[] = {{"minified", [](const Json& v) { return v.dump(); }},
                                {"spaced", [](const Json& v) { return spaced(v); }},
                                {"pretty", [](const Json& v) { return v.dump(2); }}};

/** Whether `accepts(text)` holds for some order's spelling; `first` gets the accepted text, else the first tried. */
template <class Accepts>
bool accepts_some_order(const std::vector<Json>& orders, const Style& style, std::string* first, Accepts&& accepts) {
  for (const Json& o : orders) {
    const std::string text = style.write(o);
    if (first && first->empty()) *first = text;
    if (accepts(text)) {
      if (first) *first = text;
      return true;
    }
  }
  return false;
}

inline SchemaOptions suite_options() {
  SchemaOptions o;
  o.strict = false;  // the suite means plain JSON Schema: additional properties allowed
  return o;
}

/** Whether `schema` is refused as unsatisfiable, which is right when the suite expects every instance invalid. */
inline bool refused_as_empty(const GrammarError& e, const Json& group) {
  const bool none_valid =
      std::none_of(group["tests"].begin(), group["tests"].end(), [](const Json& t) { return t["valid"].get<bool>(); });
  return std::string(e.what()).find("accepts no JSON value") != std::string::npos && none_valid;
}

/** An invalid instance accepted because oneOf is compiled as anyOf: two branches accept it
 *  (`accepts(grammar, text)` decides for each branch's grammar, minified). */
template <class Accepts>
bool oneof_overlap(const Json& schema, const Json& instance, Accepts&& accepts) {
  if (!schema.is_object() || !schema.contains("oneOf")) return false;
  int accepting = 0;
  for (const Json& branch : schema["oneOf"]) {
    Json s = schema;
    s["oneOf"] = Json::array({branch});
    try {
      const Grammar g = schema_to_grammar(s.dump(), suite_options());
      if (accepts_some_order(key_orders(instance, kMaxOrders), kStyles[0], nullptr,
                             [&](const std::string& text) { return accepts(g, text); }))
        ++accepting;
    } catch (const GrammarError&) {
    }
  }
  return accepting >= 2;
}

}  // namespace kiln::grammar::test
