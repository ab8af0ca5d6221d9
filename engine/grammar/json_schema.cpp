// JSON Schema to grammar. A value's schema is a conjunction: the set of subschemas (JSON pointers
// into the document) it must satisfy. Each conjunction becomes one rule, declared before it is
// built so that $ref recursion refers to it. Building expands $ref and allOf into the set and
// distributes anyOf / oneOf into alternatives ("flat" conjunctions), merges each flat set's
// keywords (types intersect, bounds tighten, per-property schemas conjoin) and writes the
// alternatives per allowed type.
//
// Known differences from JSON Schema, by design:
// * oneOf is treated as anyOf (an instance valid under two branches is accepted);
// * object properties come in the schema's `properties` order (then required-only keys, then
//   additional ones); duplicate keys are not excluded;
// * declared keys, and additional keys when declared keys exist, are spelled as char_alternatives
//   spells characters (raw UTF-8, \" \\ \/ \b \f \n \r \t, \u00XX for other controls) so that the
//   additional-key grammar can exclude declared keys exactly; other strings accept any escape;
// * enum / const strings are accepted in that spelling too; numbers in enum / const, and bounded
//   numbers, without an exponent (1 and 1.0 are both accepted); unbounded integers accept the
//   exponent forms listed in json_number.cpp;
// * no whitespace before or after the whole value.
#include "grammar/json_schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json_ordered.hpp"
#include "grammar/json_format.hpp"
#include "grammar/json_number.hpp"
#include "grammar/recognizer.hpp"
#include "grammar/regex.hpp"

namespace kiln::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Conj = std::vector<std::string>;  // sorted, unique JSON pointers into the schema document
using PtrSet = std::set<std::string>;

enum TypeBits : uint8_t {
  kNull = 1,
  kBool = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInt = 32,   // integral numbers
  kFrac = 64,  // numbers with a fractional part
  kAllTypes = 127
};

// Keywords this compiler acts on.
const std::set<std::string, std::less<>> kHandled = {"type",
                                                     "enum",
                                                     "const",
                                                     "properties",
                                                     "required",
                                                     "additionalProperties",
                                                     "items",
                                                     "prefixItems",
                                                     "additionalItems",
                                                     "minProperties",
                                                     "maxProperties",
                                                     "patternProperties",
                                                     "minItems",
                                                     "maxItems",
                                                     "anyOf",
                                                     "oneOf",
                                                     "allOf",
                                                     "$ref",
                                                     "$defs",
                                                     "definitions",
                                                     "pattern",
                                                     "minLength",
                                                     "maxLength",
                                                     "format",
                                                     "minimum",
                                                     "maximum",
                                                     "exclusiveMinimum",
                                                     "exclusiveMaximum"};
// Validation keywords of JSON Schema (drafts 4 to 2020-12) this compiler does not implement: a
// schema using one is refused by name, since ignoring it would let through output it forbids.
// Every other keyword it does not act on is an annotation (title, description, default, examples,
// readOnly, $comment, draft-04 id, x-* extensions, any keyword unknown to the specification),
// which JSON Schema says to ignore: it changes no instance's validity.
const std::set<std::string, std::less<>> kUnsupported = {"not",
                                                         "if",
                                                         "then",
                                                         "else",
                                                         "dependentSchemas",
                                                         "dependentRequired",
                                                         "dependencies",
                                                         "$dynamicRef",
                                                         "$recursiveRef",
                                                         "multipleOf",
                                                         "propertyNames",
                                                         "unevaluatedProperties",
                                                         "unevaluatedItems",
                                                         "contains",
                                                         "minContains",
                                                         "maxContains",
                                                         "uniqueItems"};

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& ptr, std::string_view key) {
  return ptr + "/" + pointer_token(key);
}
std::string child(const std::string& ptr, std::string_view key, size_t index) {
  return fmt::format("{}/{}/{}", ptr, key, index);
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += c;
    i += n;
  }
  return out;
}

uint8_t type_bit(const std::string& t, const std::string& where) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBool;
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "string") return kString;
  if (t == "integer") return kInt;
  if (t == "number") return kInt | kFrac;
  throw GrammarError(
      fmt::format("unknown type '{}' (expected null, boolean, object, array, string, integer, number)", t), where);
}

uint8_t value_type(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return kNull;
    case Json::value_t::boolean:
      return kBool;
    case Json::value_t::object:
      return kObject;
    case Json::value_t::array:
      return kArray;
    case Json::value_t::string:
      return kString;
    case Json::value_t::number_float:
      return parse_decimal(v.dump()).is_integral() ? kInt : kFrac;
    default:
      return kInt;
  }
}

// JSON Schema equality: numbers by value (1 == 1.0), objects regardless of key order.
bool json_equal(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return compare(parse_decimal(a.dump()), parse_decimal(b.dump())) == 0;
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto& [k, v] : a.items())
      if (!b.contains(k) || !json_equal(v, b[k])) return false;
    return true;
  }
  return a == b;
}

int64_t count_keyword(const Json& n, const char* kw, const std::string& where) {
  const Json& v = n[kw];
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() >= 0 &&
      v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
    return static_cast<int64_t>(v.get<double>());
  throw GrammarError(fmt::format("'{}' must be a non-negative integer", kw), where);
}

// The keywords of one flat conjunction, merged.
struct Merged {
  uint8_t types = kAllTypes;
  std::optional<std::vector<Json>> values;  // enum / const, intersected
  int64_t min_len = 0, max_len = -1;
  std::vector<std::pair<std::string, std::string>> patterns, formats;  // value, where
  std::string min_len_where, max_len_where;
  NumberSpec num;
  std::vector<std::string> keys;  // properties (first appearance), then required-only keys
  std::set<std::string> required;
  bool has_properties = false;
  int64_t min_props = 0, max_props = -1;
  std::string min_props_where, max_props_where;
  int64_t min_items = 0, max_items = -1;
};

