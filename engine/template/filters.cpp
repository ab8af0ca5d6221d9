// Jinja filters and tests (jinja2/filters.py, jinja2/tests.py) with transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "template/eval.hpp"
#include "template/parser.hpp"
#include "template/utf8.hpp"

namespace kiln::tmpl {
namespace {

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "abs",     "attr",   "capitalize", "center",     "count",   "d",       "default", "dictsort", "e",
      "escape",  "first",  "float",      "format",     "indent",  "int",     "items",   "join",     "last",
      "length",  "list",   "lower",      "map",        "max",     "min",     "reject",  "rejectattr",
      "replace", "reverse", "round",     "safe",       "select",  "selectattr", "sort", "string",   "sum",
      "title",   "tojson", "trim",       "unique",     "upper",   "wordcount", "forceescape", "batch"};
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "boolean", "callable", "defined", "divisibleby", "eq",      "equalto", "==",      "escaped", "even",
      "false",   "filter",   "float",   "ge",          ">=",      "gt",      "greaterthan", ">",   "in",
      "integer", "iterable", "le",      "<=",          "lower",   "lt",      "lessthan", "<",      "mapping",
      "ne",      "!=",       "none",    "number",      "odd",     "sameas",  "sequence", "string", "test",
      "true",    "undefined", "upper"};
  return names;
}

// Binds call arguments to a Python-style signature; absent ones are std::nullopt.
std::vector<std::optional<Value>> bind(const std::string& fname, CallArgs& args, std::initializer_list<const char*> params) {
  std::vector<std::optional<Value>> out(params.size());
  std::vector<std::string> names(params.begin(), params.end());
  if (args.pos.size() > names.size())
    fail(fname + "() takes at most " + std::to_string(names.size()) + " argument(s) (" + std::to_string(args.pos.size()) + " given)");
  for (size_t k = 0; k < args.pos.size(); ++k) out[k] = args.pos[k];
  for (auto& [k, v] : args.kw) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) fail(fname + "() got an unexpected keyword argument '" + k + "'");
    const size_t idx = static_cast<size_t>(it - names.begin());
    if (out[idx]) fail(fname + "() got multiple values for argument '" + k + "'");
    out[idx] = v;
  }
  return out;
}

bool opt_true(const std::optional<Value>& v) { return v && truthy(*v); }

int64_t opt_int(const std::optional<Value>& v, int64_t def, const char* what) {
  if (!v || v->is_none()) return def;
  if (v->kind == Kind::Int) return v->i;
  if (v->kind == Kind::Bool) return v->b ? 1 : 0;
  fail(std::string(what) + " must be an integer, not " + type_name(*v));
}

// Jinja's make_attrgetter: "a.b.0" walks attributes/items.
Value attr_path(Evaluator& ev, const Value& item, const Value& attr) {
  if (attr.kind != Kind::String) return ev.get_item(item, attr);
  Value cur = item;
  size_t start = 0;
  const std::string& p = attr.s;
  while (true) {
    const size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits && part.size() < 18 ? ev.get_item(cur, Value::integer(std::atoll(part.c_str()))) : ev.get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value lower_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.kind == Kind::String) return Value::string(str_lower(v.s));
  return v;
}

std::vector<Value> sorted(std::vector<Value> items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key(items[k]), k);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(items[kv.second]);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&#34;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

// Python int(str) / float(str) parsing (whitespace, sign, underscores between digits).
std::optional<int64_t> parse_int(const std::string& s0, int base) {
  std::string s = strip_chars(s0, nullptr, 3);
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_' && k > 0 && k + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[k - 1])) &&
        std::isalnum(static_cast<unsigned char>(s[k + 1])))
      continue;
    clean += s[k];
  }
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(clean.c_str(), &end, base);
  if (errno || *end || !std::isalnum(static_cast<unsigned char>(clean.back()))) return std::nullopt;
  return v;
}

std::optional<double> parse_float(const std::string& s0) {
  std::string s = strip_chars(s0, nullptr, 3);
  if (s.empty()) return std::nullopt;
  std::string low = str_lower(s);
  if (low == "inf" || low == "+inf" || low == "infinity" || low == "+infinity") return INFINITY;
  if (low == "-inf" || low == "-infinity") return -INFINITY;
  if (low == "nan" || low == "+nan" || low == "-nan") return NAN;
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end) return std::nullopt;
  return v;
}

