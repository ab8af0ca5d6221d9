#include "qwen3_coder_tool_parser.hpp"

#include <kiln/json_escape.hpp>

#include "tag_scan.hpp"

namespace qwen3_coder {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers
namespace {

constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kToolCallEnd = "</tool_call>";
constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParam = "<parameter=";
constexpr std::string_view kParamEnd = "</parameter>";
constexpr size_t kMaxName = 256;  // a function or parameter name longer than this is not a tag
constexpr size_t npos = std::string_view::npos;

enum class Header { kValid, kInvalid, kNeedMore };

/**
 * Looks at `<tool_call>\n<function=NAME>` (or a bare `<function=NAME>`) at the start of `s`. Names
 * with whitespace, quotes, braces or angle brackets are template junk (`<function={{ tc.name }}>`)
 * and make the header invalid, so the text stays content.
 */
Header parse_header(std::string_view s, bool eof, size_t* len, std::string_view* name) {
  size_t p = kFunction.size();
  if (s.substr(0, kToolCall.size()) == kToolCall) {
    p = kToolCall.size();
    while (p < s.size() && is_space(s[p])) ++p;
    Match m = match_at(s.substr(p), kFunction);
    if (m == Match::kNo) return Header::kInvalid;
    if (m == Match::kPartial) return eof ? Header::kInvalid : Header::kNeedMore;
    p += kFunction.size();
  }
  size_t gt = s.find('>', p);
  std::string_view raw = s.substr(p, gt == npos ? npos : gt - p);
  if (raw.find('\n') != npos || raw.size() > kMaxName) return Header::kInvalid;
  if (gt == npos) return eof ? Header::kInvalid : Header::kNeedMore;
  std::string_view n = trim(raw);
  if (n.empty() || n.find_first_of(" \t\r\n{}<>\"'`") != npos) return Header::kInvalid;
  *len = gt + 1;
  *name = n;
  return Header::kValid;
}

/** What a '<' inside a parameter value turned out to be. */
struct Classified {
  enum Kind { kLiteral, kTerminator, kNeedMore } kind;
  size_t len;  ///< kLiteral: bytes to skip; kTerminator: bytes of the tag consumed with the value
};

}  // namespace

ToolParser::ToolParser(const kiln::ParserOptions& options) : schemas_(options.tools_json) {}

void ToolParser::feed(std::string_view delta, kiln::EventSink& out) {
  buf_.append(delta);
  run(false, out);
}

void ToolParser::finish(kiln::EventSink& out) {
  run(true, out);
  if (state_ == State::kFunction || state_ == State::kValue) end_call(out);  // auto-close at end of stream
  state_ = State::kText;
}

void ToolParser::run(bool eof, kiln::EventSink& out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kText: progressed = step_text(eof, out); break;
      case State::kFunction: progressed = step_function(eof, out); break;
      case State::kValue: progressed = step_value(eof, out); break;
      case State::kAfterFunction: progressed = step_after_function(eof); break;
    }
    if (!progressed) break;
  }
  buf_.erase(0, pos_);  // offsets inside the current value are relative to pos_, so they stay valid
  pos_ = 0;
}

void ToolParser::content(std::string_view text, kiln::EventSink& out) {
  out.content(text);
  pos_ += text.size();
}

bool ToolParser::step_text(bool eof, kiln::EventSink& out) {
  std::string_view s = rest();
  if (after_call_) {  // whitespace after a call is dropped when nothing but whitespace follows
    size_t n = 0;
    while (n < s.size() && n <= kMaxHeldSpace && is_space(s[n])) ++n;
    if (n == s.size() && n <= kMaxHeldSpace) {
      if (eof) pos_ += n;
      return false;
    }
    after_call_ = false;  // more than whitespace (or a long run of it) follows: it is text
  }
  if (s.empty()) return false;
  std::string_view tag;
  bool partial = false;
  size_t c = find_tag(s, 0, {kToolCall, kFunction}, &tag, &partial);
  // Whitespace right before a call belongs to the template (`\n\n<tool_call>`), so trailing
  // whitespace is held back until we know what follows it.
  auto before = [&](size_t end) { return s.substr(0, end - trailing_space(s.substr(0, end))); };
  if (c == npos) {
    content(eof ? s : before(s.size()), out);
    return false;
  }
  if (partial) {
    content(eof ? s : before(c), out);
    return false;
  }
  size_t len = 0;
  std::string_view name;
  switch (parse_header(s.substr(c), eof, &len, &name)) {
    case Header::kNeedMore: content(before(c), out); return false;
    case Header::kInvalid: content(s.substr(0, c + tag.size()), out); return true;  // degrade to content
    case Header::kValid: break;
  }
  out.content(before(c));  // the whitespace between it and the call is dropped
  std::string fn(name);
  pos_ += c + len;
  params_ = schemas_.parameters(fn);
  n_params_ = 0;
  out.tool_call_start(calls_, "", fn);  // id left empty: the host assigns call ids
  out.tool_call_arguments(calls_, "{");
  state_ = State::kFunction;
  return true;
}