Sequence cat(Sequence a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Compiler {
 public:
  Compiler(Grammar& g, const Json& doc, const SchemaOptions& opts, std::string_view name, std::string_view where)
      : g_(g), doc_(doc), opts_(opts), name_(name), where_(where) {
    collect_anchors(doc_, "");
  }

  /** The rule for values satisfying every schema in `conj`. */
  Element value(Conj conj);

 private:
  // --- the document
  const Json& at(const std::string& ptr) const { return doc_.at(Json::json_pointer(ptr)); }
  std::string where(const std::string& ptr) const { return where_ + ptr; }
  void collect_anchors(const Json& n, const std::string& ptr);
  std::string resolve_ref(const std::string& ptr, const Json& ref) const;
  void check_keywords(const std::string& ptr, const Json& n) const;

  // --- conjunctions
  void closure(PtrSet& s) const;
  void expand(PtrSet s, std::vector<PtrSet>& out) const;
  std::vector<PtrSet> flats(const Conj& conj) const;
  Merged merge(const PtrSet& flat) const;
  void merge_one(Merged& m, const std::string& ptr, const Json& n) const;
  void check_string_keywords(const Merged& m) const;
  bool is_false(const Conj& conj) const;
  Conj key_conj(const PtrSet& flat, const std::string& key) const;
  /** Whether the JSON Schema pattern (ECMA-262, unanchored) matches `key`. */
  bool key_matches(const std::string& pattern, const std::string& key) const;
  /** The value schemas of a key no `properties` declares: matching patternProperties, else
   *  additionalProperties, per schema of `flat`; nullopt when some schema allows no such key. */
  std::optional<Conj> undeclared_conj(const PtrSet& flat, const Merged& m, const std::string& key) const;
  std::optional<Conj> additional_conj(const PtrSet& flat, const Merged& m) const;
  size_t prefix_count(const PtrSet& flat) const;
  Conj item_conj(const PtrSet& flat, size_t index) const;

  // --- validation of enum / const values against the other keywords
  bool valid(const Json& v, const Conj& conj) const;
  bool valid_flat(const Json& v, const PtrSet& flat) const;
  bool valid_string(const std::string& s, const Merged& m) const;
  bool valid_object(const Json& v, const PtrSet& flat, const Merged& m) const;
  bool valid_array(const Json& v, const PtrSet& flat, const Merged& m) const;

  // --- grammar pieces
  std::vector<Sequence> alternatives(const PtrSet& flat);
  Sequence ws();
  Sequence sep(char c) {
    Sequence s = ws();
    for (char b : c == ',' ? opts_.item_separator : opts_.key_separator) s.push_back(g_.byte(static_cast<uint8_t>(b)));
    return cat(s, ws());
  }
  Element char_unit();
  Element any_string_content();
  Sequence spelled(std::string_view text);
  Element string_alt(const Merged& m);
  Element number_alt(const NumberSpec& spec);
  std::optional<Element> object_alt(const PtrSet& flat, const Merged& m);
  std::optional<Element> array_alt(const PtrSet& flat, const Merged& m);
  Element additional_key(const std::vector<std::string>& keys);
  Element literal_value(const Json& v);

  Grammar& g_;
  const Json& doc_;
  SchemaOptions opts_;
  std::string name_, where_;
  std::map<std::string, std::string> anchors_;
  std::map<Conj, uint32_t> memo_;
  std::map<std::string, Element> pieces_;  // shared rules by name
};

void Compiler::collect_anchors(const Json& n, const std::string& ptr) {
  if (n.is_object()) {
    if (!ptr.empty() && n.contains("$id")) return;  // another resource: its anchors are not ours
    if (auto it = n.find("$anchor"); it != n.end() && it->is_string()) anchors_[it->get<std::string>()] = ptr;
    for (auto& [k, v] : n.items())
      if (k != "enum" && k != "const" && k != "default" && k != "examples") collect_anchors(v, child(ptr, k));
  } else if (n.is_array()) {
    for (size_t i = 0; i < n.size(); ++i) collect_anchors(n[i], fmt::format("{}/{}", ptr, i));
  }
}

std::string Compiler::resolve_ref(const std::string& ptr, const Json& ref) const {
  const std::string w = child(ptr, "$ref");
  if (!ref.is_string()) throw GrammarError("$ref must be a string", where(w));
  const std::string s = ref.get<std::string>();
  // A $ref inside a subschema with its own $id resolves against that $id: not supported.
  for (size_t k = ptr.find('/', 1); !ptr.empty(); k = ptr.find('/', k + 1)) {
    const std::string up = k == std::string::npos ? ptr : ptr.substr(0, k);
    if (at(up).is_object() && at(up).contains("$id"))
      throw GrammarError(
          fmt::format("$ref '{}' inside a subschema with its own $id is not supported; use refs relative "
                      "to the root document",
                      s),
          where(w));
    if (k == std::string::npos) break;
  }
  if (s.empty() || s[0] != '#')
    throw GrammarError(fmt::format("remote $ref '{}' is not supported; only local refs (#, #/$defs/…, #anchor)", s),
                       where(w));
  const std::string frag = percent_decode(s.substr(1));
  if (frag.empty()) return "";
  if (frag[0] != '/') {
    auto it = anchors_.find(frag);
    if (it == anchors_.end())
      throw GrammarError(fmt::format("$ref '{}': no $anchor '{}' in this document", s, frag), where(w));
    return it->second;
  }
  try {
    if (doc_.contains(Json::json_pointer(frag))) return frag;
  } catch (const nlohmann::json::exception&) {
  }
  throw GrammarError(fmt::format("$ref '{}' does not resolve to a schema in this document", s), where(w));
}

void Compiler::check_keywords(const std::string& ptr, const Json& n) const {
  for (auto& [k, v] : n.items())
    if (kUnsupported.count(k) && !kHandled.count(k))
      throw GrammarError(fmt::format("keyword '{}' is not supported; remove it or express the constraint with "
                                     "supported keywords",
                                     k),
                         where(child(ptr, k)));
}

void Compiler::closure(PtrSet& s) const {
  std::vector<std::string> work(s.begin(), s.end());
  auto add = [&](std::string p) {
    if (s.insert(p).second) work.push_back(std::move(p));
  };
  while (!work.empty()) {
    const std::string p = work.back();
    work.pop_back();
    const Json& n = at(p);
    if (n.is_boolean()) continue;
    if (!n.is_object()) throw GrammarError("a schema must be an object or a boolean", where(p));
    check_keywords(p, n);
    if (n.contains("$ref")) add(resolve_ref(p, n["$ref"]));
    if (auto it = n.find("allOf"); it != n.end()) {
      if (!it->is_array() || it->empty())
        throw GrammarError("allOf must be a non-empty array", where(child(p, "allOf")));
      for (size_t i = 0; i < it->size(); ++i) add(child(p, "allOf", i));
    }
  }
}

constexpr size_t kMaxFlats = 512;

void Compiler::expand(PtrSet s, std::vector<PtrSet>& out) const {
  closure(s);
  for (const std::string& p : s)
    if (at(p).is_boolean() && !at(p).get<bool>()) return;  // false: nothing
  for (const std::string& p : s) {
    const Json& n = at(p);
    if (!n.is_object()) continue;
    for (const char* kw : {"anyOf", "oneOf"}) {
      auto it = n.find(kw);
      if (it == n.end()) continue;
      if (!it->is_array() || it->empty())
        throw GrammarError(fmt::format("{} must be a non-empty array", kw), where(child(p, kw)));
      std::vector<std::string> alts;
      bool satisfied = false;
      for (size_t i = 0; i < it->size(); ++i) {
        alts.push_back(child(p, kw, i));
        satisfied = satisfied || s.count(alts.back());
      }
      if (satisfied) continue;  // A and (A or B) is A
      for (const std::string& a : alts) {
        PtrSet next = s;
        next.insert(a);
        expand(std::move(next), out);
        if (out.size() > kMaxFlats)
          throw GrammarError(
              fmt::format("anyOf / oneOf combinations exceed {} alternatives; simplify the schema", kMaxFlats),
              where(p));
      }
      return;
    }
  }
  out.push_back(std::move(s));
}

std::vector<PtrSet> Compiler::flats(const Conj& conj) const {
  std::vector<PtrSet> out;
  expand(PtrSet(conj.begin(), conj.end()), out);
  return out;
}

Merged Compiler::merge(const PtrSet& flat) const {
  Merged m;
  for (const std::string& p : flat)
    if (at(p).is_object()) merge_one(m, p, at(p));
  for (const std::string& p : flat) {  // required-only keys after all declared ones
    auto it = at(p).is_object() ? at(p).find("required") : at(p).end();
    if (it == at(p).end()) continue;
    for (const Json& k : *it)
      if (std::find(m.keys.begin(), m.keys.end(), k.get<std::string>()) == m.keys.end())
        m.keys.push_back(k.get<std::string>());
  }
  if (!(m.types & kFrac)) m.num.integer = true;
  if (m.types & kString) check_string_keywords(m);
  return m;
}

void Compiler::merge_one(Merged& m, const std::string& p, const Json& n) const {
  if (auto it = n.find("type"); it != n.end()) {
    uint8_t bits = 0;
    if (it->is_string()) {
      bits = type_bit(it->get<std::string>(), where(child(p, "type")));
    } else if (it->is_array()) {
      for (const Json& t : *it)
        bits |= type_bit(t.is_string() ? t.get<std::string>() : t.dump(), where(child(p, "type")));
    } else {
      throw GrammarError("type must be a string or an array of strings", where(child(p, "type")));
    }
    m.types &= bits;
  }
  auto intersect_values = [&](std::vector<Json> vals) {
    if (!m.values) {
      m.values = std::move(vals);
      return;
    }
    std::vector<Json> kept;
    for (const Json& a : *m.values)
      if (std::any_of(vals.begin(), vals.end(), [&](const Json& b) { return json_equal(a, b); })) kept.push_back(a);
    m.values = std::move(kept);
  };
  if (auto it = n.find("enum"); it != n.end()) {
    if (!it->is_array()) throw GrammarError("enum must be an array", where(child(p, "enum")));
    intersect_values(std::vector<Json>(it->begin(), it->end()));
  }
  if (auto it = n.find("const"); it != n.end()) intersect_values({*it});
  if (n.contains("minLength")) {
    m.min_len = std::max(m.min_len, count_keyword(n, "minLength", where(child(p, "minLength"))));
    m.min_len_where = where(child(p, "minLength"));
  }
  if (n.contains("maxLength")) {
    const int64_t v = count_keyword(n, "maxLength", where(child(p, "maxLength")));
    m.max_len = m.max_len < 0 ? v : std::min(m.max_len, v);
    m.max_len_where = where(child(p, "maxLength"));
  }
  for (const char* kw : {"pattern", "format"}) {
    auto it = n.find(kw);
    if (it == n.end()) continue;
    if (!it->is_string()) throw GrammarError(fmt::format("{} must be a string", kw), where(child(p, kw)));
    if (std::string_view(kw) == "format" && !format_defined(it->get<std::string>())) continue;  // an annotation
    auto& list = std::string_view(kw) == "pattern" ? m.patterns : m.formats;
    if (std::none_of(list.begin(), list.end(), [&](auto& e) { return e.first == it->get<std::string>(); }))
      list.push_back({it->get<std::string>(), where(child(p, kw))});
  }
  for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    auto it = n.find(kw);
    if (it == n.end()) continue;
    if (!it->is_number()) throw GrammarError(fmt::format("{} must be a number", kw), where(child(p, kw)));
    const std::string_view k = kw;
    const NumberBound b{parse_decimal(it->dump()), k.starts_with("exclusive")};
    if (k.ends_with("imum") && (k == "minimum" || k == "exclusiveMinimum"))
      add_lower(m.num, b);
    else
      add_upper(m.num, b);
  }
  if (auto it = n.find("properties"); it != n.end()) {
    if (!it->is_object()) throw GrammarError("properties must be an object", where(child(p, "properties")));
    m.has_properties = true;
    for (auto& [k, v] : it->items())
      if (std::find(m.keys.begin(), m.keys.end(), k) == m.keys.end()) m.keys.push_back(k);
  }
  if (auto it = n.find("patternProperties"); it != n.end()) {
    if (!it->is_object())
      throw GrammarError("patternProperties must be an object", where(child(p, "patternProperties")));
    m.has_properties = true;
    for (auto& [pattern, schema] : it->items()) {
      Grammar tmp;  // refused here, where the pattern stands, rather than at first use
      try {
        compile_regex(tmp, pattern, RegexOptions{.json_string = true, .search = true});
      } catch (const GrammarError& e) {
        throw GrammarError(e.what(), where(child(child(p, "patternProperties"), pattern)));
      }
    }
  }
  if (auto it = n.find("required"); it != n.end()) {
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const Json& k) { return k.is_string(); }))
      throw GrammarError("required must be an array of strings", where(child(p, "required")));
    m.has_properties = true;
    for (const Json& k : *it) m.required.insert(k.get<std::string>());
  }
  if (n.contains("minProperties")) {
    const int64_t v = count_keyword(n, "minProperties", where(child(p, "minProperties")));
    if (v > m.min_props) {
      m.min_props = v;
      m.min_props_where = where(child(p, "minProperties"));
    }
  }
  if (n.contains("maxProperties")) {
    const int64_t v = count_keyword(n, "maxProperties", where(child(p, "maxProperties")));
    if (m.max_props < 0 || v < m.max_props) {
      m.max_props = v;
      m.max_props_where = where(child(p, "maxProperties"));
    }
  }
  if (n.contains("minItems"))
    m.min_items = std::max(m.min_items, count_keyword(n, "minItems", where(child(p, "minItems"))));
  if (n.contains("maxItems")) {
    const int64_t v = count_keyword(n, "maxItems", where(child(p, "maxItems")));
    m.max_items = m.max_items < 0 ? v : std::min(m.max_items, v);
  }
  if (auto it = n.find("prefixItems"); it != n.end() && !it->is_array())
    throw GrammarError("prefixItems must be an array of schemas", where(child(p, "prefixItems")));
  // items: a schema for every item (after prefixItems), or, as drafts 4 to 2019-09 write tuples, an
  // array of schemas by position with additionalItems for the rest.
  if (auto it = n.find("items"); it != n.end() && !it->is_object() && !it->is_boolean() && !it->is_array())
    throw GrammarError("items must be a schema, or an array of schemas (a tuple)", where(child(p, "items")));
  if (n.contains("prefixItems") && n.contains("items") && n["items"].is_array())
    throw GrammarError(
        "items as an array (a tuple of drafts 4 to 2019-09) beside prefixItems (2020-12's tuple): "
        "use one of them",
        where(child(p, "items")));
  if (auto it = n.find("additionalItems"); it != n.end() && !it->is_object() && !it->is_boolean())
    throw GrammarError("additionalItems must be a schema", where(child(p, "additionalItems")));
}

