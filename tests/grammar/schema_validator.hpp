// Test oracle: a JSON Schema (draft 2020-12) validator for the subset the grammar engine supports,
// written independently of engine/grammar/json_schema.cpp so that what the engine generates can be
// checked against something that does not share its bugs. It works on parsed values (nlohmann::json)
// where the engine works on text, so it checks meaning, not spelling.
//
// Keywords: type (unions; "integer" includes integer-valued numbers such as 1.0), enum, const
// (JSON equality: 1 == 1.0), properties / required / additionalProperties, items / prefixItems,
// minItems / maxItems, anyOf, oneOf (exactly one), allOf, $ref ("#" and "#/..." JSON pointers into
// the root, recursion included) / $defs, pattern (std::wregex ECMAScript over code points, with \d
// \w \s spelled out as ECMA-262 defines them, since the C++ locale's idea differs), minLength /
// maxLength (code points), format (date-time, date, time, uuid, email, ipv4, ipv6: asserted),
// minimum / maximum / exclusiveMinimum / exclusiveMaximum, boolean schemas. Annotations are
// ignored. Anything else throws Unsupported (the JSON Schema Test Suite run skips such groups), so
// a schema is never silently half-checked.
//
// Numbers are compared as doubles: exact for everything short of ~16 significant digits, which is
// what tests feed it; the engine compares decimal texts exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::grammar::test {

class SchemaValidator {
 public:
  using Json = nlohmann::json;

  struct Unsupported : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  struct Options {
    /** OpenAI strict mode as the engine documents it: an object schema with "properties" and no
     *  "additionalProperties" admits no other keys. false: plain JSON Schema (any other key). */
    bool strict = false;
  };

  /** Throws Unsupported for a keyword, format, $ref or pattern outside the subset. */
  SchemaValidator(Json schema, Options opts) : root_(std::move(schema)), opts_(opts) { scan(root_, 0); }
  explicit SchemaValidator(Json schema) : SchemaValidator(std::move(schema), Options{}) {}

  bool valid(const Json& instance) const { return check(root_, instance, 0, nullptr, ""); }
  /** Why `instance` is invalid ("" when it is valid): the first failing keyword and instance path. */
  std::string explain(const Json& instance) const {
    std::string why;
    return check(root_, instance, 0, &why, "") ? std::string() : why;
  }

  // --- formats (public: tests use them directly)

  static bool is_digits(std::string_view s) {
    for (char c : s)
      if (c < '0' || c > '9') return false;
    return !s.empty();
  }
  static int num(std::string_view s) {
    int v = 0;
    for (char c : s) v = v * 10 + (c - '0');
    return v;
  }
  static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

  static bool valid_date(std::string_view s) {
    if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
    if (!is_digits(s.substr(0, 4)) || !is_digits(s.substr(5, 2)) || !is_digits(s.substr(8, 2))) return false;
    const int y = num(s.substr(0, 4)), m = num(s.substr(5, 2)), d = num(s.substr(8, 2));
    if (m < 1 || m > 12 || d < 1) return false;
    static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= kDays[m - 1] + (m == 2 && leap ? 1 : 0);
  }

  // RFC 3339 full-time: a leap second (:60) only where the time is 23:59 in UTC.
  static bool valid_time(std::string_view s) {
    if (s.size() < 9 || s[2] != ':' || s[5] != ':') return false;
    if (!is_digits(s.substr(0, 2)) || !is_digits(s.substr(3, 2)) || !is_digits(s.substr(6, 2))) return false;
    const int h = num(s.substr(0, 2)), m = num(s.substr(3, 2)), sec = num(s.substr(6, 2));
    if (h > 23 || m > 59 || sec > 60) return false;
    size_t i = 8;
    if (i < s.size() && s[i] == '.') {
      size_t j = i + 1;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      if (j == i + 1) return false;
      i = j;
    }
    int offset = 0;  // minutes east of UTC
    const std::string_view z = s.substr(i);
    if (z == "Z" || z == "z") {
    } else {
      if (z.size() != 6 || (z[0] != '+' && z[0] != '-') || z[3] != ':' || !is_digits(z.substr(1, 2)) ||
          !is_digits(z.substr(4, 2)))
        return false;
      const int oh = num(z.substr(1, 2)), om = num(z.substr(4, 2));
      if (oh > 23 || om > 59) return false;
      offset = (z[0] == '+' ? 1 : -1) * (oh * 60 + om);
    }
    if (sec == 60) {
      const int utc = ((h * 60 + m - offset) % 1440 + 1440) % 1440;
      if (utc != 23 * 60 + 59) return false;
    }
    return true;
  }

