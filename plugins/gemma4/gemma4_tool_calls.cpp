#include "gemma4_tool_calls.hpp"

#include <kiln/json_escape.hpp>

#include "tag_scan.hpp"

namespace gemma4 {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers
namespace {

constexpr std::string_view kOpen = "<|tool_call>";
constexpr std::string_view kOpenDrift = "<|tool_call|>";  // a drifted opener some checkpoints emit
constexpr std::string_view kClose = "<tool_call|>";
constexpr std::string_view kStop = "<|tool_response>";     // stop token after calls; never content
constexpr std::string_view kQuote = "<|\"|>";              // Gemma's string delimiter token
constexpr int kMaxDepth = 64;
constexpr size_t npos = std::string_view::npos;

/**
 * Reads Gemma's JSON-like argument syntax and writes JSON text, typing each value by its schema.
 * Lenient where models are known to drift (models/gemma4.md §7.3): a missing opening `<|"|>`,
 * strings written as JSON "..." or Python '...', keys wrapped in `<|"|>`, a missing `{` or `}`,
 * trailing commas. Anything else it cannot read makes the whole call fail (degrades to content).
 */
class BodyReader {
 public:
  explicit BodyReader(std::string_view s, size_t p = 0) : s_(s), p_(p) {}
  size_t pos() const { return p_; }
  bool at_end() {
    ws();
    return p_ >= s_.size();
  }
  char peek() {
    ws();
    return p_ < s_.size() ? s_[p_] : '\0';
  }
  void skip() { ++p_; }

  /** A dict; `braced` false reads `k:v,...` with the `{` missing. Unclosed at the end is closed. */
  bool dict(const Json* schema, std::string& out, bool braced, int depth) {
    if (depth > kMaxDepth) return false;
    if (braced) ++p_;
    out += '{';
    bool first = true;
    for (;;) {
      ws();
      if (p_ >= s_.size()) break;
      char c = s_[p_];
      if (c == '}') {
        ++p_;
        break;
      }
      if (c == ',') {
        ++p_;
        continue;
      }
      if (!braced && c == ')') break;
      std::string key;
      if (!read_key(&key)) return false;
      ws();
      if (p_ >= s_.size() || s_[p_] != ':') return false;
      ++p_;
      if (!first) out += ", ";
      first = false;
      kiln::append_json_string(out, key);
      out += ": ";
      if (!value(resolve_type(ToolSchemas::property(schema, key)), out, depth + 1)) return false;
    }
    out += '}';
    return true;
  }

 private:
  void ws() {
    while (p_ < s_.size() && is_space(s_[p_])) ++p_;
  }
  bool starts(std::string_view t) const { return s_.substr(p_, t.size()) == t; }

  bool read_key(std::string* key) {
    if (starts(kQuote)) {
      size_t e = s_.find(kQuote, p_ + kQuote.size());
      if (e == npos) return false;
      *key = std::string(trim(s_.substr(p_ + kQuote.size(), e - p_ - kQuote.size())));
      p_ = e + kQuote.size();
    } else if (s_[p_] == '"' || s_[p_] == '\'') {
      if (!quoted(key)) return false;
    } else {
      size_t e = s_.find_first_of(":{}[],", p_);
      if (e == npos || s_[e] != ':') return false;
      *key = std::string(trim(s_.substr(p_, e - p_)));
      p_ = e;
    }
    return !key->empty();
  }

  /** A "..." (JSON escapes) or '...' (Python escapes) string. */
  bool quoted(std::string* text) {
    char q = s_[p_];
    size_t e = p_ + 1;
    while (e < s_.size() && s_[e] != q) e += s_[e] == '\\' ? 2 : 1;
    if (e >= s_.size()) return false;
    std::string_view lit = s_.substr(p_, e + 1 - p_);
    p_ = e + 1;
    if (q == '"') {
      Json j = Json::parse(lit, nullptr, false);
      if (j.is_string()) {
        *text = j.get<std::string>();
        return true;
      }
    }
    auto py = parse_python_literal(lit);
    if (py && py->is_string()) {
      *text = py->get<std::string>();
      return true;
    }
    *text = std::string(lit.substr(1, lit.size() - 2));
    return true;
  }

  /** A delimited string keeps its type unless the schema asks for something a string cannot be. */
  static void typed_string(std::string_view text, const TypeInfo& t, std::string& out) {
    if (t.kinds == 0 || (t.kinds & kString))
      kiln::append_json_string(out, text);
    else
      out += coerce(text, t);
  }

  /** A bare token: typed by the schema, or read as a JSON/Python literal when there is none. */
  static void typed_bare(std::string_view tok, const TypeInfo& t, std::string& out) {
    if (t.kinds != 0) {
      out += coerce(tok, t);
      return;
    }
    if (tok == "true" || tok == "True") {
      out += "true";
    } else if (tok == "false" || tok == "False") {
      out += "false";
    } else if (tok == "null" || tok == "None") {
      out += "null";
    } else if (is_json_number(tok)) {
      out += coerce(tok, TypeInfo{kInteger | kNumber, nullptr});  // keeps its spelling unless infinite
    } else {
      kiln::append_json_string(out, tok);
    }
  }

