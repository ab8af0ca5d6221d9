// The `gemma4` reasoning parser: Gemma 4 thinks in a channel, `<|channel>thought\n...<channel|>`.
//
// Channel text is always reasoning (never leaked into content), whatever the thinking flag: with
// thinking off the template pre-closes an empty channel and the model may still emit empty ones.
// Empty channels, stray `<channel|>` and label-less `<|channel>` are consumed; `<|tool_call>` ends
// reasoning (the call is content for the tool parser). Generation may start inside an open channel
// when the prompt tail opened one (kiln_parser_options.prompt_tail).
#pragma once

#include <kiln/plugin.hpp>

#include <string>

namespace gemma4 {

class ReasoningParser : public kiln::ReasoningParser {
 public:
  explicit ReasoningParser(const kiln::ParserOptions& options);
  void feed(std::string_view delta, kiln::EventSink& out) override;
  void finish(kiln::EventSink& out) override;

 private:
  enum class State { kContent, kLabel, kChannel };
  void run(bool eof, kiln::EventSink& out);

  State state_ = State::kContent;
  bool strip_leading_ = false;  ///< newlines right after a channel closes are not content
  bool channel_start_ = false;  ///< whitespace at the start of the reasoning is trimmed
  std::string buf_;
};

}  // namespace gemma4
