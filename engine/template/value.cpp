#include "template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <kiln/json_escape.hpp>

#include "template/utf8.hpp"

namespace kiln {

TemplateError::TemplateError(Kind kind, std::string message, int line)
    : HostError("[template] " + (line > 0 ? "line " + std::to_string(line) + ": " : std::string()) +
                (kind == Kind::Raised ? "raise_exception: " : "") + message),
      kind_(kind),
      message_(std::move(message)),
      line_(line) {}

namespace tmpl {

void fail(const std::string& message) { throw TemplateError(TemplateError::Kind::Render, message); }
void fail_limit(const std::string& message) { throw TemplateError(TemplateError::Kind::Limit, message); }
void fail_undefined(const Value& v) { fail(v.s.empty() ? std::string("value is undefined") : v.s); }

// ---------------------------------------------------------------------------------------------
// construction

Value Value::undefined(std::string message) {
  Value v;
  v.s = std::move(message);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind = Kind::Float;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(s);
  return v;
}

int Value::nesting() const {
  switch (kind) {
    case Kind::List: return arr->depth;
    case Kind::Dict: return obj->depth;
    case Kind::Namespace:
    case Kind::Loop: return 1;
    default: return 0;
  }
}

bool Value::holds_namespace() const {
  switch (kind) {
    case Kind::List: return arr->has_ns;
    case Kind::Dict: return obj->has_ns;
    case Kind::Namespace:
    case Kind::Loop: return true;
    case Kind::Callable: return fn->has_ns;
    default: return false;
  }
}

static void check_depth(int depth) {
  if (depth > kMaxNesting)
    fail_limit("values are nested deeper than " + std::to_string(kMaxNesting) + " levels; flatten the input");
}

Value Value::list(std::vector<Value> items, ListTag tag) {
  auto a = std::make_shared<Array>();
  a->tag = tag;
  int depth = 0;
  for (const auto& it : items) {
    depth = std::max(depth, it.nesting());
    a->has_ns = a->has_ns || it.holds_namespace();
  }
  a->depth = depth + 1;
  check_depth(a->depth);
  a->items = std::move(items);
  Value v;
  v.kind = Kind::List;
  v.arr = std::move(a);
  return v;
}

Value Value::dict(std::shared_ptr<Object> o) {
  int depth = 0;
  bool ns = false;
  for (const auto& [k, val] : o->items) {
    depth = std::max(depth, val.nesting());
    ns = ns || val.holds_namespace();
  }
  o->depth = depth + 1;
  o->has_ns = ns;
  check_depth(o->depth);
  Value v;
  v.kind = Kind::Dict;
  v.obj = std::move(o);
  return v;
}

Value Value::empty_dict() { return dict(std::make_shared<Object>()); }

Value Value::namespace_(std::shared_ptr<Object> o) {
  Value v;
  v.kind = Kind::Namespace;
  v.obj = std::move(o);
  return v;
}

Value Value::callable(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn, bool has_ns) {
  auto c = std::make_shared<Callable>();
  c->repr = "<built-in function " + name + ">";
  c->name = std::move(name);
  c->fn = std::move(fn);
  c->has_ns = has_ns;
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::move(c);
  return v;
}

// ---------------------------------------------------------------------------------------------
// dict

const Value* Object::find(const Value& key) const {
  if (key.kind == Kind::String) return find(key.s);
  auto it = index.find(hash_key(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}
const Value* Object::find(const std::string& str_key) const {
  auto it = str_index.find(str_key);
  return it == str_index.end() ? nullptr : &items[it->second].second;
}
void Object::set(const Value& key, Value v) {
  auto [it, inserted] = key.kind == Kind::String ? str_index.emplace(key.s, items.size())
                                                 : index.emplace(hash_key(key), items.size());
  if (inserted)
    items.emplace_back(key, std::move(v));
  else
    items[it->second].second = std::move(v);  // Python keeps the first key object and position
}

// ---------------------------------------------------------------------------------------------
// Python semantics

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0.0;
    case Kind::String: return !v.s.empty();
    case Kind::List: return !v.arr->items.empty();
    case Kind::Dict: return !v.obj->items.empty();
    default: return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List:
      switch (v.arr->tag) {
        case ListTag::Tuple: return "tuple";
        case ListTag::Keys: return "dict_keys";
        case ListTag::Values: return "dict_values";
        case ListTag::Items: return "dict_items";
        default: return "list";
      }
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Loop: return "LoopContext";
    case Kind::Callable: return "function";
  }
  return "object";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX -> digits and decimal exponent
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp + 1)));
      while (ip.size() < static_cast<size_t>(exp + 1)) ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!utf8::is_printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8::append(out, c);
    }
  }
  out += quote;
  return out;
}

