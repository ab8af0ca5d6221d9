#include "gemma4_reasoning.hpp"

#include "tag_scan.hpp"

namespace gemma4 {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers
namespace {

constexpr std::string_view kOpen = "<|channel>";
constexpr std::string_view kClose = "<channel|>";
constexpr std::string_view kLabel = "thought";
constexpr std::string_view kToolCall = "<|tool_call>";
constexpr size_t npos = std::string_view::npos;

}  // namespace

ReasoningParser::ReasoningParser(const kiln::ParserOptions& options) {
  std::string_view tail = options.prompt_tail;
  size_t open = tail.rfind(kOpen), close = tail.rfind(kClose);
  if (open != npos && (close == npos || open > close)) {
    std::string_view label = tail.substr(open + kOpen.size());
    state_ = label.empty() ? State::kLabel : State::kChannel;  // `thought\n` already in the prompt
    channel_start_ = true;
  } else if (close != npos && tail.find_first_not_of(" \t\r\n", close + kClose.size()) == npos) {
    strip_leading_ = true;  // thinking off: the prompt ends with an empty, closed channel
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
    if (state_ == State::kLabel) {  // `thought\n` names the channel; it is not reasoning
      Match m = match_at(s, "thought\n");
      if (m == Match::kPartial && !eof) break;
      if (m == Match::kFull) {
        pos += kLabel.size() + 1;
      } else if (s.substr(0, kLabel.size()) == kLabel) {
        pos += kLabel.size();
      }
      state_ = State::kChannel;
      channel_start_ = true;
      continue;
    }
    std::string_view tag;
    bool partial = false;
    if (state_ == State::kContent) {
      if (strip_leading_) {
        size_t n = 0;
        while (n < s.size() && s[n] == '\n') ++n;
        pos += n;
        if (n == s.size()) break;
        strip_leading_ = false;
        continue;
      }
      size_t c = find_tag(s, 0, {kOpen, kClose}, &tag, &partial);
      if (c == npos || partial) {
        size_t end = c == npos || eof ? s.size() : c;
        out.content(s.substr(0, end));
        pos += end;
        break;
      }
      out.content(s.substr(0, c));
      pos += c + tag.size();
      if (tag == kOpen) {
        state_ = State::kLabel;
      } else {
        strip_leading_ = true;  // a stray close (thinking off) is dropped with the newlines after it
      }
      continue;
    }
    // kChannel
    if (channel_start_) {
      size_t n = 0;
      while (n < s.size() && is_space(s[n])) ++n;
      pos += n;  // dropped either way, so consumed as it arrives
      if (n == s.size()) break;
      channel_start_ = false;
      continue;
    }
    size_t c = find_tag(s, 0, {kClose, kToolCall, kOpen}, &tag, &partial);
    if (c == npos || partial) {
      size_t end = c == npos || eof ? s.size() : c;
      std::string_view r = s.substr(0, end);
      r.remove_suffix(trailing_space(r));  // held back: whitespace before <channel|> is dropped
      out.reasoning(r);
      pos += eof ? s.size() : r.size();
      break;
    }
    std::string_view r = s.substr(0, c);
    if (tag == kOpen) {  // a channel reopened inside a channel: keep reading reasoning
      out.reasoning(r);
      pos += c + tag.size();
      state_ = State::kLabel;
      continue;
    }
    out.reasoning(r.substr(0, r.size() - trailing_space(r)));
    if (tag == kClose) {
      pos += c + tag.size();
      strip_leading_ = true;
    } else {
      pos += c;  // reasoning ends at a tool call; the call is content for the tool parser
    }
    state_ = State::kContent;
  }
  buf_.erase(0, pos);
}

}  // namespace gemma4