// Two context-free languages cannot be intersected in general, so string keywords that each
// need their own grammar cannot be combined.
void Compiler::check_string_keywords(const Merged& m) const {
  if (m.patterns.size() > 1)
    throw GrammarError(
        "allOf that cannot be merged: two different patterns apply to one string; combine them into one "
        "pattern",
        m.patterns[1].second);
  if (m.formats.size() > 1)
    throw GrammarError("allOf that cannot be merged: two different formats apply to one string", m.formats[1].second);
  const bool length = m.min_len > 0 || m.max_len >= 0;
  if (!m.patterns.empty() && length)
    throw GrammarError(
        "pattern together with minLength / maxLength is not supported; put the length into the pattern "
        "(e.g. ^.{2,5}$ combined with it)",
        m.patterns[0].second);
  if (!m.patterns.empty() && !m.formats.empty())
    throw GrammarError("pattern together with format is not supported; use one of them", m.patterns[0].second);
  if (!m.formats.empty() && length)
    throw GrammarError("format together with minLength / maxLength is not supported; use one of them",
                       m.formats[0].second);
}

bool Compiler::is_false(const Conj& conj) const {
  return std::any_of(conj.begin(), conj.end(),
                     [&](const std::string& p) { return at(p).is_boolean() && !at(p).get<bool>(); });
}

