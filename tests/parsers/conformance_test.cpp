// The conformance suite every tool-call parser plugin passes (docs/parsers.md, "Event contract"):
// exact results, split invariance (every byte position, seeded random multi-splits, one byte at a
// time), no retraction (what a prefix emitted is a prefix of the final stream), arguments that are
// one valid JSON object per call for every truncation of every input, and seeded random malformed
// input that never throws. Run on qwen3_coder, gemma4 and the third_party_parser example.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "harness.hpp"
#include "tool_cases.hpp"

namespace kiln::test {
namespace {

ToolSuite suite_named(const std::string& name) {
  if (name == "qwen3_coder") return qwen3_coder_suite();
  if (name == "gemma4") return gemma4_suite();
  return markdown_json_suite();
}

class ToolParserConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    suite_ = suite_named(GetParam());
    parser_ = &tool_parser(suite_.parser);
  }
  ParserRequest request(const ToolCase&) const {
    ParserRequest r;
    r.tools_json = suite_.default_tools;
    return r;
  }
  ToolSuite suite_;
  const Component* parser_ = nullptr;
};

/** Every call has exactly one valid JSON object as arguments (never `{...}{...}`, never unclosed). */
void expect_valid_arguments(const std::vector<ParseEvent>& events, const std::string& input) {
  parse::AssistantMessage m = to_message(events);
  for (const auto& call : m.tool_calls) {
    auto j = nlohmann::json::parse(call.arguments, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "arguments of " << call.name << " are not one JSON object: " << call.arguments
                               << "\ninput: " << input;
  }
}

TEST_P(ToolParserConformance, OneShotGivesTheExpectedMessage) {
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto events = run_once(*parser_, request(c), c.input);
    parse::AssistantMessage m = to_message(events);
    EXPECT_EQ(m.content, c.content) << describe(events);
    EXPECT_TRUE(m.reasoning_content.empty());
    ASSERT_EQ(m.tool_calls.size(), c.calls.size()) << describe(events);
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(m.tool_calls[i].name, c.calls[i].name);
      EXPECT_EQ(m.tool_calls[i].arguments, c.calls[i].arguments);
      EXPECT_TRUE(nlohmann::json::parse(m.tool_calls[i].arguments, nullptr, false).is_object());
    }
    // Ids are left to the host, which makes them unique per request.
    for (const auto& e : events) {
      if (e.kind == KILN_EVENT_TOOL_CALL_START) {
        EXPECT_FALSE(e.name.empty());
      }
    }
  }
}

TEST_P(ToolParserConformance, SplittingAtEveryBytePositionChangesNothing) {
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto expected = coalesce(run_once(*parser_, request(c), c.input));
    for (size_t cut = 0; cut <= c.input.size(); ++cut) {
      auto got = coalesce(run_pieces(*parser_, request(c), split_at(c.input, {cut})));
      ASSERT_EQ(got, expected) << "split at " << cut << "\ngot:\n" << describe(got) << "expected:\n" << describe(expected);
    }
  }
}

TEST_P(ToolParserConformance, OneByteAtATimeAndRandomMultiSplitsChangeNothing) {
  std::mt19937 rng(1234);
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto expected = coalesce(run_once(*parser_, request(c), c.input));
    std::vector<size_t> every;
    for (size_t i = 1; i < c.input.size(); ++i) every.push_back(i);
    ASSERT_EQ(coalesce(run_pieces(*parser_, request(c), split_at(c.input, every))), expected);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<size_t> cuts;
      size_t n = c.input.empty() ? 0 : rng() % 8;
      for (size_t k = 0; k < n; ++k) cuts.push_back(rng() % (c.input.size() + 1));
      std::sort(cuts.begin(), cuts.end());
      auto got = coalesce(run_pieces(*parser_, request(c), split_at(c.input, cuts)));
      ASSERT_EQ(got, expected) << "trial " << trial << "\ngot:\n" << describe(got);
    }
  }
}

TEST_P(ToolParserConformance, NothingEmittedIsEverRetracted) {
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    auto full = coalesce(run_once(*parser_, request(c), c.input));
    for (size_t k = 0; k <= c.input.size(); ++k) {
      auto partial = coalesce(run_pieces(*parser_, request(c), {std::string_view(c.input).substr(0, k)}, false));
      ASSERT_TRUE(is_prefix_stream(partial, full))
          << "after " << k << " bytes:\n" << describe(partial) << "final:\n" << describe(full);
    }
  }
}

TEST_P(ToolParserConformance, EveryTruncationClosesArgumentsAsOneJsonObject) {
  for (const auto& c : suite_.cases) {
    SCOPED_TRACE(c.name);
    for (size_t k = 0; k <= c.input.size(); ++k) {
      if (k < c.input.size() && (static_cast<unsigned char>(c.input[k]) & 0xC0) == 0x80) continue;  // whole characters
      std::string_view prefix = std::string_view(c.input).substr(0, k);
      expect_valid_arguments(run_once(*parser_, request(c), prefix), std::string(prefix));
    }
  }
}

TEST_P(ToolParserConformance, RandomMalformedInputNeverThrowsAndStaysSplitInvariant) {
  std::mt19937 rng(42);
  const auto& atoms = suite_.fuzz_atoms;
  ASSERT_FALSE(atoms.empty());
  ParserRequest req;
  req.tools_json = suite_.default_tools;
  for (int i = 0; i < 300; ++i) {
    std::string input;
    size_t n = 1 + rng() % 30;
    for (size_t k = 0; k < n; ++k) input += atoms[rng() % atoms.size()];
    SCOPED_TRACE(input);
    std::vector<ParseEvent> once;
    ASSERT_NO_THROW(once = coalesce(run_once(*parser_, req, input)));
    expect_valid_arguments(once, input);
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<size_t> cuts;
      for (size_t k = 0; k < 1 + rng() % 6; ++k) cuts.push_back(rng() % (input.size() + 1));
      std::sort(cuts.begin(), cuts.end());
      ASSERT_EQ(coalesce(run_pieces(*parser_, req, split_at(input, cuts))), once);
    }
    // Nothing is lost: without calls, the content is the input itself.
    parse::AssistantMessage m = to_message(once);
    if (m.tool_calls.empty()) {
      EXPECT_EQ(m.content, input);
    }
  }
}

TEST_P(ToolParserConformance, InvalidToolsJsonIsAClearError) {
  ParserRequest r;
  r.tools_json = "{not json";
  try {
    ParserInstance p(*parser_, r);
    SUCCEED() << "parser accepts unparsable tools (it does not type by schema)";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("tools"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllToolParsers, ToolParserConformance,
                         ::testing::Values("qwen3_coder", "gemma4", "markdown_json"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::test