static std::string repr_items(const Value& v) {
  std::string out;
  const auto& items = v.arr->items;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += ", ";
    out += repr(items[k]);
  }
  return out;
}

static std::string repr_dict(const Object& o) {
  std::string out = "{";
  for (size_t k = 0; k < o.items.size(); ++k) {
    if (k) out += ", ";
    out += repr(o.items[k].first) + ": " + repr(o.items[k].second);
  }
  return out + "}";
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return format_float(v.f);
    case Kind::String: return repr_string(v.s);
    case Kind::List:
      switch (v.arr->tag) {
        case ListTag::Tuple:
          return "(" + repr_items(v) + (v.arr->items.size() == 1 ? ",)" : ")");
        case ListTag::Keys: return "dict_keys([" + repr_items(v) + "])";
        case ListTag::Values: return "dict_values([" + repr_items(v) + "])";
        case ListTag::Items: return "dict_items([" + repr_items(v) + "])";
        default: return "[" + repr_items(v) + "]";
      }
    case Kind::Dict: return repr_dict(*v.obj);
    case Kind::Namespace: return "<Namespace " + repr_dict(*v.obj) + ">";
    case Kind::Loop: {
      const Value* idx = v.obj->find(std::string("index"));
      const Value* len = v.obj->find(std::string("length"));
      return "<LoopContext " + (idx ? repr(*idx) : "?") + "/" + (len ? repr(*len) : "?") + ">";
    }
    case Kind::Callable: return v.fn->repr;
  }
  return "?";
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::String: return v.s;
    default: return repr(v);
  }
}

static bool is_numeric(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Float || v.kind == Kind::Bool; }
static double as_double(const Value& v) {
  return v.kind == Kind::Float ? v.f : v.kind == Kind::Bool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i);
}
static int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? (v.b ? 1 : 0) : v.i; }