bool ToolParser::step_function(bool eof, kiln::EventSink& out) {
  std::string_view s = rest();
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  pos_ += n;
  s.remove_prefix(n);
  if (s.empty()) return false;
  if (match_at(s, kParam) == Match::kFull) {
    size_t gt = s.find('>', kParam.size());
    std::string_view raw = s.substr(kParam.size(), gt == npos ? npos : gt - kParam.size());
    bool junk = raw.find('\n') != npos || raw.size() > kMaxName || (gt == npos && eof);
    if (!junk && gt == npos) return false;
    std::string_view key = trim(raw);
    if (junk || key.empty()) {
      pos_ += kParam.size();  // not a parameter tag: skipped like other text between parameters
      return true;
    }
    std::string k(key);
    pos_ += gt + 1;
    begin_value(std::move(k), out);
    return true;
  }
  if (match_at(s, kFunctionEnd) == Match::kFull) {
    pos_ += kFunctionEnd.size();
    end_call(out);
    state_ = State::kAfterFunction;
    return true;
  }
  if (match_at(s, kToolCallEnd) == Match::kFull) {
    pos_ += kToolCallEnd.size();
    end_call(out);
    return true;
  }
  if (match_at(s, kToolCall) == Match::kFull || match_at(s, kFunction) == Match::kFull) {
    end_call(out);  // a new call began before this one was closed
    return true;
  }
  if (!eof)
    for (std::string_view t : {kParam, kFunctionEnd, kToolCallEnd, kToolCall, kFunction})
      if (match_at(s, t) == Match::kPartial) return false;
  // Text between parameters is not part of any value: skip it up to the next tag.
  size_t next = s.find('<', 1);
  pos_ += next == npos ? s.size() : next;
  return true;
}

bool ToolParser::step_after_function(bool eof) {
  std::string_view s = rest();
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  if (n == s.size() && !eof) return false;
  Match m = match_at(s.substr(n), kToolCallEnd);
  if (m == Match::kPartial && !eof) return false;
  if (m == Match::kFull) pos_ += n + kToolCallEnd.size();
  state_ = State::kText;  // a missing </tool_call> is tolerated
  after_call_ = true;
  return true;
}

void ToolParser::begin_value(std::string key, kiln::EventSink& out) {
  key_ = std::move(key);
  type_ = resolve_type(ToolSchemas::property(params_, key_));
  streaming_ = type_.plain_string();
  value_start_ = true;
  emitted_ = scan_ = 0;
  depth_ = 0;
  state_ = State::kValue;
  if (streaming_) {  // `"key": "` now, the text as it arrives, `"` at the end
    frag_.clear();
    if (n_params_) frag_ += ", ";
    kiln::append_json_string(frag_, key_);
    frag_ += ": \"";
    out.tool_call_arguments(calls_, frag_);
  }
}