// A member's value meets, in each schema of the conjunction, its `properties` entry and every
// patternProperties entry whose pattern matches the key; additionalProperties only when neither does.
Conj Compiler::key_conj(const PtrSet& flat, const std::string& key) const {
  PtrSet out;
  for (const std::string& p : flat) {
    const Json& n = at(p);
    if (!n.is_object()) continue;
    auto props = n.find("properties");
    bool covered = props != n.end() && props->contains(key);
    if (covered) out.insert(child(child(p, "properties"), key));
    if (auto pp = n.find("patternProperties"); pp != n.end())
      for (auto& [pattern, schema] : pp->items())
        if (key_matches(pattern, key)) {
          out.insert(child(child(p, "patternProperties"), pattern));
          covered = true;
        }
    if (!covered && n.contains("additionalProperties")) out.insert(child(p, "additionalProperties"));
  }
  return Conj(out.begin(), out.end());
}

bool Compiler::key_matches(const std::string& pattern, const std::string& key) const {
  Grammar tmp;
  const Element content = compile_regex(tmp, pattern, RegexOptions{.json_string = true, .search = true});
  tmp.root = tmp.add("key", {{tmp.byte('"'), content, tmp.byte('"')}}).index;
  return Recognizer(tmp).accepts(Json(key).dump());
}

std::optional<Conj> Compiler::undeclared_conj(const PtrSet& flat, const Merged& m, const std::string& key) const {
  bool matched = false;
  PtrSet out;
  for (const std::string& p : flat) {
    const Json& n = at(p);
    if (!n.is_object()) continue;
    if (auto pp = n.find("patternProperties"); pp != n.end())
      for (auto& [pattern, schema] : pp->items())
        if (key_matches(pattern, key)) {
          out.insert(child(child(p, "patternProperties"), pattern));
          matched = true;
        }
  }
  if (!matched) return additional_conj(flat, m);
  for (const std::string& p : flat) {  // a schema whose patterns miss the key: its additionalProperties
    const Json& n = at(p);
    if (!n.is_object() || !n.contains("additionalProperties")) continue;
    bool mine = false;
    if (auto pp = n.find("patternProperties"); pp != n.end())
      for (auto& [pattern, schema] : pp->items()) mine = mine || key_matches(pattern, key);
    if (!mine) out.insert(child(p, "additionalProperties"));
  }
  return Conj(out.begin(), out.end());
}