  bool list(const TypeInfo& t, std::string& out, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    out += '[';
    TypeInfo item = resolve_type(ToolSchemas::items(t.schema));
    bool first = true;
    for (;;) {
      ws();
      if (p_ >= s_.size()) break;
      if (s_[p_] == ']') {
        ++p_;
        break;
      }
      if (s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (!first) out += ", ";
      first = false;
      if (!value(item, out, depth + 1)) return false;
    }
    out += ']';
    return true;
  }

  bool value(const TypeInfo& t, std::string& out, int depth) {
    ws();
    if (p_ >= s_.size()) return false;
    if (starts(kQuote)) {
      size_t b = p_ + kQuote.size(), e = s_.find(kQuote, b);
      std::string_view text = s_.substr(b, e == npos ? npos : e - b);  // unclosed: runs to the end
      p_ = e == npos ? s_.size() : e + kQuote.size();
      typed_string(text, t, out);
      return true;
    }
    char c = s_[p_];
    if (c == '{') {
      if ((t.kinds & kObject) || t.kinds == 0) return dict(t.schema, out, true, depth);
      std::string obj;  // an object where the schema wants something else: keep it, as JSON
      if (!dict(nullptr, obj, true, depth)) return false;
      out += obj;
      return true;
    }
    if (c == '[') return list(t, out, depth);
    if (c == '"' || c == '\'') {
      std::string text;
      if (!quoted(&text)) return false;
      typed_string(text, t, out);
      return true;
    }
    size_t b = p_;
    size_t e = s_.find_first_of(",}])", b);
    size_t q = s_.find(kQuote, b);
    if (q != npos && (e == npos || q < e)) {  // `key:text<|"|>`: the opening delimiter is missing
      p_ = q + kQuote.size();
      typed_string(s_.substr(b, q - b), t, out);
      return true;
    }
    p_ = e == npos ? s_.size() : e;
    std::string_view tok = trim(s_.substr(b, p_ - b));
    if (tok.empty()) return false;
    typed_bare(tok, t, out);
    return true;
  }

  std::string_view s_;
  size_t p_;
};

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

}  // namespace

ToolParser::ToolParser(const kiln::ParserOptions& options) : schemas_(options.tools_json) {}

void ToolParser::feed(std::string_view delta, kiln::EventSink& out) {
  buf_.append(delta);
  run(false, out);
}

void ToolParser::finish(kiln::EventSink& out) { run(true, out); }

void ToolParser::run(bool eof, kiln::EventSink& out) {
  while (in_call_ ? step_call(eof, out) : step_text(eof, out)) {
  }
  buf_.erase(0, pos_);
  pos_ = 0;
}

bool ToolParser::step_text(bool eof, kiln::EventSink& out) {
  std::string_view s = rest();
  if (after_call_) {
    size_t n = 0;
    while (n < s.size() && n <= kMaxHeldSpace && is_space(s[n])) ++n;
    if (n == s.size() && n <= kMaxHeldSpace) {
      if (eof) pos_ += n;
      return false;
    }
    after_call_ = false;  // more than whitespace (or a long run of it) follows: it is text
  }
  if (s.empty()) return false;
  auto emit = [&](std::string_view text) {
    out.content(text);
    pos_ += text.size();
  };
  auto before = [&](size_t end) { return s.substr(0, end - trailing_space(s.substr(0, end))); };
  std::string_view tag;
  bool partial = false;
  size_t c = find_tag(s, 0, {kOpen, kOpenDrift, kStop}, &tag, &partial);
  if (c == npos) {
    emit(eof ? s : before(s.size()));
    return false;
  }
  if (partial) {
    emit(eof ? s : before(c));
    return false;
  }
  if (tag == kStop) {  // the stop token is not content; the text before it is
    emit(s.substr(0, c));
    pos_ += tag.size();
    return true;
  }
  std::string_view text = before(c);
  out.content(text);
  ws_before_ = std::string(s.substr(text.size(), c - text.size()));  // dropped if the call is read
  pos_ += c + tag.size();
  opener_ = tag;
  in_call_ = true;
  scan_ = 0;
  return true;
}

bool ToolParser::step_call(bool eof, kiln::EventSink& out) {
  std::string_view s = rest();
  std::string_view tag;
  bool partial = false;
  size_t e = find_tag(s, scan_, {kClose, kOpen, kOpenDrift}, &tag, &partial);
  if (e != npos && partial && !eof) {
    scan_ = e;
    return false;
  }
  if (e == npos || partial) {
    if (!eof) {
      scan_ = s.size();
      return false;
    }
    e = s.size();  // unclosed at end of stream: read what there is
    tag = {};
  }
  std::string_view body = s.substr(0, e);
  size_t consumed = e + (tag == kClose ? kClose.size() : 0);  // a new opener is left for the next call
  std::string name, arguments;
  if (convert(body, &name, &arguments)) {
    out.tool_call_start(calls_, "", name);  // id left empty: the host assigns call ids
    out.tool_call_arguments(calls_, arguments);
    ++calls_;
    after_call_ = true;
  } else {
    std::string raw = ws_before_;  // not a call: everything stays content, byte for byte
    raw += opener_;
    raw += s.substr(0, consumed);
    out.content(raw);
  }
  pos_ += consumed;
  in_call_ = false;
  return true;
}

bool ToolParser::convert(std::string_view body, std::string* name, std::string* arguments) const {
  size_t p = 0;
  while (p < body.size() && is_space(body[p])) ++p;
  if (body.substr(p, 5) == "call:") {
    p += 5;
  } else if (p < body.size() && body[p] == ':') {
    ++p;  // `<|tool_call>:name{...}`, with `call` missing
  }
  size_t b = p;
  while (p < body.size() && name_char(body[p])) ++p;
  *name = std::string(body.substr(b, p - b));
  if (name->empty()) return false;
  BodyReader r(body, p);
  bool paren = r.peek() == '(';  // drifted `call:name({...})`
  if (paren) r.skip();
  arguments->clear();
  if (r.at_end()) {
    *arguments = "{}";
  } else {
    if (!r.dict(schemas_.parameters(*name), *arguments, r.peek() == '{', 0)) return false;
  }
  if (paren && r.peek() == ')') r.skip();
  while (r.peek() == '}') r.skip();  // a stray extra closing brace
  return r.at_end();
}

}  // namespace gemma4