Value do_tojson(const Value& v, CallArgs& args) {
  auto b = bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = opt_true(b[0]);
  if (b[1] && !b[1]->is_none()) {
    o.has_indent = true;
    if (b[1]->kind == Kind::String) o.indent = b[1]->s;
    else o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(opt_int(b[1], 0, "indent"), 0, 64)), ' ');
    o.item_sep = ",";
  }
  if (b[2] && !b[2]->is_none()) {
    std::vector<Value> seps = iterate(*b[2]);
    if (seps.size() != 2 || seps[0].kind != Kind::String || seps[1].kind != Kind::String)
      fail("tojson separators must be a pair of strings");
    o.item_sep = seps[0].s;
    o.key_sep = seps[1].s;
  }
  o.sort_keys = opt_true(b[3]);
  return Value::string(to_json(v, o));
}

std::string do_indent(const std::string& s0, const std::string& ind, bool first, bool blank) {
  std::vector<std::string> lines = split_lines(s0 + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t k = 1; k < lines.size(); ++k) rv += (k > 1 ? "\n" : "") + (lines[k].empty() ? "" : ind + lines[k]);
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

std::vector<Value> select_common(Evaluator& ev, const Value& seq, CallArgs& args, bool by_attr, bool want, const char* name) {
  std::vector<Value> items = iterate(seq);
  Value attr;
  size_t next = 0;
  if (by_attr) {
    if (args.pos.empty()) fail(std::string(name) + "() needs an attribute name");
    attr = args.pos[0];
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.pos.size() > next) {
    if (args.pos[next].kind != Kind::String) fail(std::string(name) + "() test name must be a string");
    test = args.pos[next].s;
    if (!has_test(test)) fail("No test named '" + test + "'.");
    test_args.pos.assign(args.pos.begin() + static_cast<long>(next) + 1, args.pos.end());
  }
  test_args.kw = args.kw;
  std::vector<Value> out;
  for (const auto& it : items) {
    ev.charge(1);
    Value v = by_attr ? attr_path(ev, it, attr) : it;
    bool ok;
    if (test.empty()) {
      ok = truthy(v);
    } else {
      CallArgs copy = test_args;
      ok = ev.apply_test(test, v, copy);
    }
    if (ok == want) out.push_back(it);
  }
  return out;
}

}  // namespace

bool has_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool has_test(const std::string& name) { return test_names().count(name) > 0; }