std::optional<Conj> Compiler::additional_conj(const PtrSet& flat, const Merged& m) const {
  PtrSet out;
  for (const std::string& p : flat)
    if (at(p).is_object() && at(p).contains("additionalProperties")) out.insert(child(p, "additionalProperties"));
  if (out.empty() && opts_.strict && m.has_properties) return std::nullopt;  // strict: closed objects
  Conj c(out.begin(), out.end());
  if (is_false(c)) return std::nullopt;
  return c;
}

namespace {

/** A schema's tuple keyword: 2020-12's prefixItems, or items as an array (drafts 4 to 2019-09). */
const char* tuple_keyword(const Json& n) {
  if (n.contains("prefixItems")) return "prefixItems";
  if (n.contains("items") && n["items"].is_array()) return "items";
  return nullptr;
}

/** The keyword for the items after the tuple: additionalItems after an items array, else items. */
const char* rest_keyword(const Json& n) {
  const char* tuple = tuple_keyword(n);
  const char* rest = tuple && std::string_view(tuple) == "items" ? "additionalItems" : "items";
  return n.contains(rest) ? rest : nullptr;
}

}  // namespace

size_t Compiler::prefix_count(const PtrSet& flat) const {
  size_t n = 0;
  for (const std::string& p : flat)
    if (const char* t = at(p).is_object() ? tuple_keyword(at(p)) : nullptr) n = std::max(n, at(p)[t].size());
  return n;
}

Conj Compiler::item_conj(const PtrSet& flat, size_t index) const {
  PtrSet out;
  for (const std::string& p : flat) {
    const Json& n = at(p);
    if (!n.is_object()) continue;
    const char* tuple = tuple_keyword(n);
    if (tuple && index < n[tuple].size())
      out.insert(child(p, tuple, index));
    else if (const char* rest = rest_keyword(n))
      out.insert(child(p, rest));
  }
  return Conj(out.begin(), out.end());
}

// --- validation (enum / const values with other keywords beside them)

bool Compiler::valid(const Json& v, const Conj& conj) const {
  for (const PtrSet& f : flats(conj))
    if (valid_flat(v, f)) return true;
  return false;
}

bool Compiler::valid_flat(const Json& v, const PtrSet& flat) const {
  const Merged m = merge(flat);
  const uint8_t t = value_type(v);
  if (!(m.types & t)) return false;
  if (m.values && std::none_of(m.values->begin(), m.values->end(), [&](const Json& e) { return json_equal(e, v); }))
    return false;
  switch (t) {
    case kString:
      return valid_string(v.get<std::string>(), m);
    case kInt:
    case kFrac:
      return number_in(m.num, parse_decimal(v.dump()));
    case kObject:
      return valid_object(v, flat, m);
    case kArray:
      return valid_array(v, flat, m);
    default:
      return true;
  }
}

bool Compiler::valid_string(const std::string& s, const Merged& m) const {
  const auto len = static_cast<int64_t>(decode_utf8(s).size());
  if (len < m.min_len || (m.max_len >= 0 && len > m.max_len)) return false;
  auto matches = [&](bool pattern, const std::string& what, const std::string& w) {
    Grammar tmp;
    const Element content = pattern ? compile_regex(tmp, what, RegexOptions{.json_string = true, .search = true})
                                    : format_content(tmp, what, w);
    tmp.root = tmp.add("check", {{tmp.byte('"'), content, tmp.byte('"')}}).index;
    return Recognizer(tmp).accepts(Json(s).dump());
  };
  for (auto& [p, w] : m.patterns)
    if (!matches(true, p, w)) return false;
  for (auto& [f, w] : m.formats)
    if (!matches(false, f, w)) return false;
  return true;
}

bool Compiler::valid_object(const Json& v, const PtrSet& flat, const Merged& m) const {
  const auto n = static_cast<int64_t>(v.size());
  if (n < m.min_props || (m.max_props >= 0 && n > m.max_props)) return false;
  for (const std::string& r : m.required)
    if (!v.contains(r)) return false;
  for (auto& [k, e] : v.items()) {
    const bool declared = std::find(m.keys.begin(), m.keys.end(), k) != m.keys.end();
    const std::optional<Conj> c = declared ? std::optional<Conj>(key_conj(flat, k)) : undeclared_conj(flat, m, k);
    if (!c || !valid(e, *c)) return false;
  }
  return true;
}

bool Compiler::valid_array(const Json& v, const PtrSet& flat, const Merged& m) const {
  const auto n = static_cast<int64_t>(v.size());
  if (n < m.min_items || (m.max_items >= 0 && n > m.max_items)) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (!valid(v[i], item_conj(flat, i))) return false;
  return true;
}

// --- grammar

Element Compiler::value(Conj conj) {
  std::sort(conj.begin(), conj.end());
  conj.erase(std::unique(conj.begin(), conj.end()), conj.end());
  if (auto it = memo_.find(conj); it != memo_.end()) return Grammar::ref(it->second);
  std::string name = conj.empty() ? "any" : conj.size() == 1 ? name_ + conj[0] : name_ + conj[0] + "-and";
  for (char& c : name)  // rule names stay identifiers in to_text()
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  const uint32_t id = g_.rule(name);
  memo_[conj] = id;
  std::vector<Sequence> alts;
  for (const PtrSet& f : flats(conj)) {
    std::vector<Sequence> a = alternatives(f);
    alts.insert(alts.end(), std::make_move_iterator(a.begin()), std::make_move_iterator(a.end()));
  }
  g_.define(id, std::move(alts));
  return Grammar::ref(id);
}

