#include "qwen3_reasoning_parser.hpp"

#include "tag_scan.hpp"

namespace qwen3_coder {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers
namespace {

constexpr std::string_view kThink = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCall = "<tool_call>";
constexpr size_t npos = std::string_view::npos;

size_t leading_space(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

}  // namespace

ReasoningParser::ReasoningParser(const kiln::ParserOptions& options) {
  std::string_view tail = options.prompt_tail;
  size_t open = tail.rfind(kThink), close = tail.rfind(kThinkEnd);
  if (open != npos && (close == npos || open > close)) {
    state_ = State::kReasoningStart;  // the prompt opened <think>: output starts inside reasoning
  } else if (!tail.empty() || options.thinking == 0) {
    state_ = State::kContentStart;  // the prompt closed it (`<think>\n\n</think>\n\n`) or thinking is off
    strip_leading_ = close != npos;
  } else {
    state_ = State::kReasoningStart;  // Qwen3.5 template default: thinking on, <think> force-opened
  }
}

void ReasoningParser::feed(std::string_view delta, kiln::EventSink& out) {
  buf_.append(delta);
  run(false, out);
}

void ReasoningParser::finish(kiln::EventSink& out) { run(true, out); }

void ReasoningParser::run(bool eof, kiln::EventSink& out) {
  size_t pos = 0;
  for (;;) {
    std::string_view s = std::string_view(buf_).substr(pos);
    if (s.empty()) break;
    if (state_ == State::kContentStart || state_ == State::kReasoningStart) {
      // Only a `<think>` at the very start (after whitespace) opens reasoning; later ones are text.
      size_t ws = leading_space(s);
      if (state_ == State::kReasoningStart) {  // reasoning is trimmed: drop the whitespace now
        pos += ws;
        s.remove_prefix(ws);
        ws = 0;
      }
      // A long whitespace run decides it: the output did not start with <think>.
      bool long_run = ws > kMaxHeldSpace;
      Match m = long_run ? Match::kNo : match_at(s.substr(ws), kThink);
      if (m == Match::kPartial && !eof) break;
      if (m == Match::kFull) {
        pos += ws + kThink.size();
        state_ = State::kReasoning;
        reasoning_start_ = true;
        continue;
      }
      if (state_ == State::kReasoningStart) {
        state_ = State::kReasoning;
      } else {
        state_ = State::kContent;
      }
      continue;
    }
    if (state_ == State::kContent) {
      if (strip_leading_) {
        size_t ws = leading_space(s);
        pos += ws;
        if (ws == s.size()) break;
        strip_leading_ = false;
        continue;
      }
      out.content(s);
      pos += s.size();
      break;
    }
    if (reasoning_start_) {  // reasoning is trimmed: `<think>\n` is followed by a newline
      size_t ws = leading_space(s);
      pos += ws;  // dropped either way, so consumed as it arrives
      if (ws == s.size()) break;
      reasoning_start_ = false;
      continue;
    }
    // kReasoning: up to </think>; a <tool_call> also ends it (a model that calls a tool without
    // closing its thoughts must not have the call swallowed into reasoning_content).
    std::string_view tag;
    bool partial = false;
    size_t t = find_tag(s, 0, {kThinkEnd, kToolCall}, &tag, &partial);
    if (t == npos || (partial && !eof)) {
      size_t end = t == npos ? s.size() : t;
      std::string_view r = s.substr(0, end);
      r.remove_suffix(trailing_space(r));  // held back: trailing whitespace before </think> is dropped
      if (eof) r = s.substr(0, s.size() - trailing_space(s));
      out.reasoning(r);
      pos += eof ? s.size() : r.size();
      break;
    }
    if (partial) {  // eof: a truncated tag is reasoning text
      out.reasoning(s.substr(0, s.size() - trailing_space(s)));
      pos += s.size();
      break;
    }
    std::string_view r = s.substr(0, t);
    out.reasoning(r.substr(0, r.size() - trailing_space(r)));
    if (tag == kThinkEnd) {
      pos += t + kThinkEnd.size();
      strip_leading_ = true;
    } else {
      pos += t;  // the tool call is content for the tool parser
      strip_leading_ = false;
    }
    state_ = State::kContent;
  }
  buf_.erase(0, pos);
}

}  // namespace qwen3_coder
