#include "grammar/tool_calls.hpp"

#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "core/json_ordered.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/regex.hpp"

namespace kiln::grammar {

using json = nlohmann::ordered_json;  // parameters in the order the schema declares them

std::optional<ToolSyntax> tool_syntax(std::string_view parser_name) {
  if (parser_name == "qwen3_coder") return ToolSyntax::qwen3_coder;
  if (parser_name == "gemma4") return ToolSyntax::gemma4;
  return std::nullopt;
}

std::vector<std::string> tool_call_openers(ToolSyntax syntax) {
  if (syntax == ToolSyntax::qwen3_coder) return {"<tool_call>", "<function="};
  return {"<|tool_call"};
}

namespace {

// Tags a qwen3_coder raw value must not contain: each would end the value, or (<function=) open a
// nested example, in the parser's reading (docs/parsers.md).
const std::vector<std::string> kQwenTags = {
    "</parameter>", "<parameter=", "<function=", "</function>", "<tool_call>", "</tool_call>"};
const std::string kGemmaQuote = "<|\"|>";
// What a gemma4 string may not contain: its closing quote, and the call markers the parser finds by
// a plain scan whatever the quoting.
const std::vector<std::string> kGemmaTags = {kGemmaQuote, "<tool_call|>", "<|tool_call"};

// Names the parsers read back: a function name and (gemma4, bare) keys of letters, digits and
// _ . - : ; qwen3_coder keys anything but the markup's < > and newlines.
void check_name(const std::string& s, bool bare, const std::string& what, const std::string& where) {
  bool ok = !s.empty() && s.size() <= 256;
  for (unsigned char c : s)
    ok = ok && (bare ? (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == ':')
                     : (c != '<' && c != '>' && c != '\n' && c != '\r'));
  if (!ok)
    throw GrammarError(
        fmt::format("{} '{}' cannot be written in this model's call syntax; use letters, digits and _ . - :", what, s),
        where);
}

struct Param {
  std::string key;
  json schema;
  bool required = false;
};

bool string_only(const json& s) {
  if (!s.is_object()) return false;
  auto t = s.find("type");
  if (t == s.end()) return false;
  if (t->is_string()) return *t == "string";
  return t->is_array() && t->size() == 1 && (*t)[0] == "string";
}

bool allows_string(const json& s) {
  if (!s.is_object()) return true;
  auto t = s.find("type");
  if (t == s.end()) return true;
  if (t->is_string()) return *t == "string";
  if (t->is_array())
    for (const json& x : *t)
      if (x == "string") return true;
  return false;
}

// A string parameter written raw (no JSON quotes): qwen3_coder's values, gemma4's <|"|> strings.
// `forbidden` are the tags the text may not contain.
Element raw_string(Grammar& g, const json& s, std::string_view name, const std::vector<std::string>& forbidden,
                   const std::string& where) {
  static const char* const kAnnotations[] = {"type",     "description", "title",    "default",  "examples",
                                             "$comment", "deprecated",  "readOnly", "writeOnly"};
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    bool known = k == "enum" || k == "const" || k == "pattern" || k == "minLength" || k == "maxLength";
    for (const char* a : kAnnotations) known = known || k == a;
    if (!known)
      throw GrammarError(fmt::format("'{}' on a string parameter is not supported in tool calls; leave it out", k),
                         where + "/" + k);
  }
  if (s.contains("enum") || s.contains("const")) {
    std::vector<Sequence> alts;
    const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
    for (const json& v : values) {
      if (!v.is_string()) continue;
      const std::string text = v.get<std::string>();
      for (const std::string& tag : forbidden)
        if (text.find(tag) != std::string::npos)
          throw GrammarError(
              fmt::format("the value '{}' contains '{}', which the tool-call syntax reads as markup", text, tag),
              where + "/enum");
      alts.push_back(g.literal(text));
    }
    if (alts.empty()) throw GrammarError("no string value is allowed", where + "/enum");
    return g.add(name, std::move(alts));
  }
  if (s.contains("pattern")) {
    if (s.contains("minLength") || s.contains("maxLength"))
      throw GrammarError("pattern together with minLength/maxLength is not supported", where + "/pattern");
    // Anchored at both ends: text around an unanchored match could be anything, markup included.
    const std::string pattern = s["pattern"].get<std::string>();
    if (pattern.empty() || pattern.front() != '^' || pattern.back() != '$')
      throw GrammarError("a pattern on a string parameter must be anchored (^…$) in tool calls", where + "/pattern");
    try {
      return compile_regex(g, pattern, {.json_string = false, .search = true}, name);
    } catch (const GrammarError& e) {
      throw GrammarError(e.what(), where + "/pattern");
    }
  }
  if (s.contains("minLength") || s.contains("maxLength")) {
    // Bounded text: any character but '<' (so no tag can form), counted in code points.
    CharRanges chars = {{0, '<' - 1}, {'<' + 1, 0x10FFFF}};
    const Element c = g.add(fmt::format("{}-char", name), char_alternatives(g, chars, false));
    const int64_t lo = s.value("minLength", int64_t{0});
    const int64_t hi = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : -1;
    return g.repeat(name, {c}, lo, hi);
  }
  return text_excluding(g, name, forbidden);
}

Element json_value(Grammar& g, const json& schema, const json& defs, const ToolCallOptions& o, std::string_view name,
                   const std::string& where) {
  json s = schema;
  if (s.is_object() && !defs.is_null())  // local refs point at the parameters' root
    for (auto it = defs.begin(); it != defs.end(); ++it)
      if (!s.contains(it.key())) s[it.key()] = it.value();
  SchemaOptions so;
  so.strict = true;
  so.max_whitespace = o.max_whitespace;
  so.canonical_numbers = true;  // the parsers read what JSON readers read
  return add_schema(g, s.dump(), so, name, where);
}

std::vector<Param> params_of(const json& p, const std::string& where) {
  std::vector<Param> out;
  if (p.is_null() || (p.is_object() && p.empty())) return out;
  if (!p.is_object()) throw GrammarError("the parameters must be a JSON Schema object", where);
  if (p.contains("type") && p["type"] != "object")
    throw GrammarError("the parameters schema must have type 'object'", where + "/type");
  std::vector<std::string> required;
  if (auto r = p.find("required"); r != p.end() && r->is_array())
    for (const json& x : *r)
      if (x.is_string()) required.push_back(x.get<std::string>());
  if (auto props = p.find("properties"); props != p.end()) {
    if (!props->is_object()) throw GrammarError("'properties' must be an object", where + "/properties");
    for (auto it = props->begin(); it != props->end(); ++it)
      out.push_back({it.key(), it.value(), std::find(required.begin(), required.end(), it.key()) != required.end()});
  }
  for (const std::string& r : required) {
    bool declared = false;
    for (const Param& q : out) declared = declared || q.key == r;
    if (!declared)
      throw GrammarError(fmt::format("required parameter '{}' is not in 'properties'", r), where + "/required");
  }
  return out;
}

json defs_of(const json& p) {
  json d = json::object();
  if (!p.is_object()) return json();
  for (const char* k : {"$defs", "definitions"})
    if (p.contains(k)) d[k] = p[k];
  return d.empty() ? json() : d;
}

// qwen3_coder: <tool_call>\n<function=NAME>\n(<parameter=KEY>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
Element qwen_call(Grammar& g, const ToolSpec& t, const json& p, const ToolCallOptions& o, const std::string& where) {
  Sequence s = g.literal(fmt::format("<tool_call>\n<function={}>\n", t.name));
  const json defs = defs_of(p);
  for (const Param& q : params_of(p, where)) {
    const std::string w = fmt::format("{}/properties/{}", where, q.key);
    check_name(q.key, false, "the parameter name", w);
    const std::string name = fmt::format("{}-{}", t.name, q.key);
    if (allows_string(q.schema) && !string_only(q.schema))
      throw GrammarError(
          "a parameter that may be a string or another type cannot be constrained in the qwen3_coder "
          "syntax (its values are raw text); give it one type",
          w + "/type");
    Element value =
        string_only(q.schema) ? raw_string(g, q.schema, name, kQwenTags, w) : json_value(g, q.schema, defs, o, name, w);
    Sequence block = g.literal(fmt::format("<parameter={}>\n", q.key));
    block.push_back(value);
    Sequence close = g.literal("\n</parameter>\n");
    block.insert(block.end(), close.begin(), close.end());
    if (q.required) {
      s.push_back(g.add(fmt::format("{}-param", name), {std::move(block)}));
    } else {
      s.push_back(g.optional(fmt::format("{}-param", name), std::move(block)));
    }
  }
  Sequence end = g.literal("</function>\n</tool_call>");
  s.insert(s.end(), end.begin(), end.end());
  return g.add(fmt::format("call-{}", t.name), {std::move(s)});
}

// gemma4: <|tool_call>call:NAME{key:value,...}<tool_call|>, with commas only between present pairs.
Element gemma_call(Grammar& g, const ToolSpec& t, const json& p, const ToolCallOptions& o, const std::string& where) {
  const json defs = defs_of(p);
  const std::vector<Param> params = params_of(p, where);
  std::vector<Sequence> pairs;
  for (const Param& q : params) {
    const std::string w = fmt::format("{}/properties/{}", where, q.key);
    check_name(q.key, true, "the parameter name", w);
    const std::string name = fmt::format("{}-{}", t.name, q.key);
    Sequence pair = g.literal(q.key + ":");
    if (string_only(q.schema)) {
      Sequence quoted = g.literal(kGemmaQuote);
      quoted.push_back(raw_string(g, q.schema, name, kGemmaTags, w));
      Sequence close = g.literal(kGemmaQuote);
      quoted.insert(quoted.end(), close.begin(), close.end());
      pair.push_back(g.add(fmt::format("{}-str", name), {std::move(quoted)}));
    } else {
      if (allows_string(q.schema))
        throw GrammarError(
            "a parameter that may be a string or another type cannot be constrained in the gemma4 "
            "syntax; give it one type",
            w + "/type");
      pair.push_back(json_value(g, q.schema, defs, o, name, w));
    }
    pairs.push_back(std::move(pair));
  }
  // first_i: pairs from i on, none written yet; more_i: from i on, after a written pair (comma first).
  const size_t n = params.size();
  std::vector<Element> first(n + 1), more(n + 1);
  first[n] = g.add(fmt::format("{}-args-end", t.name), {{}});
  more[n] = first[n];
  for (size_t i = n; i-- > 0;) {
    Sequence with = pairs[i];
    with.push_back(more[i + 1]);
    Sequence comma = g.literal(",");
    comma.insert(comma.end(), pairs[i].begin(), pairs[i].end());
    comma.push_back(more[i + 1]);
    std::vector<Sequence> f = {with}, m = {comma};
    if (!params[i].required) {
      f.push_back({first[i + 1]});
      m.push_back({more[i + 1]});
    }
    first[i] = g.add(fmt::format("{}-args", t.name), std::move(f));
    more[i] = g.add(fmt::format("{}-more", t.name), std::move(m));
  }
  Sequence s = g.literal(fmt::format("<|tool_call>call:{}{{", t.name));
  s.push_back(first[0]);
  Sequence end = g.literal("}<tool_call|>");
  s.insert(s.end(), end.begin(), end.end());
  return g.add(fmt::format("call-{}", t.name), {std::move(s)});
}

}  // namespace

Element add_tool_calls(Grammar& g, const std::vector<ToolSpec>& tools, const ToolCallOptions& o) {
  if (tools.empty()) throw GrammarError("there is no tool to call", "tools");
  std::vector<Sequence> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}].function.parameters", i);
    check_name(tools[i].name, true, "the function name", fmt::format("tools[{}].function.name", i));
    json p;
    if (!tools[i].parameters.empty()) {
      try {
        p = parse_ordered_json(tools[i].parameters);
      } catch (const json::exception&) {
        throw GrammarError("the parameters are not valid JSON", where);
      }
    }
    calls.push_back({o.syntax == ToolSyntax::qwen3_coder ? qwen_call(g, tools[i], p, o, where)
                                                         : gemma_call(g, tools[i], p, o, where)});
  }
  const Element one = g.add("tool-call", std::move(calls));
  if (!o.parallel) return one;
  Sequence sep = o.syntax == ToolSyntax::qwen3_coder ? g.literal("\n") : Sequence{};
  return g.separated("tool-calls", {one}, sep, 1, -1);
}

}  // namespace kiln::grammar