std::vector<Sequence> Compiler::alternatives(const PtrSet& flat) {
  const Merged m = merge(flat);
  std::vector<Sequence> alts;
  if (m.values) {
    for (const Json& v : *m.values)
      if (valid_flat(v, flat)) alts.push_back({literal_value(v)});
    return alts;
  }
  if (m.types & kNull) alts.push_back(g_.literal("null"));
  if (m.types & kBool) {
    alts.push_back(g_.literal("true"));
    alts.push_back(g_.literal("false"));
  }
  if (m.types & kInt) alts.push_back({number_alt(m.num)});
  if (m.types & kString) alts.push_back({string_alt(m)});
  if (m.types & kObject)
    if (auto e = object_alt(flat, m)) alts.push_back({*e});
  if (m.types & kArray)
    if (auto e = array_alt(flat, m)) alts.push_back({*e});
  return alts;
}

Sequence Compiler::ws() {
  if (opts_.max_whitespace <= 0) return {};
  auto it = pieces_.find("ws");
  if (it == pieces_.end()) {
    ByteSet s = ByteSet::of(' ');
    s.add('\t');
    s.add('\n');
    s.add('\r');
    it = pieces_.emplace("ws", g_.repeat("ws", {g_.bytes(s)}, 0, opts_.max_whitespace)).first;
  }
  return {it->second};
}

