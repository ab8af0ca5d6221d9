// The `qwen3` reasoning parser: `<think>...</think>` separation for Qwen3 / Qwen3.5 / Qwen3-Coder.
//
// The Qwen3.5 template has thinking on by default and force-opens `<think>\n` in the prompt, so
// model output normally starts *inside* the reasoning and contains `</think>` but no `<think>`.
// Where the output starts is decided from kiln_parser_options: prompt_tail (an open `<think>` in
// it wins), else `thinking` (-1 = template default = on, 0 = off, 1 = on).
#pragma once

#include <kiln/plugin.hpp>

#include <string>

namespace qwen3_coder {

class ReasoningParser : public kiln::ReasoningParser {
 public:
  explicit ReasoningParser(const kiln::ParserOptions& options);
  void feed(std::string_view delta, kiln::EventSink& out) override;
  void finish(kiln::EventSink& out) override;

 private:
  enum class State {
    kContentStart,    ///< content, but a leading `<think>` may still open reasoning
    kReasoningStart,  ///< reasoning; a leading `<think>` (older models emit it) is skipped
    kReasoning,
    kContent,
  };
  void run(bool eof, kiln::EventSink& out);

  State state_;
  bool strip_leading_ = false;
  bool reasoning_start_ = false;  ///< leading whitespace of the reasoning is not decided yet  ///< drop the newlines the template puts after `</think>`
  std::string buf_;
};

}  // namespace qwen3_coder
