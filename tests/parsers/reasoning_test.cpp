// Reasoning parsers: qwen3 (<think>) and gemma4 (<|channel>), one-shot results for each prompt
// shape (thinking on by default, prompt already opened the block, thinking off, stray tags) and the
// same split invariance / no-retraction properties as the tool parsers.
#include <gtest/gtest.h>

#include <random>

#include "harness.hpp"

namespace kiln::test {
namespace {

struct ReasoningCase {
  std::string name;
  int thinking;
  std::string prompt_tail;
  std::string input;
  std::string reasoning, content;
};

struct ReasoningSuite {
  std::string parser;
  std::vector<ReasoningCase> cases;
};

ReasoningSuite qwen3() {
  const std::string open_tail = "<|im_start|>assistant\n<think>\n";
  const std::string closed_tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return {"qwen3",
          {
              {"default_thinking_on", -1, "", "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.", "The answer is 4."},
              {"prompt_opened_think", 0, open_tail, "Hmm, 2+2.\n</think>\n\n4", "Hmm, 2+2.", "4"},
              {"thinking_off", 0, "", "The answer is 4.", "", "The answer is 4."},
              {"prompt_closed_think", -1, closed_tail, "Answer.", "", "Answer."},
              {"model_opens_think_itself", 1, "", "<think>\nHmm.\n</think>\n\nAnswer.", "Hmm.", "Answer."},
              {"thinking_off_but_model_thinks", 0, "", "<think>x</think>y", "x", "y"},
              {"truncated_reasoning", -1, "", "Still thinking about", "Still thinking about", ""},
              {"tool_call_ends_reasoning", -1, "", "I should call it.\n<tool_call>\n<function=f>\n</function>\n</tool_call>",
               "I should call it.", "<tool_call>\n<function=f>\n</function>\n</tool_call>"},
              {"later_think_tag_is_text", 0, "", "Use <think> tags.", "", "Use <think> tags."},
              {"empty_reasoning", -1, "", "</think>\n\nHi", "", "Hi"},
              {"partial_close_tag_at_end", -1, "", "abc</thi", "abc</thi", ""},
              {"reasoning_with_angle_brackets", -1, "", "a < b </ c\n</think>ok", "a < b </ c", "ok"},
              {"long_leading_whitespace_then_think_is_content", 0, "", std::string(70, ' ') + "<think>x</think>y", "",
               std::string(70, ' ') + "<think>x</think>y"},
              {"long_trailing_whitespace_trimmed_up_to_64", -1, "", "r" + std::string(70, '\n') + "</think>c",
               "r" + std::string(6, '\n'), "c"},
          }};
}

ReasoningSuite gemma4() {
  return {"gemma4",
          {
              {"model_opens_channel", 1, "", "<|channel>thought\nLet me see.\n<channel|>Paris.", "Let me see.", "Paris."},
              {"thinking_off_prompt", 0, "<|turn>model\n<|channel>thought\n<channel|>", "Paris.", "", "Paris."},
              {"stray_empty_channel", 0, "", "<|channel>thought\n<channel|>Paris.", "", "Paris."},
              {"lone_trailing_close", 0, "", "Paris.<channel|>", "", "Paris."},
              {"labelless_empty_channel", 0, "", "<|channel><channel|>\nParis.", "", "Paris."},
              {"tool_call_ends_reasoning", 1, "", "<|channel>thought\nNeed weather.<|tool_call>call:f{}<tool_call|>",
               "Need weather.", "<|tool_call>call:f{}<tool_call|>"},
              {"prompt_opened_channel", 1, "<|turn>model\n<|channel>thought\n", "Thinking...<channel|>Answer", "Thinking...", "Answer"},
              {"prompt_opened_bare_channel", 1, "<|turn>model\n<|channel>", "thought\nX<channel|>Y", "X", "Y"},
              {"truncated_reasoning", 1, "", "<|channel>thought\nhmm", "hmm", ""},
              {"plain_answer", 0, "", "No reasoning here.", "", "No reasoning here."},
              {"truncated_tag_is_content", 0, "", "Paris <|chan", "", "Paris <|chan"},
              {"long_whitespace_at_channel_start", 1, "", "<|channel>thought\n" + std::string(200, '\n') + "r<channel|>c", "r", "c"},
          }};
}

class ReasoningConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    suite_ = GetParam() == "qwen3" ? qwen3() : gemma4();
    parser_ = &reasoning_parser(suite_.parser);
  }
  static ParserRequest request(const ReasoningCase& c) {
    ParserRequest r;
    r.thinking = c.thinking;
    r.prompt_tail = c.prompt_tail;
    return r;
  }
  ReasoningSuite suite_;
  const Component* parser_ = nullptr;
};

TEST_P(ReasoningConformance, OneShotSeparatesReasoningFromContent) {
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto events = run_once(*parser_, request(c), c.input);
    parse::AssistantMessage m = to_message(events);
    EXPECT_EQ(m.reasoning_content, c.reasoning) << describe(events);
    EXPECT_EQ(m.content, c.content) << describe(events);
    EXPECT_TRUE(m.tool_calls.empty());
  }
}

TEST_P(ReasoningConformance, SplitsNeverChangeTheResultAndNothingIsRetracted) {
  std::mt19937 rng(7);
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto expected = coalesce(run_once(*parser_, request(c), c.input));
    for (size_t cut = 0; cut <= c.input.size(); ++cut) {
      ASSERT_EQ(coalesce(run_pieces(*parser_, request(c), split_at(c.input, {cut}))), expected) << "cut " << cut;
      auto partial = coalesce(run_pieces(*parser_, request(c), {std::string_view(c.input).substr(0, cut)}, false));
      ASSERT_TRUE(is_prefix_stream(partial, expected)) << "after " << cut << " bytes:\n" << describe(partial);
    }
    std::vector<size_t> every;
    for (size_t i = 1; i < c.input.size(); ++i) every.push_back(i);
    ASSERT_EQ(coalesce(run_pieces(*parser_, request(c), split_at(c.input, every))), expected);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t k = 0; k < 1 + rng() % 6; ++k) cuts.push_back(rng() % (c.input.size() + 1));
      std::sort(cuts.begin(), cuts.end());
      ASSERT_EQ(coalesce(run_pieces(*parser_, request(c), split_at(c.input, cuts))), expected);
    }
  }
}

TEST_P(ReasoningConformance, RandomInputNeverThrowsAndStaysSplitInvariant) {
  const std::vector<std::string> atoms = {"<think>", "</think>", "<tool_call>", "<|channel>", "<channel|>", "thought",
                                          "<|tool_call>", "\n", " ", "a", "<", "|", ">", "\xc3\xa9"};
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string input;
    for (size_t k = 0, n = 1 + rng() % 20; k < n; ++k) input += atoms[rng() % atoms.size()];
    SCOPED_TRACE(input);
    ParserRequest req;
    req.thinking = static_cast<int>(rng() % 3) - 1;
    std::vector<ParseEvent> once;
    ASSERT_NO_THROW(once = coalesce(run_once(*parser_, req, input)));
    parse::AssistantMessage m = to_message(once);
    EXPECT_LE(m.content.size() + m.reasoning_content.size(), input.size());  // tags and trims only remove
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<size_t> cuts;
      for (size_t k = 0; k < 1 + rng() % 6; ++k) cuts.push_back(rng() % (input.size() + 1));
      std::sort(cuts.begin(), cuts.end());
      ASSERT_EQ(coalesce(run_pieces(*parser_, req, split_at(input, cuts))), once);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllReasoningParsers, ReasoningConformance, ::testing::Values("qwen3", "gemma4"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::test