bool ToolParser::step_value(bool eof, kiln::EventSink& out) {
  std::string_view s = rest();
  if (value_start_) {  // VALUE is written between one leading and one trailing newline
    if (s.empty() && !eof) return false;
    if (!s.empty() && s[0] == '\n') {
      ++pos_;
      s.remove_prefix(1);
    }
    value_start_ = false;
  }
  auto stream_to = [&](size_t limit) {
    if (!streaming_) return;
    if (limit > emitted_ && s[limit - 1] == '\n') --limit;  // may be the delimiter newline
    if (limit <= emitted_) return;
    frag_.clear();
    kiln::append_json_escaped(frag_, s.substr(emitted_, limit - emitted_));
    out.tool_call_arguments(calls_, frag_);
    emitted_ = limit;
  };
  // Which tags end a value. `</parameter>` only counts when followed by structure (so source code
  // that contains the literal tag survives); the lenient forms cover a missing </parameter>.
  auto classify = [&](size_t i) -> Classified {
    std::string_view t = s.substr(i);
    auto follows = [&](size_t j, std::initializer_list<std::string_view> tags) -> int {
      while (j < t.size() && is_space(t[j])) ++j;
      if (j == t.size()) return eof ? 1 : -1;
      for (std::string_view tag : tags) {
        Match m = match_at(t.substr(j), tag);
        if (m == Match::kFull) return 1;
        if (m == Match::kPartial) return eof ? 1 : -1;
      }
      return 0;
    };
    auto decide = [](int f, size_t consume, size_t literal) {
      if (f > 0) return Classified{Classified::kTerminator, consume};
      if (f < 0) return Classified{Classified::kNeedMore, 0};
      return Classified{Classified::kLiteral, literal};
    };
    if (match_at(t, kFunction) == Match::kFull) {  // a literal call example inside the value
      ++depth_;
      return {Classified::kLiteral, kFunction.size()};
    }
    if (match_at(t, kFunctionEnd) == Match::kFull) {
      if (depth_ > 0) {
        --depth_;
        return {Classified::kLiteral, kFunctionEnd.size()};
      }
      return decide(follows(kFunctionEnd.size(), {kToolCallEnd, kToolCall}), 0, kFunctionEnd.size());
    }
    if (match_at(t, kParamEnd) == Match::kFull) {
      if (depth_ > 0) return {Classified::kLiteral, kParamEnd.size()};
      return decide(follows(kParamEnd.size(), {kParam, kFunctionEnd, kToolCallEnd, kToolCall}), kParamEnd.size(),
                    kParamEnd.size());
    }
    if (match_at(t, kParam) == Match::kFull) {
      bool line_start = i == 0 || s[i - 1] == '\n';
      if (depth_ == 0 && line_start) return {Classified::kTerminator, 0};
      return {Classified::kLiteral, kParam.size()};
    }
    if (match_at(t, kToolCallEnd) == Match::kFull) {
      if (depth_ > 0) return {Classified::kLiteral, kToolCallEnd.size()};
      return decide(follows(kToolCallEnd.size(), {kToolCall}), 0, kToolCallEnd.size());
    }
    if (!eof)
      for (std::string_view tag : {kFunction, kFunctionEnd, kParamEnd, kParam, kToolCallEnd})
        if (match_at(t, tag) == Match::kPartial) return {Classified::kNeedMore, 0};
    return {Classified::kLiteral, 1};
  };
  for (size_t i = s.find('<', scan_); i != npos; i = s.find('<', i)) {
    Classified c = classify(i);
    if (c.kind == Classified::kNeedMore) {
      stream_to(i);
      return false;
    }
    if (c.kind == Classified::kTerminator) {
      end_value(i, out);
      pos_ += i + c.len;
      state_ = State::kFunction;
      return true;
    }
    i += c.len;
    scan_ = i;
  }
  scan_ = s.size();
  if (eof) {  // unterminated value at end of stream: it runs to the end
    end_value(s.size(), out);
    pos_ += s.size();
    state_ = State::kFunction;
    return true;
  }
  stream_to(s.size());
  return false;
}

void ToolParser::end_value(size_t value_len, kiln::EventSink& out) {
  std::string_view v = rest().substr(0, value_len);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  frag_.clear();
  if (streaming_) {
    if (emitted_ < v.size()) kiln::append_json_escaped(frag_, v.substr(emitted_));
    frag_ += '"';
  } else {
    if (n_params_) frag_ += ", ";
    kiln::append_json_string(frag_, key_);
    frag_ += ": ";
    frag_ += coerce(v, type_);
  }
  out.tool_call_arguments(calls_, frag_);
  ++n_params_;
}

void ToolParser::end_call(kiln::EventSink& out) {
  out.tool_call_arguments(calls_, "}");
  ++calls_;
  state_ = State::kText;
  after_call_ = true;
}

}  // namespace qwen3_coder