// One character of a JSON string in any spelling: raw UTF-8 (U+0020 and up, not " or \), a short
// escape, \uXXXX for a non-surrogate, or a surrogate pair \uD8xx\uDCxx (lone surrogates refused).
Element Compiler::char_unit() {
  if (auto it = pieces_.find("char"); it != pieces_.end()) return it->second;
  std::vector<Sequence> alts;
  for (auto [lo, hi] : {std::pair<char32_t, char32_t>{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}) {
    auto r = utf8_range(g_, lo, hi);
    alts.insert(alts.end(), r.begin(), r.end());
  }
  auto hex_set = [](std::string_view chars) {
    ByteSet s;
    for (char c : chars) {
      s.add(static_cast<uint8_t>(c));
      s.add(static_cast<uint8_t>(std::toupper(c)));
    }
    return s;
  };
  const Element hex = g_.bytes(hex_set("0123456789abcdef"));
  const Element u = g_.byte('u'), bs = g_.byte('\\'), d = g_.bytes(hex_set("d"));
  const Element high = g_.add("high-surrogate", {{bs, u, d, g_.bytes(hex_set("89ab")), hex, hex}});
  const Element low = g_.add("low-surrogate", {{bs, u, d, g_.bytes(hex_set("cdef")), hex, hex}});
  ByteSet shorts;
  for (char c : std::string_view("\"\\/bfnrt")) shorts.add(static_cast<uint8_t>(c));
  alts.push_back({bs, g_.bytes(shorts)});
  alts.push_back({bs, u, g_.bytes(hex_set("0123456789abcef")), hex, hex, hex});  // not D…
  alts.push_back({bs, u, d, g_.bytes(ByteSet::range('0', '7')), hex, hex});      // D000–D7FF
  alts.push_back({high, low});
  return pieces_.emplace("char", g_.add("char", std::move(alts))).first->second;
}

Element Compiler::any_string_content() {
  if (auto it = pieces_.find("chars"); it != pieces_.end()) return it->second;
  return pieces_.emplace("chars", g_.star("chars", {char_unit()})).first->second;
}

// `text` as a JSON string's content, one character at a time as char_alternatives spells it.
Sequence Compiler::spelled(std::string_view text) {
  Sequence out;
  for (char32_t c : decode_utf8(text)) {
    std::vector<Sequence> alts = char_alternatives(g_, {{c, c}}, true);
    if (alts.size() == 1)
      out.insert(out.end(), alts[0].begin(), alts[0].end());
    else
      out.push_back(g_.add("spelled-char", std::move(alts)));
  }
  return out;
}

Element Compiler::string_alt(const Merged& m) {
  const Element quote = g_.byte('"');
  if (!m.patterns.empty()) {
    const Element p = compile_regex(g_, m.patterns[0].first, RegexOptions{.json_string = true, .search = true});
    return g_.add("string-pattern", {{quote, p, quote}});
  }
  if (!m.formats.empty())
    return g_.add("string-format", {{quote, format_content(g_, m.formats[0].first, m.formats[0].second), quote}});
  if (m.min_len == 0 && m.max_len < 0) {
    if (auto it = pieces_.find("string"); it != pieces_.end()) return it->second;
    return pieces_.emplace("string", g_.add("string", {{quote, any_string_content(), quote}})).first->second;
  }
  if (m.max_len >= 0 && m.max_len < m.min_len) return g_.add("no-string", {});
  return g_.add("string-length", {{quote, g_.repeat("string-chars", {char_unit()}, m.min_len, m.max_len), quote}});
}

std::string bound_key(const std::optional<NumberBound>& b) {
  if (!b) return "none";
  return fmt::format("{}{}.{}{}", b->value.negative ? "-" : "", b->value.int_digits, b->value.frac_digits,
                     b->exclusive ? " exclusive" : "");
}

Element Compiler::number_alt(const NumberSpec& in) {
  NumberSpec spec = in;
  spec.canonical = opts_.canonical_numbers;
  const std::string key = fmt::format("number {} {} {}", spec.integer, bound_key(spec.lo), bound_key(spec.hi));
  if (auto it = pieces_.find(key); it != pieces_.end()) return it->second;
  return pieces_.emplace(key, number_grammar(g_, spec, spec.integer ? "integer" : "number")).first->second;
}

// A key (with quotes) different from every key in `keys`: a trie of the keys whose every node
// may end (unless a key ends there), go on with a child's character, or leave the trie with any
// other character and then anything.
Element Compiler::additional_key(const std::vector<std::string>& keys) {
  const Element quote = g_.byte('"');
  if (keys.empty()) return g_.add("key", {{quote, any_string_content(), quote}});
  struct Node {
    std::map<char32_t, size_t> next;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& k : keys) {
    size_t at = 0;
    for (char32_t c : decode_utf8(k)) {
      auto it = trie[at].next.find(c);
      if (it == trie[at].next.end()) {
        trie.push_back({});
        it = trie[at].next.emplace(c, trie.size() - 1).first;
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  std::vector<uint32_t> rules(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) rules[i] = g_.rule("other-key");
  for (size_t i = 0; i < trie.size(); ++i) {
    std::vector<Sequence> alts;
    if (!trie[i].terminal) alts.push_back({});
    CharRanges others;
    char32_t from = 0;
    for (auto& [c, t] : trie[i].next) {
      alts.push_back({g_.add("key-char", char_alternatives(g_, {{c, c}}, true)), Grammar::ref(rules[t])});
      if (c > from) others.push_back({from, c - 1});
      from = c + 1;
    }
    if (from <= 0x10FFFF) others.push_back({from, 0x10FFFF});
    const Element other = g_.add("key-other-char", char_alternatives(g_, others, true));
    alts.push_back({other, any_string_content()});
    g_.define(rules[i], std::move(alts));
  }
  return g_.add("additional-key", {{quote, Grammar::ref(rules[0]), quote}});
}

std::optional<Element> Compiler::object_alt(const PtrSet& flat, const Merged& m) {
  struct Prop {
    Sequence item;
    bool required;
  };
  std::vector<Prop> props;
  const Element quote = g_.byte('"');
  for (const std::string& k : m.keys) {
    const Conj c = key_conj(flat, k);
    const bool req = m.required.count(k) > 0;
    if (is_false(c)) {
      if (req) return std::nullopt;  // a required property no value satisfies
      continue;
    }
    Sequence item = cat(cat({quote}, spelled(k)), {quote});
    item = cat(cat(item, sep(':')), {value(c)});
    props.push_back({{g_.add("property", {std::move(item)})}, req});
  }
  std::optional<Sequence> add_item;
  std::vector<std::pair<std::string, std::string>> patterns;  // (schema, pattern)
  for (const std::string& p : flat)
    if (const Json& n = at(p); n.is_object() && n.contains("patternProperties"))
      for (auto& [pattern, schema] : n["patternProperties"].items()) patterns.emplace_back(p, pattern);
  if (patterns.empty()) {
    if (const std::optional<Conj> extra = additional_conj(flat, m))
      add_item =
          Sequence{g_.add("additional-property", {cat(cat({additional_key(m.keys)}, sep(':')), {value(*extra)})})};
  } else {
    // Exact in one shape: one pattern, its schema closing the object to other keys. Keys that
    // match no pattern would be a regex complement, and keys that match several need their
    // schemas' conjunction, which a grammar of the key cannot choose; both are refused.
    const auto& [owner, pattern] = patterns.front();
    const std::string here = child(child(owner, "patternProperties"), pattern);
    if (patterns.size() > 1)
      throw GrammarError(
          "more than one patternProperties pattern for one object is not supported (a key matching several must "
          "meet all their schemas); merge them into one pattern",
          where(child(child(patterns[1].first, "patternProperties"), patterns[1].second)));
    const Json& closing = at(owner);
    const bool closed = (closing.contains("additionalProperties") && closing["additionalProperties"] == false) ||
                        (opts_.strict && !closing.contains("additionalProperties"));
    if (!closed)
      throw GrammarError(
          "patternProperties is supported with additionalProperties: false beside it (keys matching no pattern "
          "would need the complement of the pattern's language)",
          where(here));
    for (const std::string& k : m.keys)
      if (key_matches(pattern, k))
        throw GrammarError(fmt::format("patternProperties '{}' matches the declared property '{}': not supported "
                                       "(a generated key could repeat it); narrow the pattern to exclude it",
                                       pattern, k),
                           where(here));
    // The pattern's schema, and the additionalProperties of the other schemas of the conjunction
    // (no key of theirs matches: they have no patterns).
    PtrSet conj = {here};
    for (const std::string& q : flat)
      if (q != owner && at(q).is_object() && at(q).contains("additionalProperties"))
        conj.insert(child(q, "additionalProperties"));
    const Conj c(conj.begin(), conj.end());
    if (!is_false(c)) {
      const Element key =
          g_.add("pattern-key",
                 {{quote, compile_regex(g_, pattern, RegexOptions{.json_string = true, .search = true}), quote}});
      add_item = Sequence{g_.add("pattern-property", {cat(cat({key}, sep(':')), {value(c)})})};
    }
  }
  // next_i: the properties from i on, each after a comma; first_i: the same with none before.
  Sequence next = add_item ? Sequence{g_.star("more-additional", cat(sep(','), *add_item))} : Sequence{};
  std::optional<Sequence> first;
  if (add_item) first = cat(*add_item, next);
  for (size_t i = props.size(); i-- > 0;) {
    std::vector<Sequence> next_alts = {cat(cat(sep(','), props[i].item), next)};
    std::vector<Sequence> first_alts = {cat(props[i].item, next)};
    if (!props[i].required) {
      next_alts.push_back(next);
      if (first) first_alts.push_back(*first);
    }
    next = {g_.add("props-next", std::move(next_alts))};
    first = Sequence{g_.add("props-first", std::move(first_alts))};
  }
  // Member counts: exact where the shape above already decides them (a bound every object it
  // allows meets, at least one member, none at all); a count a grammar would have to keep is refused.
  const auto required =
      static_cast<int64_t>(std::count_if(props.begin(), props.end(), [](const Prop& p) { return p.required; }));
  if (m.max_props >= 0 && required > m.max_props) return std::nullopt;  // more required than allowed
  if (!add_item && static_cast<int64_t>(props.size()) < m.min_props) return std::nullopt;
  bool empty_ok = required == 0, members_ok = first.has_value();
  if (m.min_props > required) {
    if (m.min_props > 1)
      throw GrammarError(fmt::format("minProperties {} beyond the object's {} required properties is not supported; "
                                     "require the properties instead",
                                     m.min_props, required),
                         m.min_props_where);
    empty_ok = false;  // at least one member: what `first` gives
  }
  if (m.max_props >= 0 && (add_item || static_cast<int64_t>(props.size()) > m.max_props)) {
    if (m.max_props > 0)
      throw GrammarError(
          fmt::format("maxProperties {} is not supported where more properties can appear ({} declared{}); "
                      "declare at most that many and set additionalProperties to false",
                      m.max_props, props.size(), add_item ? ", and others" : ""),
          m.max_props_where);
    members_ok = false;  // maxProperties 0: the empty object only
  }
  std::vector<Sequence> alts;
  if (empty_ok) alts.push_back(cat(cat({g_.byte('{')}, ws()), {g_.byte('}')}));
  if (members_ok) alts.push_back(cat(cat(cat(cat({g_.byte('{')}, ws()), *first), ws()), {g_.byte('}')}));
  if (alts.empty()) return std::nullopt;
  return g_.add("object", std::move(alts));
}

std::optional<Element> Compiler::array_alt(const PtrSet& flat, const Merged& m) {
  const size_t np = prefix_count(flat);
  int64_t max = m.max_items;
  // A position no value satisfies ends the array before it.
  for (size_t i = 0; i <= np; ++i) {
    if (max >= 0 && static_cast<int64_t>(i) >= max) break;
    if (is_false(item_conj(flat, i))) {
      max = static_cast<int64_t>(i);
      break;
    }
  }
  if (max >= 0 && m.min_items > max) return std::nullopt;
  auto item = [&](size_t i) { return value(item_conj(flat, std::min(i, np))); };
  // rest(i): the items from position i on (i >= 1), each after a comma.
  std::function<Sequence(size_t)> rest = [&](size_t i) -> Sequence {
    const auto si = static_cast<int64_t>(i);
    if (max >= 0 && si >= max) return {};
    if (i >= np)
      return {g_.repeat("items", cat(sep(','), {item(i)}), std::max<int64_t>(m.min_items - si, 0),
                        max < 0 ? -1 : max - si)};
    std::vector<Sequence> alts = {cat(cat(sep(','), {item(i)}), rest(i + 1))};
    if (si >= m.min_items) alts.push_back({});
    return {g_.add("items-from", std::move(alts))};
  };
  std::vector<Sequence> alts;
  if (m.min_items == 0) alts.push_back(cat(cat({g_.byte('[')}, ws()), {g_.byte(']')}));
  if (max != 0) alts.push_back(cat(cat(cat(cat({g_.byte('[')}, ws()), cat({item(0)}, rest(1))), ws()), {g_.byte(']')}));
  return g_.add("array", std::move(alts));
}

Element Compiler::literal_value(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: {
      const Element quote = g_.byte('"');
      return g_.add("const-string", {cat(cat({quote}, spelled(v.get<std::string>())), {quote})});
    }
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: {
      NumberSpec spec;
      const Decimal d = parse_decimal(v.dump());
      spec.lo = NumberBound{d, false};
      spec.hi = NumberBound{d, false};
      // Generation writes the value plainly (an integral value without a fraction); matching
      // takes every spelling a serializer writes, scientific included.
      if (opts_.canonical_numbers) {
        spec.integer = d.is_integral();
        return g_.add("const-number", {{number_alt(spec)}});
      }
      return g_.add("const-number", {{number_alt(spec)}, {scientific_grammar(g_, d)}});
    }
    case Json::value_t::object: {
      Sequence body;
      for (auto& [k, e] : v.items()) {
        if (!body.empty()) body = cat(body, sep(','));
        body = cat(cat(cat(cat(body, {g_.byte('"')}), spelled(k)), {g_.byte('"')}), sep(':'));
        body.push_back(literal_value(e));
      }
      return g_.add("const-object", {cat(cat(cat(cat({g_.byte('{')}, ws()), body), ws()), {g_.byte('}')})});
    }
    case Json::value_t::array: {
      Sequence body;
      for (const Json& e : v) {
        if (!body.empty()) body = cat(body, sep(','));
        body.push_back(literal_value(e));
      }
      return g_.add("const-array", {cat(cat(cat(cat({g_.byte('[')}, ws()), body), ws()), {g_.byte(']')})});
    }
    default:
      return g_.add("const", {g_.literal(v.dump())});
  }
}

// Drops alternatives that can never match (they refer to a rule with an empty language), so a
// generator never enters a dead end.
void prune_unproductive(Grammar& g) {
  std::vector<char> productive(g.rules.size(), 0);
  auto alt_ok = [&](const Sequence& s) {
    return std::all_of(s.begin(), s.end(), [&](const Element& e) {
      return e.kind == Element::bytes ? !g.sets[e.index].empty() : productive[e.index] != 0;
    });
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g.rules.size(); ++i)
      if (!productive[i] && std::any_of(g.rules[i].alts.begin(), g.rules[i].alts.end(), alt_ok))
        productive[i] = changed = true;
  }
  for (Rule& r : g.rules) std::erase_if(r.alts, [&](const Sequence& s) { return !alt_ok(s); });
}

Json parse_schema(std::string_view schema, std::string_view where) {
  try {
    return parse_ordered_json(schema);  // linear however many keys an object holds
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(fmt::format("the schema is not valid JSON: {}", e.what()), std::string(where));
  }
}

}  // namespace

Element add_schema(Grammar& g, std::string_view schema, const SchemaOptions& opts, std::string_view name,
                   std::string_view where) {
  const Json doc = parse_schema(schema, where);
  Compiler c(g, doc, opts, name, where);
  const Element e = c.value({""});
  prune_unproductive(g);
  if (g.rules[e.index].alts.empty())
    throw GrammarError("the schema accepts no JSON value (its constraints contradict each other)", std::string(where));
  return e;
}

Grammar schema_to_grammar(std::string_view schema, const SchemaOptions& opts) {
  Grammar g;
  g.root = add_schema(g, schema, opts, "root").index;
  g.validate();
  return g;
}

Grammar json_object_grammar(const SchemaOptions& opts) {
  SchemaOptions o = opts;
  o.strict = false;
  return schema_to_grammar(R"({"type":"object"})", o);
}

}  // namespace kiln::grammar
