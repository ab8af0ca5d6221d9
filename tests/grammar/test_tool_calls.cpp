// Forced tool-call grammars in the qwen3_coder and gemma4 syntaxes: what a model writes in its own
// format is accepted, anything that would not parse back into a valid call is not.
#include <gtest/gtest.h>

#include "grammar/recognizer.hpp"
#include "grammar/tool_calls.hpp"

namespace kiln::grammar {
namespace {

const std::vector<ToolSpec> kTools = {
    {"get_weather", R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer",
      "minimum": 1, "maximum": 14}, "metric": {"type": "boolean"}}, "required": ["city", "days"]})"},
    {"ping", ""}};

Grammar calls(ToolSyntax syntax, bool parallel, std::vector<ToolSpec> tools = kTools) {
  Grammar g;
  ToolCallOptions o;
  o.syntax = syntax;
  o.parallel = parallel;
  g.root = add_tool_calls(g, tools, o).index;
  g.validate();
  return g;
}

std::string qwen(const std::string& name, const std::string& params) {
  return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
}
std::string param(const std::string& k, const std::string& v) {
  return "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
}

TEST(ToolCallGrammar, Qwen3CoderCallsAsTheModelWritesThem) {
  Grammar one = calls(ToolSyntax::qwen3_coder, false), many = calls(ToolSyntax::qwen3_coder, true);
  Recognizer r1(one), rn(many);
  const std::string ok = qwen("get_weather", param("city", "Paris") + param("days", "3"));
  EXPECT_TRUE(r1.accepts(ok));
  EXPECT_TRUE(
      r1.accepts(qwen("get_weather", param("city", "São Paulo <b>") + param("days", "14") + param("metric", "false"))));
  EXPECT_TRUE(r1.accepts(qwen("ping", "")));
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "Paris"))));                         // required days
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("days", "3") + param("city", "Paris"))));    // declared order
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "Paris") + param("days", "15"))));   // maximum
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "Paris") + param("days", "3.0"))));  // integer
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "a</parameter>b") + param("days", "3"))));
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "a<function=x>b") + param("days", "3"))));
  EXPECT_FALSE(r1.accepts(qwen("get_weather", param("city", "P") + param("days", "3") + param("x", "1"))));
  EXPECT_FALSE(r1.accepts(qwen("unknown", "")));
  EXPECT_FALSE(r1.accepts(ok + "\n" + qwen("ping", "")));  // one call only
  EXPECT_TRUE(rn.accepts(ok + "\n" + qwen("ping", "")));
  EXPECT_FALSE(rn.accepts(""));
}

TEST(ToolCallGrammar, Gemma4CallsAsTheModelWritesThem) {
  Grammar one = calls(ToolSyntax::gemma4, false), many = calls(ToolSyntax::gemma4, true);
  Recognizer r1(one), rn(many);
  const std::string q = "<|\"|>";
  const std::string ok = "<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3}<tool_call|>";
  EXPECT_TRUE(r1.accepts(ok));
  EXPECT_TRUE(r1.accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3,metric:true}<tool_call|>"));
  EXPECT_TRUE(r1.accepts("<|tool_call>call:ping{}<tool_call|>"));
  EXPECT_FALSE(r1.accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3,}<tool_call|>"));
  EXPECT_FALSE(r1.accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + "}<tool_call|>"));
  EXPECT_FALSE(r1.accepts("<|tool_call>call:get_weather{city:" + q + "Pa" + q + "ris" + q + ",days:3}<tool_call|>"));
  EXPECT_FALSE(r1.accepts("<|tool_call>call:get_weather{city:\"Paris\",days:3}<tool_call|>"));
  EXPECT_FALSE(r1.accepts("<|tool_call>call:get_weather{city:" + q + "Pa<tool_call|>ris" + q + ",days:3}<tool_call|>"));
  EXPECT_TRUE(rn.accepts(ok + ok));
  EXPECT_FALSE(r1.accepts(ok + ok));
}

TEST(ToolCallGrammar, ConstrainedStringParametersAndRefusals) {
  const std::vector<ToolSpec> tools = {{"f", R"({"type": "object", "properties": {
      "mode": {"type": "string", "enum": ["fast", "slow"]}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
      "short": {"type": "string", "maxLength": 3}}, "required": ["mode", "code", "short"]})"}};
  const Grammar g = calls(ToolSyntax::qwen3_coder, false, tools);
  Recognizer r(g);
  EXPECT_FALSE(r.accepts(qwen("f", param("mode", "fast") + param("code", "ABC") + param("short", "é<"))));
  EXPECT_TRUE(r.accepts(qwen("f", param("mode", "fast") + param("code", "ABC") + param("short", "éa"))));
  EXPECT_FALSE(r.accepts(qwen("f", param("mode", "medium") + param("code", "ABC") + param("short", ""))));
  EXPECT_FALSE(r.accepts(qwen("f", param("mode", "slow") + param("code", "AB") + param("short", ""))));
  EXPECT_FALSE(r.accepts(qwen("f", param("mode", "slow") + param("code", "ABC") + param("short", "abcd"))));
  const auto refused = [](const std::string& params, const std::string& needle) {
    Grammar g;
    try {
      add_tool_calls(g, {{"f", params}}, {});
      ADD_FAILURE() << "accepted " << params;
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(R"({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}})", "one type");
  refused(R"({"type": "object", "properties": {"x": {"type": "string", "format": "email"}}})", "format");
  refused(R"({"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 2}}})", "multipleOf");
  refused(R"({"type": "object", "required": ["y"]})", "'y'");
  refused(R"({"type": "array"})", "type 'object'");
  refused(R"({"type": "object", "properties": {"x": {"type": "string", "pattern": "[a-z]+"}}})", "anchored");
  refused(R"({"type": "object", "properties": {"x": {"type": "string", "enum": ["a</parameter>"]}}})", "markup");
  refused(R"({"type": "object", "properties": {"x<y": {"type": "integer"}}})", "parameter name");
  Grammar named;
  EXPECT_THROW(add_tool_calls(named, {{"bad name", ""}}, {}), GrammarError);
}

}  // namespace
}  // namespace kiln::grammar