  static bool valid_date_time(std::string_view s) {
    return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  }

  static bool valid_uuid(std::string_view s) {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? s[i] != '-' : !is_hex(s[i])) return false;
    }
    return true;
  }

  static bool valid_ipv4(std::string_view s) {
    int parts = 0;
    size_t i = 0;
    while (true) {
      size_t j = i;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      const std::string_view p = s.substr(i, j - i);
      if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0') || num(p) > 255) return false;
      ++parts;
      if (j == s.size()) break;
      if (s[j] != '.' || parts == 4) return false;
      i = j + 1;
    }
    return parts == 4;
  }

  static bool valid_ipv6(std::string_view s) {
    // Groups of one side of "::" (or of the whole address); `last` allows a dotted IPv4 tail.
    const auto groups = [](std::string_view part, bool last, int& count) {
      count = 0;
      if (part.empty()) return true;
      size_t i = 0;
      while (true) {
        const size_t j = std::min(part.find(':', i), part.size());
        const std::string_view g = part.substr(i, j - i);
        if (j == part.size() && last && g.find('.') != std::string_view::npos) {
          if (!valid_ipv4(g)) return false;
          count += 2;
          return true;
        }
        if (g.empty() || g.size() > 4) return false;
        for (char c : g)
          if (!is_hex(c)) return false;
        ++count;
        if (j == part.size()) return true;
        i = j + 1;
      }
    };
    const size_t dc = s.find("::");
    int a = 0, b = 0;
    if (dc == std::string_view::npos) return groups(s, true, a) && a == 8;
    const std::string_view head = s.substr(0, dc), tail = s.substr(dc + 2);
    if (tail.find("::") != std::string_view::npos) return false;
    return groups(head, false, a) && groups(tail, true, b) && a + b <= 7;
  }

  static bool valid_hostname(std::string_view s) {
    if (s.empty() || s.size() > 253) return false;
    size_t i = 0;
    while (true) {
      const size_t j = std::min(s.find('.', i), s.size());
      const std::string_view label = s.substr(i, j - i);
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
      for (char c : label)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) return false;
      if (j == s.size()) return true;
      i = j + 1;
    }
  }

  // RFC 3986, read by hand (not from the grammar's regular expressions): characters of a class,
  // or a %-escape of two hex digits.
  static bool uri_chars(std::string_view s, std::string_view extra) {
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '%') {
        if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2])) return false;
        i += 2;
      } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos ||
                   extra.find(c) != std::string_view::npos)) {
        return false;
      }
    }
    return true;
  }
  static bool valid_authority(std::string_view a) {
    if (const size_t at = a.find('@'); at != std::string_view::npos) {
      if (!uri_chars(a.substr(0, at), ":")) return false;
      a = a.substr(at + 1);
    }
    if (!a.empty() && a[0] == '[') {
      const size_t close = a.find(']');
      if (close == std::string_view::npos) return false;
      const std::string_view lit = a.substr(1, close - 1);
      const bool future = lit.size() > 1 && (lit[0] == 'v' || lit[0] == 'V') && lit.find('.') != std::string_view::npos;
      if (future) {
        const size_t dot = lit.find('.');
        for (char c : lit.substr(1, dot - 1))
          if (!is_hex(c)) return false;
        if (dot == 1 || dot + 1 == lit.size() || !uri_chars(lit.substr(dot + 1), ":") ||
            lit.substr(dot + 1).find('%') != std::string_view::npos)
          return false;
      } else if (!valid_ipv6(lit)) {
        return false;
      }
      a = a.substr(close + 1);
    } else {
      const size_t colon = a.find(':');
      if (!uri_chars(a.substr(0, colon), "")) return false;
      a = colon == std::string_view::npos ? std::string_view() : a.substr(colon);
    }
    if (a.empty()) return true;
    return a[0] == ':' && (a.size() == 1 || is_digits(a.substr(1)));
  }
  /** An absolute URI, or with `relative` any URI reference. */
  static bool valid_uri(std::string_view s, bool relative) {
    const size_t hash = s.find('#');
    if (hash != std::string_view::npos && !uri_chars(s.substr(hash + 1), ":@/?")) return false;
    s = s.substr(0, hash);
    const size_t q = s.find('?');
    if (q != std::string_view::npos && !uri_chars(s.substr(q + 1), ":@/?")) return false;
    s = s.substr(0, q);
    // A scheme: a letter, then letters, digits, '+', '-', '.', up to the first ':' before any '/'.
    const size_t colon = s.find(':'), slash = s.find('/');
    bool scheme = colon != std::string_view::npos && (slash == std::string_view::npos || colon < slash) && colon > 0 &&
                  std::isalpha(static_cast<unsigned char>(s[0]));
    for (size_t i = 1; scheme && i < colon; ++i)
      scheme = std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '+' || s[i] == '-' || s[i] == '.';
    if (!scheme && !relative) return false;
    if (scheme) {
      s = s.substr(colon + 1);
    } else if (colon != std::string_view::npos && (slash == std::string_view::npos || colon < slash)) {
      return false;  // a relative path's first segment has no ':'
    }
    if (s.substr(0, 2) == "//") {
      const size_t end = s.find('/', 2);
      if (!valid_authority(s.substr(2, end == std::string_view::npos ? std::string_view::npos : end - 2))) return false;
      return end == std::string_view::npos || uri_chars(s.substr(end), ":@/");
    }
    return uri_chars(s, ":@/");
  }
  static bool valid_duration(std::string_view s) {
    if (s.size() < 2 || s[0] != 'P') return false;
    const size_t t = s.find('T');
    const std::string_view date = s.substr(1, t == std::string_view::npos ? std::string_view::npos : t - 1);
    const std::string_view time = t == std::string_view::npos ? std::string_view() : s.substr(t + 1);
    if (t != std::string_view::npos && time.empty()) return false;
    // Each part: numbers with units, the units an unbroken run of `order`.
    const auto run = [&](std::string_view part, std::string_view order) {
      size_t next = std::string_view::npos;  // where in `order` the previous unit was
      for (size_t i = 0; i < part.size();) {
        size_t j = i;
        while (j < part.size() && part[j] >= '0' && part[j] <= '9') ++j;
        if (j == i || j == part.size()) return false;
        const size_t u = order.find(part[j]);
        if (u == std::string_view::npos || (next != std::string_view::npos && u != next + 1)) return false;
        next = u;
        i = j + 1;
      }
      return true;
    };
    if (date.size() >= 2 && date.back() == 'W')
      return t == std::string_view::npos && is_digits(date.substr(0, date.size() - 1));
    if (date.empty() && time.empty()) return false;
    return run(date, "YMD") && run(time, "HMS");
  }

  // RFC 5321 Mailbox: dot-atom or quoted-string local part; a hostname or an address literal.
  static bool valid_email(std::string_view s) {
    size_t at;
    if (!s.empty() && s[0] == '"') {
      size_t i = 1;
      for (; i < s.size() && s[i] != '"'; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '\\') {
          if (++i == s.size() || static_cast<unsigned char>(s[i]) < 32 || static_cast<unsigned char>(s[i]) > 126)
            return false;
        } else if (c < 32 || c > 126) {
          return false;
        }
      }
      if (i >= s.size() || i == 1) return false;
      at = i + 1;
    } else {
      static const std::string_view kAtext = "!#$%&'*+-/=?^_`{|}~";
      at = 0;
      bool after_dot = true;  // at the start or after '.': an atext character must come
      for (; at < s.size() && s[at] != '@'; ++at) {
        const char c = s[at];
        if (c == '.') {
          if (after_dot) return false;
          after_dot = true;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   kAtext.find(c) != std::string_view::npos) {
          after_dot = false;
        } else {
          return false;
        }
      }
      if (after_dot) return false;
    }
    if (at >= s.size() || s[at] != '@') return false;
    const std::string_view domain = s.substr(at + 1);
    if (!domain.empty() && domain.front() == '[') {
      if (domain.back() != ']') return false;
      const std::string_view lit = domain.substr(1, domain.size() - 2);
      if (lit.substr(0, 5) == "IPv6:") return valid_ipv6(lit.substr(5));
      return valid_ipv4(lit);
    }
    return valid_hostname(domain);
  }

  static bool known_format(const std::string& f) {
    return f == "date-time" || f == "date" || f == "time" || f == "duration" || f == "uuid" || f == "email" ||
           f == "ipv4" || f == "ipv6" || f == "uri" || f == "uri-reference";
  }

  static size_t code_points(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }

  /** JSON equality: numbers by value (1 == 1.0), objects regardless of key order. */
  static bool equal(const Json& a, const Json& b) {
    if (a.is_number() && b.is_number()) {
      if (a.is_number_integer() && b.is_number_integer()) {
        if (a.is_number_unsigned() != b.is_number_unsigned()) {
          const Json& s = a.is_number_unsigned() ? b : a;  // the signed one
          const Json& u = a.is_number_unsigned() ? a : b;
          return s.get<int64_t>() >= 0 && static_cast<uint64_t>(s.get<int64_t>()) == u.get<uint64_t>();
        }
        return a.is_number_unsigned() ? a.get<uint64_t>() == b.get<uint64_t>() : a.get<int64_t>() == b.get<int64_t>();
      }
      return a.get<double>() == b.get<double>();
    }
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!equal(a[i], b[i])) return false;
      return true;
    }
    if (a.is_object()) {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        auto jt = b.find(it.key());
        if (jt == b.end() || !equal(it.value(), *jt)) return false;
      }
      return true;
    }
    return a == b;
  }

  static bool is_integer(const Json& v) {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isinf(d) || std::floor(d) == d;  // beyond 2^53 every double is an integer
  }

 private:
  Json root_;
  Options opts_;
  std::unordered_map<std::string, std::wregex> regexes_;
  std::unordered_map<std::string, const Json*> refs_;

  static bool has_type(const Json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return is_integer(v);
    throw Unsupported("type '" + t + "'");
  }

  static std::string percent_decode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size() && is_hex(s[i + 1]) && is_hex(s[i + 2])) {
        out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  }

  const Json* resolve(const std::string& ref) const {
    if (ref.empty() || ref[0] != '#') throw Unsupported("non-local $ref '" + ref + "'");
    const std::string ptr = percent_decode(std::string_view(ref).substr(1));
    if (ptr.empty()) return &root_;
    try {
      return &root_.at(Json::json_pointer(ptr));
    } catch (const nlohmann::json::exception&) {
      throw Unsupported("unresolvable $ref '" + ref + "'");
    }
  }

  // Walks the schema as a schema (names under properties / $defs are not keywords), refusing what
  // is outside the subset and preparing regexes and $ref targets.
  void scan(const Json& s, int depth) {
    if (depth > 200) throw Unsupported("schema too deep");
    if (s.is_boolean()) return;
    if (!s.is_object()) throw Unsupported("schema is not an object or boolean");
    static const std::set<std::string> kLeaf = {
        "type",      "enum",    "const",   "required",         "minItems",         "maxItems",      "minLength",
        "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minProperties", "maxProperties"};
    static const std::set<std::string> kAnnotations = {"$schema",  "$comment",   "title",    "description", "default",
                                                       "examples", "deprecated", "readOnly", "writeOnly"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = it.value();
      if (kLeaf.count(k) || kAnnotations.count(k)) continue;
      if (k == "properties" || k == "$defs") {
        for (auto p = v.begin(); p != v.end(); ++p) scan(p.value(), depth + 1);
      } else if (k == "items" || k == "additionalProperties") {
        scan(v, depth + 1);
      } else if (k == "prefixItems" || k == "anyOf" || k == "oneOf" || k == "allOf") {
        if (!v.is_array()) throw Unsupported(k + " is not an array");
        for (const Json& e : v) scan(e, depth + 1);
      } else if (k == "$ref") {
        const std::string ref = v.get<std::string>();
        refs_[ref] = resolve(ref);
      } else if (k == "patternProperties") {
        for (auto p = v.begin(); p != v.end(); ++p) {
          try {
            regexes_.emplace(p.key(), std::wregex(ecma_classes(widen(p.key())), std::regex::ECMAScript));
          } catch (const std::regex_error&) {
            throw Unsupported("pattern '" + p.key() + "'");
          }
          scan(p.value(), depth + 1);
        }
      } else if (k == "pattern") {
        const std::string p = v.get<std::string>();
        try {
          regexes_.emplace(p, std::wregex(ecma_classes(widen(p)), std::regex::ECMAScript));
        } catch (const std::regex_error&) {
          throw Unsupported("pattern '" + p + "'");
        }
      } else if (k == "format") {
        static const std::set<std::string> kFormats = {"date-time", "date", "time", "duration", "uuid",
                                                       "email",     "ipv4", "ipv6", "uri",      "uri-reference"};
        // Formats JSON Schema does not define are annotations (never checked); defined ones the
        // engine does not implement put the group outside the subset.
        static const std::set<std::string> kDefinedUnchecked = {
            "hostname",     "idn-email",    "idn-hostname",          "iri",  "iri-reference",
            "uri-template", "json-pointer", "relative-json-pointer", "regex"};
        if (!kFormats.count(v.get<std::string>()) && kDefinedUnchecked.count(v.get<std::string>()))
          throw Unsupported("format '" + v.get<std::string>() + "'");
      } else {
        throw Unsupported("keyword '" + k + "'");
      }
    }
  }

  /** UTF-8 to code points (the input is valid UTF-8: it came from a JSON parser). */
  static std::wstring widen(std::string_view s) {
    std::wstring out;
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
      out += static_cast<wchar_t>(cp);
      i += static_cast<size_t>(n);
    }
    return out;
  }

  // \d \w \s and their negations as explicit classes: ECMA-262 (without the u flag) makes \d and \w
  // ASCII and \s the Unicode white space and line terminators; std::wregex would ask the locale.
  static std::wstring ecma_classes(const std::wstring& p) {
    static const std::wstring kD = L"0-9", kW = L"A-Za-z0-9_",
                              kS = L"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff";
    std::wstring out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
      const wchar_t c = p[i];
      if (c == L'\\' && i + 1 < p.size()) {
        const wchar_t e = p[++i];
        const std::wstring* set = (e == L'd' || e == L'D')   ? &kD
                                  : (e == L'w' || e == L'W') ? &kW
                                  : (e == L's' || e == L'S') ? &kS
                                                             : nullptr;
        const bool negated = e == L'D' || e == L'W' || e == L'S';
        if (!set || (in_class && negated)) {  // other escapes, and negations inside a class, stay
          out += c;
          out += e;
        } else if (in_class) {
          out += *set;
        } else {
          out += (negated ? L"[^" : L"[") + *set + L"]";
        }
        continue;
      }
      if (c == L'[' && !in_class) {
        in_class = true;
      } else if (c == L']' && in_class) {
        in_class = false;
      }
      out += c;
    }
    return out;
  }

  static bool fail(std::string* why, std::string_view path, const std::string& msg) {
    if (why && why->empty()) *why = std::string(path.empty() ? "/" : path) + ": " + msg;
    return false;
  }

  static bool below(const Json& v, const Json& bound, bool strict) {
    const double x = v.get<double>(), b = bound.get<double>();
    return strict ? x < b : x <= b;
  }

  bool check(const Json& s, const Json& v, int depth, std::string* why, const std::string& path) const {
    if (depth > 500) throw std::runtime_error("SchemaValidator: $ref recursion without progress");
    if (s.is_boolean()) return s.get<bool>() || fail(why, path, "false schema");
    bool ok = true;
    // Every keyword applies (a failing one sets `why` once and the rest are still evaluated: cheap
    // enough, and keeps the code flat).
    const auto need = [&](bool cond, const std::string& msg) {
      if (!cond) ok = fail(why, path, msg);
    };
    if (auto t = s.find("type"); t != s.end()) {
      bool any = false;
      if (t->is_string()) {
        any = has_type(v, t->get<std::string>());
      } else {
        for (const Json& e : *t) any = any || has_type(v, e.get<std::string>());
      }
      need(any, "type " + t->dump() + " vs " + v.dump());
    }
    if (auto e = s.find("enum"); e != s.end()) {
      bool any = false;
      for (const Json& c : *e) any = any || equal(c, v);
      need(any, "not in enum");
    }
    if (auto c = s.find("const"); c != s.end()) need(equal(*c, v), "not const " + c->dump());
    if (auto r = s.find("$ref"); r != s.end())
      need(check(*refs_.at(r->get<std::string>()), v, depth + 1, why, path), "$ref " + r->get<std::string>());
    if (auto a = s.find("allOf"); a != s.end())
      for (const Json& sub : *a) need(check(sub, v, depth + 1, why, path), "allOf");
    if (auto a = s.find("anyOf"); a != s.end()) {
      bool any = false;
      for (const Json& sub : *a) any = any || check(sub, v, depth + 1, nullptr, path);
      need(any, "no anyOf branch");
    }
    if (auto a = s.find("oneOf"); a != s.end()) {
      int n = 0;
      for (const Json& sub : *a) n += check(sub, v, depth + 1, nullptr, path);
      need(n == 1, "oneOf: " + std::to_string(n) + " branches");
    }
    if (v.is_number()) {
      if (auto b = s.find("minimum"); b != s.end()) need(!below(v, *b, true), "minimum " + b->dump());
      if (auto b = s.find("exclusiveMinimum"); b != s.end())
        need(!below(v, *b, false), "exclusiveMinimum " + b->dump());
      if (auto b = s.find("maximum"); b != s.end()) need(!below(*b, v, true), "maximum " + b->dump());
      if (auto b = s.find("exclusiveMaximum"); b != s.end())
        need(!below(*b, v, false), "exclusiveMaximum " + b->dump());
    }
    if (v.is_string()) {
      const std::string& str = v.get_ref<const std::string&>();
      const size_t len = code_points(str);
      if (auto b = s.find("minLength"); b != s.end()) need(len >= b->get<double>(), "minLength");
      if (auto b = s.find("maxLength"); b != s.end()) need(len <= b->get<double>(), "maxLength");
      if (auto p = s.find("pattern"); p != s.end())
        need(std::regex_search(widen(str), regexes_.at(p->get<std::string>())), "pattern " + p->get<std::string>());
      if (auto f = s.find("format"); f != s.end() && known_format(f->get<std::string>())) {
        const std::string& fmt = f->get_ref<const std::string&>();
        const bool good = fmt == "date-time"       ? valid_date_time(str)
                          : fmt == "date"          ? valid_date(str)
                          : fmt == "time"          ? valid_time(str)
                          : fmt == "uuid"          ? valid_uuid(str)
                          : fmt == "email"         ? valid_email(str)
                          : fmt == "ipv4"          ? valid_ipv4(str)
                          : fmt == "uri"           ? valid_uri(str, false)
                          : fmt == "uri-reference" ? valid_uri(str, true)
                          : fmt == "duration"      ? valid_duration(str)
                                                   : valid_ipv6(str);
        need(good, "format " + fmt);
      }
    }
    if (v.is_array()) {
      if (auto b = s.find("minItems"); b != s.end()) need(v.size() >= b->get<double>(), "minItems");
      if (auto b = s.find("maxItems"); b != s.end()) need(v.size() <= b->get<double>(), "maxItems");
      size_t first_free = 0;
      if (auto p = s.find("prefixItems"); p != s.end()) {
        for (size_t i = 0; i < p->size() && i < v.size(); ++i)
          need(check((*p)[i], v[i], depth + 1, why, path + "/" + std::to_string(i)), "prefixItems");
        first_free = p->size();
      }
      if (auto it = s.find("items"); it != s.end())
        for (size_t i = first_free; i < v.size(); ++i)
          need(check(*it, v[i], depth + 1, why, path + "/" + std::to_string(i)), "items");
    }
    if (v.is_object()) {
      if (auto b = s.find("minProperties"); b != s.end()) need(v.size() >= b->get<double>(), "minProperties");
      if (auto b = s.find("maxProperties"); b != s.end()) need(v.size() <= b->get<double>(), "maxProperties");
      if (auto r = s.find("required"); r != s.end())
        for (const Json& k : *r) need(v.contains(k.get<std::string>()), "required " + k.dump());
      const auto props = s.find("properties");
      const auto patterns = s.find("patternProperties");
      auto extra = s.find("additionalProperties");
      const bool closed = opts_.strict && (props != s.end() || patterns != s.end()) && extra == s.end();
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string sub = path + "/" + it.key();
        bool covered = false;
        if (props != s.end() && props->contains(it.key())) {
          need(check((*props)[it.key()], it.value(), depth + 1, why, sub), "properties");
          covered = true;
        }
        if (patterns != s.end())
          for (auto p = patterns->begin(); p != patterns->end(); ++p)
            if (std::regex_search(widen(it.key()), regexes_.at(p.key()))) {
              need(check(p.value(), it.value(), depth + 1, why, sub), "patternProperties " + p.key());
              covered = true;
            }
        if (covered) {
        } else if (closed) {
          need(false, "additional property '" + it.key() + "' (strict)");
        } else if (extra != s.end()) {
          need(check(*extra, it.value(), depth + 1, why, sub), "additionalProperties");
        }
      }
    }
    return ok;
  }
};

}  // namespace kiln::grammar::test