Value Evaluator::apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  charge(1);
  const std::string& n = name;
  if (n == "default" || n == "d") {
    auto b = bind(n, args, {"default_value", "boolean"});
    const bool use = v.is_undefined() || (opt_true(b[1]) && !truthy(v));
    if (!use) return v;
    return b[0] ? *b[0] : Value::string("");
  }
  if (n == "tojson") return do_tojson(v, args);
  if (n == "safe" || n == "string") {
    bind(n, args, {});
    return v.kind == Kind::String ? v : Value::string(to_str(v));
  }
  if (n == "e" || n == "escape" || n == "forceescape") {
    bind(n, args, {});
    return Value::string(html_escape(to_str(v)));
  }
  if (n == "length" || n == "count") {
    bind(n, args, {});
    return Value::integer(length(v));
  }
  if (n == "trim") {
    auto b = bind(n, args, {"chars"});
    const Value* chars = b[0] && !b[0]->is_none() ? &*b[0] : nullptr;
    return Value::string(strip_chars(to_str(v), chars, 3));
  }
  if (n == "upper" || n == "lower" || n == "title" || n == "capitalize") {
    bind(n, args, {});
    const std::string s = to_str(v);
    return Value::string(n == "upper" ? str_upper(s) : n == "lower" ? str_lower(s) : n == "title" ? str_title(s) : str_capitalize(s));
  }
  if (n == "replace") {
    auto b = bind(n, args, {"old", "new", "count"});
    if (!b[0] || !b[1]) fail("replace() needs old and new strings");
    const std::string s = str_replace(to_str(v), to_str(*b[0]), to_str(*b[1]), opt_int(b[2], -1, "count"), limits_.max_output_bytes);
    check_size(s.size());
    return Value::string(s);
  }
  if (n == "indent") {
    auto b = bind(n, args, {"width", "first", "blank"});
    std::string ind = b[0] && b[0]->kind == Kind::String ? b[0]->s : std::string(static_cast<size_t>(std::clamp<int64_t>(opt_int(b[0], 4, "width"), 0, 1024)), ' ');
    const std::string text = to_str(v);
    const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    check_size(text.size() + lines * ind.size());  // before building it
    std::string s = do_indent(text, ind, opt_true(b[1]), opt_true(b[2]));
    check_size(s.size());
    return Value::string(std::move(s));
  }
  if (n == "center") {
    auto b = bind(n, args, {"width"});
    const int64_t w = std::min<int64_t>(opt_int(b[0], 80, "width"), 1 << 20);
    std::string s = to_str(v);
    const int64_t len = static_cast<int64_t>(utf8::length(s));
    if (w <= len) return Value::string(s);
    const int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
  }
  if (n == "wordcount") {
    bind(n, args, {});
    const std::string s = to_str(v);
    int64_t count = 0;
    bool in = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = utf8::next(s, i);
      const bool w = utf8::is_alpha(c) || utf8::is_digit(c) || c == '_';
      if (w && !in) ++count;
      in = w;
    }
    return Value::integer(count);
  }
  if (n == "format") {
    std::vector<Value> pos = args.pos;
    if (!args.kw.empty()) {
      auto o = std::make_shared<Object>();
      for (auto& [k, val] : args.kw) o->set(Value::string(k), val);
      return Value::string(percent_format(to_str(v), Value::dict(o)));
    }
    return Value::string(percent_format(to_str(v), Value::list(std::move(pos), ListTag::Tuple)));
  }
  if (n == "int") {
    auto b = bind(n, args, {"default", "base"});
    const Value def = b[0] ? *b[0] : Value::integer(0);
    const int base = static_cast<int>(opt_int(b[1], 10, "base"));
    if (v.is_undefined()) fail_undefined(v);
    if (v.kind == Kind::Int) return v;
    if (v.kind == Kind::Bool) return Value::integer(v.b ? 1 : 0);
    if (v.kind == Kind::Float) {
      if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return def;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.kind == Kind::String) {
      if (base >= 2 && base <= 36)
        if (auto i = parse_int(v.s, base)) return Value::integer(*i);
      if (auto f = parse_float(v.s))
        if (std::isfinite(*f) && std::fabs(*f) < 9.2e18) return Value::integer(static_cast<int64_t>(*f));
    }
    return def;
  }
  if (n == "float") {
    auto b = bind(n, args, {"default"});
    const Value def = b[0] ? *b[0] : Value::number(0.0);
    if (v.is_undefined()) fail_undefined(v);
    if (v.kind == Kind::Float) return v;
    if (v.kind == Kind::Int || v.kind == Kind::Bool) return Value::number(v.kind == Kind::Bool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i));
    if (v.kind == Kind::String)
      if (auto f = parse_float(v.s)) return Value::number(*f);
    return def;
  }
  if (n == "abs") {
    bind(n, args, {});
    if (v.kind == Kind::Int) {
      if (v.i == INT64_MIN) fail_limit("integer overflow");
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == Kind::Bool) return Value::integer(v.b ? 1 : 0);
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.is_undefined()) fail_undefined(v);
    fail("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (n == "round") {
    auto b = bind(n, args, {"precision", "method"});
    const int64_t prec = std::clamp<int64_t>(opt_int(b[0], 0, "precision"), -30, 30);
    const std::string method = b[1] ? to_str(*b[1]) : "common";
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
    const double x = v.kind == Kind::Float ? v.f : static_cast<double>(v.kind == Kind::Bool ? v.b : v.i);
    const double scale = std::pow(10.0, static_cast<double>(prec));
    double r;
    if (method == "common") r = std::nearbyint(x * scale) / scale;
    else if (method == "ceil") r = std::ceil(x * scale) / scale;
    else if (method == "floor") r = std::floor(x * scale) / scale;
    else fail("method must be common, ceil or floor");
    return Value::number(r);
  }
  if (n == "attr") {
    auto b = bind(n, args, {"name"});
    if (!b[0]) fail("attr() needs a name");
    return get_attr(v, to_str(*b[0]));
  }
  if (n == "first" || n == "last") {
    bind(n, args, {});
    if (v.is_undefined()) return Value::undefined(n == "first" ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(n == "first" ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    return n == "first" ? items.front() : items.back();
  }
  if (n == "list") {
    bind(n, args, {});
    if (v.kind == Kind::Namespace || v.kind == Kind::Loop || v.is_number() || v.is_none() || v.kind == Kind::Callable)
      fail("'" + type_name(v) + "' object is not iterable");
    return Value::list(iterate(v));
  }
  if (n == "items") {
    bind(n, args, {});
    if (v.is_undefined()) return Value::list({});
    if (v.kind != Kind::Dict) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& kv : v.obj->items) out.push_back(Value::list({kv.first, kv.second}, ListTag::Tuple));
    return Value::list(std::move(out));
  }
  if (n == "dictsort") {
    auto b = bind(n, args, {"case_sensitive", "by", "reverse"});
    if (v.is_undefined()) fail_undefined(v);
    if (v.kind != Kind::Dict) fail("'" + type_name(v) + "' object has no attribute 'items'");
    const bool cs = opt_true(b[0]);
    const std::string by = b[1] ? to_str(*b[1]) : "key";
    if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
    std::vector<Value> pairs;
    for (const auto& kv : v.obj->items) pairs.push_back(Value::list({kv.first, kv.second}, ListTag::Tuple));
    charge(pairs.size());
    const size_t pos = by == "key" ? 0 : 1;
    return Value::list(sorted(std::move(pairs), [&](const Value& p) { return lower_key(p.arr->items[pos], cs); }, opt_true(b[2])));
  }
  if (n == "sort") {
    auto b = bind(n, args, {"reverse", "case_sensitive", "attribute"});
    const bool cs = opt_true(b[1]);
    std::vector<Value> items = iterate(v);
    charge(items.size());
    const std::optional<Value> attr = b[2] && !b[2]->is_none() ? b[2] : std::nullopt;
    return Value::list(sorted(std::move(items), [&](const Value& x) { return lower_key(attr ? attr_path(*this, x, *attr) : x, cs); }, opt_true(b[0])));
  }
  if (n == "unique") {
    auto b = bind(n, args, {"case_sensitive", "attribute"});
    const bool cs = opt_true(b[0]);
    std::set<std::string> seen;
    std::vector<Value> out;
    for (const auto& it : iterate(v)) {
      const Value key = lower_key(b[1] && !b[1]->is_none() ? attr_path(*this, it, *b[1]) : it, cs);
      if (seen.insert(hash_key(key)).second) out.push_back(it);
    }
    return Value::list(std::move(out));
  }
  if (n == "reverse") {
    bind(n, args, {});
    if (v.kind == Kind::String) {
      std::vector<char32_t> cps = utf8::decode(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::string(utf8::encode(cps, 0, cps.size()));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (n == "join") {
    auto b = bind(n, args, {"d", "attribute"});
    const std::string sep = b[0] ? to_str(*b[0]) : "";
    std::string out;
    bool firstp = true;
    for (const auto& it : iterate(v)) {
      if (!firstp) out += sep;
      firstp = false;
      out += to_str(b[1] && !b[1]->is_none() ? attr_path(*this, it, *b[1]) : it);
      if (out.size() > limits_.max_output_bytes) check_size(out.size());
    }
    check_size(out.size());
    return Value::string(std::move(out));
  }
  if (n == "map") {
    std::vector<Value> items = iterate(v);
    std::vector<Value> out;
    bool by_attr = false;
    Value attr, def;
    bool has_def = false;
    for (auto& [k, val] : args.kw) {
      if (k == "attribute") by_attr = true, attr = val;
      else if (k == "default") has_def = true, def = val;
    }
    if (by_attr) {
      for (const auto& it : items) {
        Value x = attr_path(*this, it, attr);
        out.push_back(x.is_undefined() && has_def ? def : x);
      }
    } else {
      if (args.pos.empty() || args.pos[0].kind != Kind::String) fail("map() needs a filter name or attribute=");
      const std::string f = args.pos[0].s;
      if (!has_filter(f)) fail("No filter named '" + f + "'.");
      for (const auto& it : items) {
        CallArgs fa;
        fa.pos.assign(args.pos.begin() + 1, args.pos.end());
        fa.kw = args.kw;
        out.push_back(apply_filter(f, it, fa));
      }
    }
    return Value::list(std::move(out));
  }
  if (n == "select" || n == "reject") return Value::list(select_common(*this, v, args, false, n == "select", n.c_str()));
  if (n == "selectattr" || n == "rejectattr")
    return Value::list(select_common(*this, v, args, true, n == "selectattr", n.c_str()));
  if (n == "sum") {
    auto b = bind(n, args, {"attribute", "start"});
    Value acc = b[1] ? *b[1] : Value::integer(0);
    for (const auto& it : iterate(v)) acc = binary("+", acc, b[0] && !b[0]->is_none() ? attr_path(*this, it, *b[0]) : it);
    return acc;
  }
  if (n == "min" || n == "max") {
    auto b = bind(n, args, {"case_sensitive", "attribute"});
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    const bool cs = opt_true(b[0]);
    auto key = [&](const Value& x) { return lower_key(b[1] && !b[1]->is_none() ? attr_path(*this, x, *b[1]) : x, cs); };
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
      const int c = compare(key(items[k]), key(items[best]));
      if (n == "min" ? c < 0 : c > 0) best = k;
    }
    return items[best];
  }
  if (n == "batch") {
    auto b = bind(n, args, {"linecount", "fill_with"});
    const int64_t count = opt_int(b[0], 1, "linecount");
    if (count <= 0) fail("batch() linecount must be positive");
    std::vector<Value> out, cur;
    for (const auto& it : iterate(v)) {
      cur.push_back(it);
      if (static_cast<int64_t>(cur.size()) == count) out.push_back(Value::list(std::move(cur))), cur.clear();
    }
    if (!cur.empty()) {
      if (b[1] && !b[1]->is_none())
        while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*b[1]);
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
  }
  fail("No filter named '" + n + "'.");
}

bool Evaluator::apply_test(const std::string& n, const Value& v, CallArgs& args) {
  charge(1);
  auto arg = [&](const char* what) -> Value {
    auto b = bind(n, args, {what});
    if (!b[0]) fail("test '" + n + "' needs an argument");
    return *b[0];
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.kind == Kind::String;
  if (n == "mapping") return v.kind == Kind::Dict;
  if (n == "boolean") return v.kind == Kind::Bool;
  if (n == "true") return v.kind == Kind::Bool && v.b;
  if (n == "false") return v.kind == Kind::Bool && !v.b;
  if (n == "number") return v.kind == Kind::Int || v.kind == Kind::Float || v.kind == Kind::Bool;
  if (n == "integer") return v.kind == Kind::Int;
  if (n == "float") return v.kind == Kind::Float;
  if (n == "callable") return v.kind == Kind::Callable || v.is_undefined();  // Undefined defines __call__
  if (n == "iterable") return v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::String || v.is_undefined();
  if (n == "sequence") return v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::String || v.is_undefined();
  if (n == "escaped") return false;
  if (n == "lower" || n == "upper") {
    const std::string s = to_str(v);
    bool cased = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = utf8::next(s, i);
      if (!utf8::is_cased(c)) continue;
      cased = true;
      if (n == "lower" ? utf8::to_lower(c) != c : utf8::to_upper(c) != c) return false;
    }
    return cased;
  }
  if (n == "odd" || n == "even" || n == "divisibleby") {
    const Value d = n == "divisibleby" ? arg("num") : Value::integer(2);
    if (v.is_undefined()) fail_undefined(v);
    Value m = binary("%", v, d);
    const bool zero = !truthy(m);
    return n == "odd" ? !zero : zero;
  }
  if (n == "eq" || n == "equalto" || n == "==") return equals(v, arg("other"));
  if (n == "ne" || n == "!=") return !equals(v, arg("other"));
  if (n == "lt" || n == "lessthan" || n == "<") return compare(v, arg("other"), "<") < 0;
  if (n == "le" || n == "<=") return compare(v, arg("other"), "<=") <= 0;
  if (n == "gt" || n == "greaterthan" || n == ">") return compare(v, arg("other"), ">") > 0;
  if (n == "ge" || n == ">=") return compare(v, arg("other"), ">=") >= 0;
  if (n == "in") {
    Value seq = arg("seq");
    if (seq.kind == Kind::String) return v.kind == Kind::String && seq.s.find(v.s) != std::string::npos;
    for (const auto& it : iterate(seq))
      if (equals(it, v)) return true;
    return false;
  }
  if (n == "sameas") {
    const Value o = arg("other");
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::List: return v.arr == o.arr;
      case Kind::Dict:
      case Kind::Namespace: return v.obj == o.obj;
      case Kind::Callable: return v.fn == o.fn;
      default: return equals(v, o);
    }
  }
  if (n == "filter") return v.kind == Kind::String && has_filter(v.s);
  if (n == "test") return v.kind == Kind::String && has_test(v.s);
  fail("No test named '" + n + "'.");
}

}  // namespace kiln::tmpl
