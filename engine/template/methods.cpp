// Python methods of str, dict and list that templates call (`content.split('</think>')`,
// `message.get('reasoning')`, `tools.items()`), as ImmutableSandboxedEnvironment allows them:
// mutating methods (list.append, dict.update, ...) are "unsafe" and fail when called.
#include <algorithm>
#include <optional>

#include "template/eval.hpp"
#include "template/utf8.hpp"

namespace kiln::tmpl {

std::string str_upper(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (c == 0xDF) o += "SS";
    else utf8::append(o, utf8::to_upper(c));
  }
  return o;
}

std::string str_lower(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size();) utf8::append(o, utf8::to_lower(utf8::next(s, i)));
  return o;
}

std::string str_title(const std::string& s) {
  std::string o;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    const bool cased = utf8::is_cased(c);
    utf8::append(o, cased ? (prev_cased ? utf8::to_lower(c) : utf8::to_upper(c)) : c);
    prev_cased = cased;
  }
  return o;
}

std::string str_capitalize(const std::string& s) {
  std::string o;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    utf8::append(o, first ? utf8::to_upper(c) : utf8::to_lower(c));
    first = false;
  }
  return o;
}

std::string str_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count,
                        size_t max_bytes) {
  if (count < 0) count = INT64_MAX;
  if (rep.size() > old.size()) {
    // Size the result before building it: "a"*1e6 replaced by a long string must not allocate gigabytes.
    uint64_t n = 0;
    if (old.empty()) {
      n = utf8::length(s) + 1;
    } else {
      for (size_t p = s.find(old); p != std::string::npos && n < static_cast<uint64_t>(count); p = s.find(old, p + old.size())) ++n;
    }
    n = std::min<uint64_t>(n, static_cast<uint64_t>(count));
    if (s.size() + n * (rep.size() - old.size()) > max_bytes)
      fail_limit("str.replace result larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string o;
  if (old.empty()) {
    // Python inserts `rep` before every character and at the end.
    int64_t n = 0;
    size_t i = 0;
    while (i < s.size()) {
      if (n < count) o += rep, ++n;
      const size_t st = i;
      utf8::next(s, i);
      o.append(s, st, i - st);
    }
    if (n < count) o += rep;
    return o;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (n < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    o.append(s, pos, f - pos);
    o += rep;
    pos = f + old.size();
    ++n;
  }
  o.append(s, pos, std::string::npos);
  return o;
}

std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t c = utf8::next(s, i);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    out.push_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string strip_chars(const std::string& s, const Value* chars, int which) {
  std::vector<char32_t> cps = utf8::decode(s);
  std::vector<char32_t> set;
  if (chars) {
    if (chars->kind != Kind::String) fail("strip arg must be None or str");
    set = utf8::decode(chars->s);
  }
  auto strip = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : utf8::is_space(c); };
  size_t b = 0, e = cps.size();
  if (which & 1)
    while (b < e && strip(cps[b])) ++b;
  if (which & 2)
    while (e > b && strip(cps[e - 1])) --e;
  return utf8::encode(cps, b, e);
}

namespace {

using Bound = std::vector<std::optional<Value>>;

Bound bind_method(const std::string& name, CallArgs& a, std::initializer_list<const char*> params) {
  Bound out(params.size());
  std::vector<std::string> names(params.begin(), params.end());
  if (a.pos.size() > names.size())
    fail(name + "() takes at most " + std::to_string(names.size()) + " arguments (" + std::to_string(a.pos.size()) + " given)");
  for (size_t k = 0; k < a.pos.size(); ++k) out[k] = a.pos[k];
  for (auto& [k, v] : a.kw) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) fail(name + "() got an unexpected keyword argument '" + k + "'");
    out[static_cast<size_t>(it - names.begin())] = v;
  }
  return out;
}

const std::string& need_str(const std::optional<Value>& v, const std::string& fn) {
  if (!v || v->kind != Kind::String) fail(fn + "() argument must be str, not " + (v ? type_name(*v) : std::string("nothing")));
  return v->s;
}

int64_t opt_i(const std::optional<Value>& v, int64_t def) {
  if (!v || v->is_none()) return def;
  if (v->kind == Kind::Int) return v->i;
  if (v->kind == Kind::Bool) return v->b;
  fail("an integer is required, not " + type_name(*v));
}

// Python's start/end clamp for find/startswith on a code point sequence.
std::pair<size_t, size_t> span(const std::optional<Value>& s, const std::optional<Value>& e, size_t len) {
  auto fix = [&](int64_t v) {
    if (v < 0) v += static_cast<int64_t>(len);
    return static_cast<size_t>(std::clamp<int64_t>(v, 0, static_cast<int64_t>(len)));
  };
  return {fix(opt_i(s, 0)), fix(opt_i(e, static_cast<int64_t>(len)))};
}

std::vector<std::string> split(const std::string& s, const std::optional<Value>& sepv, int64_t maxsplit, bool right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (!sepv || sepv->is_none()) {
    std::vector<char32_t> cps = utf8::decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && utf8::is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !utf8::is_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (words.empty() || static_cast<int64_t>(words.size()) - 1 <= maxsplit) {
      for (auto [b, e] : words) out.push_back(utf8::encode(cps, b, e));
      return out;
    }
    const size_t n = static_cast<size_t>(maxsplit);
    // Python keeps the unsplit remainder as is (trailing/leading whitespace included).
    if (!right) {
      for (size_t k = 0; k < n; ++k) out.push_back(utf8::encode(cps, words[k].first, words[k].second));
      out.push_back(utf8::encode(cps, words[n].first, cps.size()));
    } else {
      const size_t m = words.size() - n;
      out.push_back(utf8::encode(cps, 0, words[m - 1].second));
      for (size_t k = m; k < words.size(); ++k) out.push_back(utf8::encode(cps, words[k].first, words[k].second));
    }
    return out;
  }
  if (sepv->kind != Kind::String) fail("must be str or None, not " + type_name(*sepv));
  const std::string& sep = sepv->s;
  if (sep.empty()) fail("empty separator");
  if (!right) {
    size_t pos = 0;
    int64_t n = 0;
    while (n < maxsplit) {
      const size_t f = s.find(sep, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + sep.size();
      ++n;
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    std::vector<std::string> rev;
    while (n < maxsplit && end >= sep.size()) {
      const size_t f = s.rfind(sep, end - sep.size());
      if (f == std::string::npos) break;
      rev.push_back(s.substr(f + sep.size(), end - f - sep.size()));
      end = f;
      ++n;
    }
    rev.push_back(s.substr(0, end));
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> v;
  v.reserve(parts.size());
  for (auto& p : parts) v.push_back(Value::string(std::move(p)));
  return Value::list(std::move(v));
}

bool affix(const std::string& s, const Value& what, const std::optional<Value>& st, const std::optional<Value>& en, bool start, const std::string& fn) {
  std::vector<char32_t> cps = utf8::decode(s);
  auto [b, e] = span(st, en, cps.size());
  const std::string sub = b <= e ? utf8::encode(cps, b, e) : std::string();
  if (b > e) return false;
  auto one = [&](const Value& p) {
    if (p.kind != Kind::String) fail(fn + " first arg must be str or a tuple of str, not " + type_name(p));
    if (p.s.size() > sub.size()) return false;
    return start ? sub.compare(0, p.s.size(), p.s) == 0 : sub.compare(sub.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (what.kind == Kind::List && what.arr->tag == ListTag::Tuple) {
    for (const auto& p : what.arr->items)
      if (one(p)) return true;
    return false;
  }
  return one(what);
}

int64_t find_cp(const std::string& s, const std::string& sub, const std::optional<Value>& st, const std::optional<Value>& en, bool reverse) {
  std::vector<char32_t> cps = utf8::decode(s), sc = utf8::decode(sub);
  auto [b, e] = span(st, en, cps.size());
  if (b > e || e - b < sc.size()) return -1;
  if (!reverse) {
    for (size_t k = b; k + sc.size() <= e; ++k)
      if (std::equal(sc.begin(), sc.end(), cps.begin() + static_cast<long>(k))) return static_cast<int64_t>(k);
  } else {
    for (size_t k = e - sc.size() + 1; k-- > b;)
      if (std::equal(sc.begin(), sc.end(), cps.begin() + static_cast<long>(k))) return static_cast<int64_t>(k);
  }
  return -1;
}

// str.format(): {} {0} {name} {name.attr} {0[key]} with !s/!r; format specs are not supported.
std::string str_format(Evaluator& ev, const std::string& f, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) fail("Single '{' encountered in format string");
      std::string field = f.substr(i + 1, close - i - 1);
      char conv = 's';
      const size_t bang = field.find('!');
      const size_t colon = field.find(':');
      if (colon != std::string::npos) {
        if (field.substr(colon + 1).size()) fail("format specs in str.format() are not supported by kiln's template engine");
        field = field.substr(0, colon);
      }
      if (bang != std::string::npos && bang < field.size()) {
        conv = bang + 1 < field.size() ? field[bang + 1] : 's';
        field = field.substr(0, bang);
      }
      size_t cut = field.find_first_of(".[");
      std::string head = field.substr(0, cut);
      Value v;
      if (head.empty()) {
        if (auto_idx >= a.pos.size()) fail("Replacement index " + std::to_string(auto_idx) + " out of range for positional args tuple");
        v = a.pos[auto_idx++];
      } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t k = head.size() < 9 ? static_cast<size_t>(std::stoul(head)) : SIZE_MAX;
        if (k >= a.pos.size()) fail("Replacement index " + head + " out of range for positional args tuple");
        v = a.pos[k];
      } else {
        bool found = false;
        for (auto& [k, val] : a.kw)
          if (k == head) v = val, found = true;
        if (!found) fail("'" + head + "'");
      }
      while (cut != std::string::npos && cut < field.size()) {
        if (field[cut] == '.') {
          const size_t nx = field.find_first_of(".[", cut + 1);
          v = ev.get_attr(v, field.substr(cut + 1, nx == std::string::npos ? std::string::npos : nx - cut - 1));
          cut = nx;
        } else {
          const size_t rb = field.find(']', cut);
          if (rb == std::string::npos) fail("Missing ']' in format string");
          const std::string key = field.substr(cut + 1, rb - cut - 1);
          const bool num = !key.empty() && key.size() < 18 && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
          v = ev.get_item(v, num ? Value::integer(std::stoll(key)) : Value::string(key));
          cut = rb + 1 < field.size() ? rb + 1 : std::string::npos;
        }
      }
      out += conv == 'r' ? repr(v) : to_str(v);
      i = close;
    } else if (c == '}') {
      fail("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  ev.check_size(out.size());
  return out;
}

Value unsafe(const std::string& name, const char* type) {
  return Value::undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> pos;
  const Value* mapping = nullptr;
  if (args.kind == Kind::List && args.arr->tag == ListTag::Tuple) pos = args.arr->items;
  else if (args.kind == Kind::Dict) mapping = &args;
  else pos.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    Value v;
    bool have = false;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) fail("format requires a mapping");
      const Value* found = mapping->obj->find(fmt.substr(i + 1, close - i - 1));
      if (!found) fail("'" + fmt.substr(i + 1, close - i - 1) + "'");
      v = *found;
      have = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    int width = 0, prec = -1;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])) && width < 10000) width = width * 10 + (fmt[i++] - '0');
    if (i < fmt.size() && fmt[i] == '.') {
      prec = 0;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])) && prec < 10000) prec = prec * 10 + (fmt[i++] - '0');
    }
    if (i >= fmt.size()) fail("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have) {
      if (mapping) {
        v = *mapping;
      } else {
        if (next >= pos.size()) fail("not enough arguments for format string");
        v = pos[next++];
      }
    }
    std::string s;
    char buf[512];
    switch (conv) {
      case 's': s = to_str(v); if (prec >= 0) s = utf8::encode(utf8::decode(s), 0, static_cast<size_t>(prec)); break;
      case 'r': s = repr(v); break;
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number()) fail(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        const long long n = v.kind == Kind::Float ? static_cast<long long>(v.f) : v.kind == Kind::Bool ? v.b : v.i;
        const char* f = conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : conv == 'o' ? "%llo" : "%lld";
        std::snprintf(buf, sizeof buf, f, n);
        s = buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) fail("must be real number, not " + type_name(v));
        const double d = v.kind == Kind::Float ? v.f : static_cast<double>(v.kind == Kind::Bool ? v.b : v.i);
        const char f[] = {'%', '.', '*', conv, 0};
        std::snprintf(buf, sizeof buf, f, std::min(prec < 0 ? 6 : prec, 100), d);
        s = buf;
        break;
      }
      default: fail(std::string("unsupported format character '") + conv + "'");
    }
    const int len = static_cast<int>(utf8::length(s));
    if (width > len) {
      const std::string pad(static_cast<size_t>(width - len), flags.find('0') != std::string::npos && conv != 's' && conv != 'r' ? '0' : ' ');
      s = flags.find('-') != std::string::npos ? s + std::string(pad.size(), ' ') : pad + s;
    }
    out += s;
  }
  if (!mapping && next < pos.size()) fail("not all arguments converted during string formatting");
  return out;
}