bool equals(const Value& a, const Value& b) {
  if (is_numeric(a) && is_numeric(b)) {
    if (a.kind != Kind::Float && b.kind != Kind::Float) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List: {
      const bool ta = a.arr->tag == ListTag::Tuple, tb = b.arr->tag == ListTag::Tuple;
      if (ta != tb || a.arr->items.size() != b.arr->items.size()) return false;
      for (size_t k = 0; k < a.arr->items.size(); ++k)
        if (!equals(a.arr->items[k], b.arr->items[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.obj->items.size() != b.obj->items.size()) return false;
      for (const auto& [k, val] : a.obj->items) {
        const Value* other = b.obj->find(k);
        if (!other || !equals(val, *other)) return false;
      }
      return true;
    }
    default: return a.obj == b.obj && a.fn == b.fn;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (is_numeric(a) && is_numeric(b)) {
    if (a.kind != Kind::Float && b.kind != Kind::Float) {
      const int64_t x = as_int(a), y = as_int(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == Kind::Undefined) fail_undefined(a);
  if (b.kind == Kind::Undefined) fail_undefined(b);
  if (a.kind == Kind::String && b.kind == Kind::String) {
    const int c = a.s.compare(b.s);  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == Kind::List && b.kind == Kind::List && (a.arr->tag == ListTag::Tuple) == (b.arr->tag == ListTag::Tuple)) {
    const auto &x = a.arr->items, &y = b.arr->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k])) continue;
      return compare(x[k], y[k], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string hash_key(const Value& v) {
  switch (v.kind) {
    case Kind::None: return "n";
    case Kind::Bool: return v.b ? "i1" : "i0";
    case Kind::Int: return "i" + std::to_string(v.i);
    case Kind::Float:
      if (std::floor(v.f) == v.f && std::fabs(v.f) < 9e18) return "i" + std::to_string(static_cast<int64_t>(v.f));
      return "f" + format_float(v.f);
    case Kind::String: return "s" + v.s;
    case Kind::Undefined: return "u";
    case Kind::List:
      if (v.arr->tag == ListTag::Tuple) {
        std::string k = "t(";
        for (const auto& it : v.arr->items) k += hash_key(it) + "\x1f";
        return k + ")";
      }
      break;
    case Kind::Namespace:
    case Kind::Loop:
    case Kind::Callable: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "o%p", v.obj ? static_cast<const void*>(v.obj.get()) : static_cast<const void*>(v.fn.get()));
      return buf;
    }
    default: break;
  }
  fail("unhashable type: '" + type_name(v) + "'");
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(utf8::length(v.s));
    case Kind::List: return static_cast<int64_t>(v.arr->items.size());
    case Kind::Dict:
    case Kind::Namespace: return static_cast<int64_t>(v.obj->items.size());
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: return v.arr->items;
    case Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.obj->items.size());
      for (const auto& kv : v.obj->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (size_t i = 0; i < v.s.size();) {
        const size_t start = i;
        utf8::next(v.s, i);
        chars.push_back(Value::string(v.s.substr(start, i - start)));
      }
      return chars;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

// ---------------------------------------------------------------------------------------------
// json.dumps
//
// The escapes are the SDK's (kiln/json_escape.hpp), so tojson writes what the parsers and deltas
// write. The walk is Python's, by code point, which is why this does not call append_json_escaped():
// ensure_ascii writes every code point from 0x7F up as \uXXXX (a surrogate pair above the BMP), and
// a stray byte of invalid UTF-8 comes out as the code point of the same value, never as itself.

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (c < 0x80 && json_needs_escape(static_cast<unsigned char>(c))) {
      append_json_escape(out, static_cast<unsigned char>(c));
    } else if (ensure_ascii && c >= 0x7F) {
      char buf[16];
      if (c >= 0x10000) {
        const char32_t x = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (x >> 10)),
                      static_cast<unsigned>(0xDC00 + (x & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8::append(out, c);
    }
  }
  out += '"';
}

static std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

static void json_value(std::string& out, const Value& v, const JsonOptions& opt, int level);

static void json_newline(std::string& out, const JsonOptions& opt, int level) {
  out += '\n';
  for (int k = 0; k < level; ++k) out += opt.indent;
}

static std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::String: return k.s;
    case Kind::Int: return std::to_string(k.i);
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::None: return "null";
    case Kind::Float: return json_float(k.f);
    default: fail("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

static void json_value(std::string& out, const Value& v, const JsonOptions& opt, int level) {
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += json_float(v.f); return;
    case Kind::String: json_string(out, v.s, opt.ensure_ascii); return;
    case Kind::List: {
      if (v.arr->tag != ListTag::List && v.arr->tag != ListTag::Tuple)
        fail("Object of type " + type_name(v) + " is not JSON serializable");
      if (v.arr->items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const auto& it : v.arr->items) {
        if (!first) out += opt.item_sep;
        first = false;
        if (opt.has_indent) json_newline(out, opt, level + 1);
        json_value(out, it, opt, level + 1);
      }
      if (opt.has_indent) json_newline(out, opt, level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (v.obj->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.obj->items) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* x, auto* y) { return compare(x->first, y->first) < 0; });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += opt.item_sep;
        first = false;
        if (opt.has_indent) json_newline(out, opt, level + 1);
        json_string(out, json_key(kv->first), opt.ensure_ascii);
        out += opt.key_sep;
        json_value(out, kv->second, opt, level + 1);
      }
      if (opt.has_indent) json_newline(out, opt, level);
      out += '}';
      return;
    }
    default: fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_value(out, v, opt, 0);
  return out;
}

}  // namespace tmpl
}  // namespace kiln
