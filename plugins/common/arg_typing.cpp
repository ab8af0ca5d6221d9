#include "arg_typing.hpp"

#include <kiln/json_escape.hpp>
#include <kiln/plugin.hpp>
#include <kiln/utf8.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace parser_support {
namespace {

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

bool equals_ci(std::string_view a, std::string_view b) { return a.size() == b.size() && starts_with_ci(a, b); }

/** Maps a schema type name (including the loose spellings models and tools use) to kinds. */
unsigned kind_of_type_name(std::string_view t) {
  if (starts_with_ci(t, "str") || starts_with_ci(t, "text") || starts_with_ci(t, "varchar") ||
      starts_with_ci(t, "char") || starts_with_ci(t, "enum"))
    return kString;
  if (starts_with_ci(t, "int") || starts_with_ci(t, "uint") || starts_with_ci(t, "long") ||
      starts_with_ci(t, "short") || starts_with_ci(t, "unsigned"))
    return kInteger;
  if (starts_with_ci(t, "num") || starts_with_ci(t, "float") || starts_with_ci(t, "double") ||
      starts_with_ci(t, "decimal"))
    return kNumber;
  if (starts_with_ci(t, "bool") || equals_ci(t, "binary")) return kBoolean;
  if (equals_ci(t, "null") || equals_ci(t, "none")) return kNull;
  if (starts_with_ci(t, "object") || starts_with_ci(t, "dict") || starts_with_ci(t, "map")) return kObject;
  if (starts_with_ci(t, "arr") || starts_with_ci(t, "list") || starts_with_ci(t, "tuple")) return kArray;
  return 0;
}

unsigned kind_of_value(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: return kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: return kNumber;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::null: return kNull;
    case Json::value_t::object: return kObject;
    case Json::value_t::array: return kArray;
    default: return 0;
  }
}

unsigned resolve_kinds(const Json& s, int depth) {
  if (!s.is_object() || depth > 16) return 0;
  unsigned k = 0;
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) k |= kind_of_type_name(it->get_ref<const std::string&>());
    if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) k |= kind_of_type_name(t.get_ref<const std::string&>());
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"})
    if (auto it = s.find(key); it != s.end() && it->is_array())
      for (const auto& branch : *it) k |= resolve_kinds(branch, depth + 1);
  if (auto it = s.find("enum"); it != s.end() && it->is_array())
    for (const auto& v : *it) k |= kind_of_value(v);
  if (auto it = s.find("const"); it != s.end()) k |= kind_of_value(*it);
  if (k == 0 && s.contains("properties")) k = kObject;
  if (k == 0 && s.contains("items")) k = kArray;
  return k;
}

/* ---- Python literal parser (the older Qwen templates render dicts with str(), e.g. {'a': True}) ---- */

class PyParser {
 public:
  explicit PyParser(std::string_view s) : s_(s) {}
  std::optional<OrderedJson> parse() {
    auto v = value(0);
    ws();
    if (!v || p_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\t' || s_[p_] == '\r')) ++p_;
  }
  bool eat(char c) {
    ws();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  std::optional<OrderedJson> value(int depth) {
    if (depth > 64) return std::nullopt;
    ws();
    if (p_ >= s_.size()) return std::nullopt;
    char c = s_[p_];
    if (c == '{') return dict(depth);
    if (c == '[' || c == '(') return list(depth, c == '[' ? ']' : ')');
    if (c == '\'' || c == '"') {
      auto str = string();
      if (!str) return std::nullopt;
      return OrderedJson(std::move(*str));
    }
    size_t start = p_;
    while (p_ < s_.size() && std::string_view(",:]})").find(s_[p_]) == std::string_view::npos &&
           s_[p_] != ' ' && s_[p_] != '\n' && s_[p_] != '\t' && s_[p_] != '\r')
      ++p_;
    std::string_view tok = s_.substr(start, p_ - start);
    if (tok == "True" || tok == "true") return OrderedJson(true);
    if (tok == "False" || tok == "false") return OrderedJson(false);
    if (tok == "None" || tok == "null") return OrderedJson(nullptr);
    if (is_json_number(tok)) {
      OrderedJson n = OrderedJson::parse(tok, nullptr, false);  // 1e999 overflows: not a value
      if (!n.is_discarded()) return n;
    }
    return std::nullopt;
  }
  std::optional<OrderedJson> dict(int depth) {
    ++p_;
    OrderedJson obj = OrderedJson::object();
    if (eat('}')) return obj;
    for (;;) {
      ws();
      if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"')) return std::nullopt;
      auto key = string();
      if (!key || !eat(':')) return std::nullopt;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      obj[*key] = std::move(*v);
      if (eat(',')) {
        if (eat('}')) return obj;
        continue;
      }
      if (eat('}')) return obj;
      return std::nullopt;
    }
  }
  std::optional<OrderedJson> list(int depth, char close) {
    ++p_;
    OrderedJson arr = OrderedJson::array();
    if (eat(close)) return arr;
    for (;;) {
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      arr.push_back(std::move(*v));
      if (eat(',')) {
        if (eat(close)) return arr;
        continue;
      }
      if (eat(close)) return arr;
      return std::nullopt;
    }
  }
  std::optional<std::string> string() {
    char q = s_[p_++];
    std::string out;
    while (p_ < s_.size()) {
      char c = s_[p_++];
      if (c == q) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) return std::nullopt;
      char e = s_[p_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'x':
        case 'u': {
          size_t n = e == 'x' ? 2 : 4;
          if (p_ + n > s_.size()) return std::nullopt;
          unsigned cp = 0;
          auto r = std::from_chars(s_.data() + p_, s_.data() + p_ + n, cp, 16);
          if (r.ptr != s_.data() + p_ + n) return std::nullopt;
          p_ += n;
          kiln::utf8::append(out, cp);
          break;
        }
        default: out += e; break;  // \\ \' \" and unknown escapes keep the character
      }
    }
    return std::nullopt;
  }
  std::string_view s_;
  size_t p_ = 0;
};

void dump_into(std::string& out, const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::string: kiln::append_json_string(out, v.get_ref<const std::string&>()); return;
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) out += ", ";
        first = false;
        kiln::append_json_string(out, k);
        out += ": ";
        dump_into(out, x);
      }
      out += '}';
      return;
    }
    case OrderedJson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += ", ";
        first = false;
        dump_into(out, x);
      }
      out += ']';
      return;
    }
    default: out += v.dump(); return;  // numbers, booleans, null
  }
}