Value get_method(const Value& self, const std::string& name) {
  auto method = [&](auto fn) { return Value::callable(name, fn, self.holds_namespace()); };
  if (self.kind == Kind::String) {
    const std::string s = self.s;
    if (name == "startswith" || name == "endswith")
      return method([s, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"prefix", "start", "end"});
        if (!b[0]) fail(name + "() takes at least 1 argument (0 given)");
        return Value::boolean(affix(s, *b[0], b[1], b[2], name == "startswith", name));
      });
    if (name == "split" || name == "rsplit")
      return method([s, name](Evaluator& ev, CallArgs& a) {
        Bound b = bind_method(name, a, {"sep", "maxsplit"});
        Value r = str_list(split(s, b[0], opt_i(b[1], -1), name == "rsplit"));
        ev.check_size(r.arr->items.size() * sizeof(Value));
        return r;
      });
    if (name == "splitlines")
      return method([s](Evaluator&, CallArgs& a) {
        Bound b = bind_method("splitlines", a, {"keepends"});
        return str_list(split_lines(s, b[0] && truthy(*b[0])));
      });
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return method([s, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"chars"});
        const Value* chars = b[0] && !b[0]->is_none() ? &*b[0] : nullptr;
        return Value::string(strip_chars(s, chars, name == "strip" ? 3 : name == "lstrip" ? 1 : 2));
      });
    if (name == "replace")
      return method([s](Evaluator& ev, CallArgs& a) {
        Bound b = bind_method("replace", a, {"old", "new", "count"});
        std::string r = str_replace(s, need_str(b[0], "replace"), need_str(b[1], "replace"), opt_i(b[2], -1),
                                    ev.limits().max_output_bytes);
        ev.check_size(r.size());
        return Value::string(std::move(r));
      });
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" || name == "casefold")
      return method([s, name](Evaluator&, CallArgs& a) {
        bind_method(name, a, {});
        if (name == "upper") return Value::string(str_upper(s));
        if (name == "lower" || name == "casefold") return Value::string(str_lower(s));
        if (name == "title") return Value::string(str_title(s));
        if (name == "capitalize") return Value::string(str_capitalize(s));
        std::string o;
        for (size_t i = 0; i < s.size();) {
          const char32_t c = utf8::next(s, i);
          utf8::append(o, utf8::to_upper(c) != c ? utf8::to_upper(c) : utf8::to_lower(c));
        }
        return Value::string(o);
      });
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex")
      return method([s, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"sub", "start", "end"});
        const int64_t r = find_cp(s, need_str(b[0], name), b[1], b[2], name[0] == 'r');
        if (r < 0 && (name == "index" || name == "rindex")) fail("substring not found");
        return Value::integer(r);
      });
    if (name == "count")
      return method([s](Evaluator&, CallArgs& a) {
        Bound b = bind_method("count", a, {"sub"});
        const std::string& sub = need_str(b[0], "count");
        if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8::length(s)) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      });
    if (name == "join")
      return method([s](Evaluator& ev, CallArgs& a) {
        Bound b = bind_method("join", a, {"iterable"});
        if (!b[0]) fail("join() takes exactly one argument (0 given)");
        std::string o;
        bool first = true;
        for (const auto& it : iterate(*b[0])) {
          if (it.kind != Kind::String) fail("sequence item: expected str instance, " + type_name(it) + " found");
          if (!first) o += s;
          first = false;
          o += it.s;
          if (o.size() > ev.limits().max_output_bytes) ev.check_size(o.size());
        }
        ev.check_size(o.size());
        return Value::string(std::move(o));
      });
    if (name == "format") return method([s](Evaluator& ev, CallArgs& a) { return Value::string(str_format(ev, s, a)); });
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
        name == "islower" || name == "isnumeric" || name == "isdecimal")
      return method([s, name](Evaluator&, CallArgs& a) {
        bind_method(name, a, {});
        std::vector<char32_t> cps = utf8::decode(s);
        if (cps.empty()) return Value::boolean(false);
        if (name == "isupper" || name == "islower") {
          bool cased = false;
          for (char32_t c : cps) {
            if (!utf8::is_cased(c)) continue;
            cased = true;
            if (name == "isupper" ? utf8::to_upper(c) != c : utf8::to_lower(c) != c) return Value::boolean(false);
          }
          return Value::boolean(cased);
        }
        for (char32_t c : cps) {
          const bool ok = name == "isalpha" ? utf8::is_alpha(c)
                          : name == "isspace" ? utf8::is_space(c)
                          : name == "isalnum" ? (utf8::is_alpha(c) || utf8::is_digit(c))
                                              : utf8::is_digit(c);
          if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
      });
    if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust")
      return method([s, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"width", "fillchar"});
        const int64_t w = std::min<int64_t>(opt_i(b[0], 0), 1 << 20);
        const int64_t len = static_cast<int64_t>(utf8::length(s));
        if (w <= len) return Value::string(s);
        const std::string fill = b[1] && b[1]->kind == Kind::String ? b[1]->s : " ";
        const size_t pad = static_cast<size_t>(w - len);
        auto rep = [&](size_t n) {
          std::string o;
          for (size_t k = 0; k < n; ++k) o += fill;
          return o;
        };
        if (name == "zfill") {
          if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::string(s.substr(0, 1) + std::string(pad, '0') + s.substr(1));
          return Value::string(std::string(pad, '0') + s);
        }
        if (name == "ljust") return Value::string(s + rep(pad));
        if (name == "rjust") return Value::string(rep(pad) + s);
        const size_t left = pad / 2 + (pad & static_cast<size_t>(w) & 1);
        return Value::string(rep(left) + s + rep(pad - left));
      });
    if (name == "partition" || name == "rpartition")
      return method([s, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"sep"});
        const std::string& sep = need_str(b[0], name);
        if (sep.empty()) fail("empty separator");
        const size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (p == std::string::npos)
          return name == "partition" ? Value::list({Value::string(s), Value::string(""), Value::string("")}, ListTag::Tuple)
                                     : Value::list({Value::string(""), Value::string(""), Value::string(s)}, ListTag::Tuple);
        return Value::list({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))}, ListTag::Tuple);
      });
    return Value::undefined();
  }
  if (self.kind == Kind::Dict) {
    const Value d = self;
    if (name == "get")
      return method([d](Evaluator&, CallArgs& a) {
        Bound b = bind_method("get", a, {"key", "default"});
        if (!b[0]) fail("get expected at least 1 argument, got 0");
        if (b[0]->kind == Kind::List && b[0]->arr->tag != ListTag::Tuple) fail("unhashable type: 'list'");
        if (b[0]->kind == Kind::Dict) fail("unhashable type: 'dict'");
        const Value* v = d.obj->find(*b[0]);
        return v ? *v : (b[1] ? *b[1] : Value::none());
      });
    if (name == "items" || name == "keys" || name == "values")
      return method([d, name](Evaluator& ev, CallArgs& a) {
        bind_method(name, a, {});
        std::vector<Value> out;
        for (const auto& kv : d.obj->items)
          out.push_back(name == "keys" ? kv.first : name == "values" ? kv.second : Value::list({kv.first, kv.second}, ListTag::Tuple));
        ev.charge(out.size());
        return Value::list(std::move(out), name == "keys" ? ListTag::Keys : name == "values" ? ListTag::Values : ListTag::Items);
      });
    if (name == "copy")
      return method([d](Evaluator&, CallArgs& a) {
        bind_method("copy", a, {});
        auto o = std::make_shared<Object>(*d.obj);
        return Value::dict(o);
      });
    if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
      return unsafe(name, "dict");
    return Value::undefined();
  }
  if (self.kind == Kind::List) {
    const Value l = self;
    if (name == "count" || name == "index")
      return method([l, name](Evaluator&, CallArgs& a) {
        Bound b = bind_method(name, a, {"value"});
        if (!b[0]) fail(name + "() takes exactly one argument (0 given)");
        int64_t n = 0;
        for (size_t k = 0; k < l.arr->items.size(); ++k) {
          if (!equals(l.arr->items[k], *b[0])) continue;
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
        if (name == "index") fail(repr(*b[0]) + " is not in list");
        return Value::integer(n);
      });
    if (name == "copy" && l.arr->tag == ListTag::List)
      return method([l](Evaluator&, CallArgs& a) {
        bind_method("copy", a, {});
        return Value::list(l.arr->items);
      });
    if (l.arr->tag == ListTag::List && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                        name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
      return unsafe(name, "list");
    return Value::undefined();
  }
  return Value::undefined();
}

}  // namespace kiln::tmpl
