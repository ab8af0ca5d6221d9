// `kiln parse` end to end (integration): the built kiln, plugins found by the registry (beside the
// executable, or linked in), the example plugin loaded from a config's plugins.paths, and
// --stream-split N giving the one-shot message for every N.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "source_paths.hpp"

namespace {

const std::string kDir =
    std::string(kiln::paths::binary_dir()) + "/tests/parsers";  // scratch files and the example plugin module

struct Result {
  int status;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

Result run(const std::string& args, const std::string& stdin_text) {
  // ctest may run these tests in parallel: one input file per test.
  std::string in = kDir + "/cli_input_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt";
  std::ofstream(in, std::ios::binary) << stdin_text;
  std::string err_file = in + ".stderr";
  std::string cmd = std::string(KILN_TEST_BIN_DIR) + "/kiln parse " + args + " < " + in + " 2> " + err_file;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed", ""};
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = pclose(p);
  std::ifstream e(err_file);
  std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err};
}

std::string write_tools() {
  std::string path = kDir + "/cli_tools_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
  std::ofstream(path) << R"({"model": "m", "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
      "temp": {"type": "number"}}}}}]})";
  return path;
}

TEST(KilnParseCli, PrintsTheOpenAIMessageAndStreamingAgreesForEverySplit) {
  std::string tools = write_tools();
  const std::string qwen =
      "Plan.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n東京\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=temp>\n22.5\n</parameter>\n</function>\n</tool_call>";
  Result one = run("--reasoning-parser qwen3 --tool-parser qwen3_coder --tools " + tools, qwen);
  ASSERT_EQ(one.status, 0) << one.err;
  auto m = nlohmann::json::parse(one.out);
  EXPECT_EQ(m["reasoning_content"], "Plan.");
  EXPECT_EQ(m["content"], "Checking.");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city": "東京", "days": 3, "temp": 22.5})");
  for (int n : {1, 2, 3, 5, 8, 13, 64}) {
    Result s = run("--reasoning-parser qwen3 --tool-parser qwen3_coder --tools " + tools + " --stream-split " +
                       std::to_string(n),
                   qwen);
    EXPECT_EQ(s.status, 0) << s.err;
    EXPECT_EQ(s.out, one.out) << "--stream-split " << n;
  }
  const std::string gemma = "<|channel>thought\nHm.<channel|><|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:2}<tool_call|>";
  Result g1 = run("--reasoning-parser gemma4 --tool-parser gemma4 --thinking on --tools " + tools, gemma);
  Result g2 = run("--reasoning-parser gemma4 --tool-parser gemma4 --thinking on --stream-split 2 --tools " + tools, gemma);
  ASSERT_EQ(g1.status, 0) << g1.err;
  EXPECT_EQ(g1.out, g2.out);
  EXPECT_EQ(nlohmann::json::parse(g1.out)["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo", "days": 2})");
}

TEST(KilnParseCli, DeltasEndWithFinishReasonToolCalls) {
  Result r = run("--tool-parser qwen3_coder --stream-split 4 --deltas",
                 "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(R"({"finish_reason":"tool_calls"})"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"("function":{"name":"f","arguments":""})"), std::string::npos) << r.out;
}

TEST(KilnParseCli, UnknownParserAndBadOptionsAreClearErrors) {
  Result r = run("--tool-parser nope", "");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no tool-parser named 'nope'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("qwen3_coder"), std::string::npos) << r.err;
  EXPECT_EQ(run("--stream-split zero", "").status, 2);
  EXPECT_EQ(run("--tools /nonexistent.json", "").status, 1);
}

TEST(KilnParseCli, LoadsTheExamplePluginFromConfigPaths) {
  std::string config = kDir + "/cli_config.yaml";
  std::ofstream(config) << "plugins:\n  paths: [" << kDir << "/example-plugin]\n";
  Result r = run("--config " + config + " --tool-parser markdown_json --stream-split 3",
                 "Calling.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n```");
  ASSERT_EQ(r.status, 0) << r.err;
  auto m = nlohmann::json::parse(r.out);
  EXPECT_EQ(m["content"], "Calling.\n");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Rome"})");
  Result loaded = run("--load " + kDir + "/example-plugin/third_party_parser.so --tool-parser markdown_json",
                      "```json\n{\"name\": \"f\"}\n```");
  ASSERT_EQ(loaded.status, 0) << loaded.err;
  EXPECT_EQ(nlohmann::json::parse(loaded.out)["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(run("--load /nonexistent.so", "").status, 1);
}

}  // namespace