bool is_json_integer(std::string_view s) {
  return is_json_number(s) && s.find_first_of(".eE") == std::string_view::npos;
}

/** Integer text: the model's own spelling when valid JSON, else a parsed integral value. */
/** strtod of the whole text, when it is a finite number. */
std::optional<double> finite_number(std::string_view t) {
  std::string tmp(t);
  if (tmp.empty() || tmp.find_first_not_of("+-0123456789.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(tmp.c_str(), &end);
  if (end != tmp.c_str() + tmp.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<std::string> as_integer(std::string_view t) {
  if (is_json_integer(t) && t.size() <= 18) return std::string(t);  // longer ones may not fit a client's int64
  auto d = finite_number(t);
  if (!d || *d != std::floor(*d) || std::fabs(*d) > 9.0e15) return std::nullopt;
  return std::to_string(static_cast<long long>(*d));
}

std::optional<std::string> as_number(std::string_view t) {
  auto d = finite_number(t);
  if (!d) return std::nullopt;  // also refuses 1e999: valid JSON grammar, but infinite for clients
  if (is_json_number(t)) return std::string(t);
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), *d);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

TypeInfo resolve_type(const Json* schema) {
  TypeInfo t;
  t.schema = schema;
  if (schema) t.kinds = resolve_kinds(*schema, 0);
  return t;
}

ToolSchemas::ToolSchemas(std::string_view tools_json) {
  if (trim(tools_json).empty()) return;
  tools_ = Json::parse(tools_json, nullptr, false);
  if (tools_.is_object() && tools_.contains("tools")) tools_ = Json(tools_["tools"]);  // a whole request body
  if (!tools_.is_array())
    throw kiln::Error(KILN_ERR_INVALID_ARGUMENT,
                      "tools_json must be the request's `tools` array (JSON), e.g. "
                      "[{\"type\":\"function\",\"function\":{\"name\":...,\"parameters\":{...}}}]");
  for (const auto& tool : tools_) {
    const Json* f = &tool;
    if (auto it = tool.find("function"); it != tool.end() && it->is_object()) f = &*it;
    auto name = f->find("name");
    if (name == f->end() || !name->is_string()) continue;
    const Json* params = nullptr;
    for (const char* key : {"parameters", "input_schema"})
      if (auto it = f->find(key); it != f->end() && it->is_object()) {
        params = &*it;
        break;
      }
    by_name_.emplace(name->get<std::string>(), params);  // first declaration wins
  }
}

const Json* ToolSchemas::parameters(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const Json* ToolSchemas::property(const Json* parameters, std::string_view key) {
  if (!parameters || !parameters->is_object()) return nullptr;
  auto props = parameters->find("properties");
  if (props == parameters->end() || !props->is_object()) return nullptr;
  auto it = props->find(std::string(key));
  return it == props->end() ? nullptr : &*it;
}

const Json* ToolSchemas::items(const Json* schema) {
  if (!schema || !schema->is_object()) return nullptr;
  auto it = schema->find("items");
  return it == schema->end() || !it->is_object() ? nullptr : &*it;
}

std::string dump(const OrderedJson& v) {
  std::string out;
  dump_into(out, v);
  return out;
}

bool is_json_number(std::string_view s) {
  size_t i = 0, n = s.size();
  auto digit = [&](size_t k) { return k < n && s[k] >= '0' && s[k] <= '9'; };
  if (i < n && s[i] == '-') ++i;
  if (!digit(i)) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    while (digit(i)) ++i;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (!digit(i)) return false;
    while (digit(i)) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digit(i)) return false;
    while (digit(i)) ++i;
  }
  return i == n;
}

std::optional<OrderedJson> parse_python_literal(std::string_view s) { return PyParser(s).parse(); }

std::string coerce(std::string_view raw, const TypeInfo& type) {
  unsigned k = type.kinds;
  std::string out;
  if (k == 0 || k == kString) {
    kiln::append_json_string(out, raw);
    return out;
  }
  std::string_view t = trim(raw);
  // null/None become null only where the schema allows null or cannot hold a string: a plain
  // string parameter keeps the text "null".
  if ((k & kNull) || !(k & kString))
    if (t == "null" || t == "None") return "null";
  if (k & kBoolean) {
    if (equals_ci(t, "true")) return "true";
    if (equals_ci(t, "false")) return "false";
  }
  if (k & kInteger)
    if (auto v = as_integer(t)) return *v;
  if (k & kNumber)
    if (auto v = as_number(t)) return *v;
  if (k & (kObject | kArray)) {
    auto fits = [&](const OrderedJson& v) {
      return (v.is_object() && (k & kObject)) || (v.is_array() && (k & kArray));
    };
    OrderedJson v = OrderedJson::parse(t, nullptr, false);
    if (!v.is_discarded() && fits(v)) return dump(v);
    if (auto py = parse_python_literal(t); py && fits(*py)) return dump(*py);
  }
  kiln::append_json_string(out, raw);  // string, or nothing fitted: keep the text rather than drop it
  return out;
}

}  // namespace parser_support
