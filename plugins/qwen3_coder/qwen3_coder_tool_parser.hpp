// The `qwen3_coder` tool-call parser: Qwen3-Coder / Qwen3.5 XML calls
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// turned into OpenAI tool calls whose arguments are typed by the request's JSON schema.
// Rules (terminators, typing, malformed input) are written down in docs/parsers.md.
#pragma once

#include <kiln/plugin.hpp>

#include <string>

#include "arg_typing.hpp"

namespace qwen3_coder {
using namespace parser_support;  // plugins/common: typing and tag scanning shared by the parsers

class ToolParser : public kiln::ToolCallParser {
 public:
  explicit ToolParser(const kiln::ParserOptions& options);
  void feed(std::string_view delta, kiln::EventSink& out) override;
  void finish(kiln::EventSink& out) override;

 private:
  enum class State { kText, kFunction, kValue, kAfterFunction };
  /** Runs the state machine over buf_; `eof` settles everything still undecided. */
  void run(bool eof, kiln::EventSink& out);
  bool step_text(bool eof, kiln::EventSink& out);
  bool step_function(bool eof, kiln::EventSink& out);
  bool step_value(bool eof, kiln::EventSink& out);
  bool step_after_function(bool eof);
  /** Emits content, holding back (or dropping, before a call) the trailing whitespace. */
  void content(std::string_view text, kiln::EventSink& out);
  void begin_value(std::string key, kiln::EventSink& out);
  void end_value(size_t value_len, kiln::EventSink& out);
  void end_call(kiln::EventSink& out);
  std::string_view rest() const { return std::string_view(buf_).substr(pos_); }

  ToolSchemas schemas_;
  std::string buf_;  ///< input not yet consumed starts at pos_
  size_t pos_ = 0;
  State state_ = State::kText;
  bool after_call_ = false;  ///< whitespace right after a call is dropped
  uint32_t calls_ = 0;       ///< calls started so far (the next call's index)
  // The current call.
  const Json* params_ = nullptr;
  uint32_t n_params_ = 0;
  // The current value (its raw text starts at pos_).
  std::string key_;
  TypeInfo type_;
  bool streaming_ = false;    ///< string value streamed as it arrives
  bool value_start_ = false;  ///< the one leading newline is not decided yet
  size_t emitted_ = 0;        ///< raw value bytes already streamed
  size_t scan_ = 0;           ///< value bytes already classified as literal
  int depth_ = 0;             ///< literal <function=...> blocks open inside the value
  std::string frag_;          ///< scratch for argument fragments
};

}  // namespace qwen3_coder
