// The `gemma4` tool-call parser: Gemma 4's native calls
//   <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3,opts:{metric:true},xs:[1,2]}<tool_call|>
// back to back, turned into OpenAI tool calls with JSON arguments typed by the request's schema.
// A call is emitted once it closes (its body must be seen whole to be converted safely); a call
// that cannot be read degrades to content with the raw text. Rules: docs/parsers.md.
#pragma once

#include <kiln/plugin.hpp>

#include <string>

#include "arg_typing.hpp"

namespace gemma4 {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers

class ToolParser : public kiln::ToolCallParser {
 public:
  explicit ToolParser(const kiln::ParserOptions& options);
  void feed(std::string_view delta, kiln::EventSink& out) override;
  void finish(kiln::EventSink& out) override;

 private:
  void run(bool eof, kiln::EventSink& out);
  bool step_text(bool eof, kiln::EventSink& out);
  bool step_call(bool eof, kiln::EventSink& out);
  /** Converts one call body (`call:NAME{...}`); false when it is not a readable call. */
  bool convert(std::string_view body, std::string* name, std::string* arguments) const;
  std::string_view rest() const { return std::string_view(buf_).substr(pos_); }

  ToolSchemas schemas_;
  std::string buf_;
  size_t pos_ = 0;
  bool in_call_ = false;
  bool after_call_ = false;  ///< only whitespace since the last call (dropped at the end)
  std::string ws_before_;    ///< whitespace before the current call, kept if it degrades to content
  std::string_view opener_;  ///< the tag that opened the current call (for degrading to content)
  size_t scan_ = 0;          ///< call body bytes already searched for the closing tag
  uint32_t calls_ = 0;
};

}  // namespace gemma4
