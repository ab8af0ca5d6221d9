// Exact ids against Hugging Face: the llama.cpp vocab vectors (ids from HF tokenizers), and against
// the @lenml/tokenizers oracle under node on war-and-peace chunks and generated hard strings.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "real_models.hpp"
#include "text/tokenizer.hpp"
#include "text_test_util.hpp"

namespace kiln::text {
namespace {

using namespace testing;
using json = nlohmann::json;

class Real : public ::testing::TestWithParam<RealModel> {};

std::vector<std::string> split_inp(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> r;
  std::size_t pos = 0;
  for (std::size_t f; (f = all.find(sep, pos)) != std::string::npos; pos = f + sep.size()) r.push_back(all.substr(pos, f - pos));
  return r;
}

TEST_P(Real, LlamaCppVectors) {
  KILN_LOAD_REAL_OR_SKIP(tok, GetParam());
  fs::path inp = fixtures_dir() / "tokenizer-vectors" / (GetParam().vectors + ".inp");
  fs::path out = fixtures_dir() / "tokenizer-vectors" / (GetParam().vectors + ".out");
  if (!fs::exists(inp) || !fs::exists(out)) GTEST_SKIP() << "missing " << inp << " / " << out;
  std::vector<std::string> texts = split_inp(read_file(inp));
  std::istringstream lines(read_file(out));
  std::string line;
  std::size_t n = 0;
  for (const std::string& text : texts) {
    ASSERT_TRUE(std::getline(lines, line)) << "fewer .out lines than .inp tests";
    std::vector<TokenId> want;
    std::istringstream ls(line);
    for (TokenId v; ls >> v;) want.push_back(v);
    EXPECT_EQ(tok->encode(text), want) << "input: [" << text << "]";
    EXPECT_EQ(tok->decode(want), text) << "decode of vector " << n;
    ++n;
  }
  EXPECT_GE(n, 40u);
}

std::vector<std::string> war_and_peace_chunks(std::size_t count, std::size_t size) {
  std::string all = read_file(fixtures_dir() / "corpora" / "war-and-peace.txt");
  std::vector<std::string> r;
  if (all.empty()) return r;
  std::mt19937 rng(5);
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t a = std::uniform_int_distribution<std::size_t>(0, all.size() - size)(rng);
    while (a > 0 && (static_cast<unsigned char>(all[a]) & 0xC0) == 0x80) --a;
    std::size_t len = size + std::uniform_int_distribution<std::size_t>(0, size)(rng);
    std::string c = all.substr(a, len);
    while (!c.empty() && !utf8::is_valid(c)) c.pop_back();
    r.push_back(c);
  }
  return r;
}

std::vector<std::string> special_strings(const Tokenizer& t) {
  std::vector<std::string> r;
  for (const char* s : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                        "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<unk>", "<pad>", "<mask>", "[multimodal]"})
    if (t.token_to_id(s)) r.push_back(s);
  return r;
}

TEST_P(Real, MatchesOracleOnCorpusAndGeneratedText) {
  KILN_LOAD_REAL_OR_SKIP(tok, GetParam());
  std::string missing = oracle_missing();
  if (!missing.empty()) GTEST_SKIP() << "missing " << missing;
  std::vector<std::string> texts = war_and_peace_chunks(24, 2000);
  if (texts.empty()) std::cerr << "note: corpora/war-and-peace.txt absent; generated strings only\n";
  std::mt19937 rng(GetParam().name.size() * 1000 + 17);
  auto specials = special_strings(*tok);
  // KILN_TEXT_ORACLE_SCALE=N runs N times as many generated strings (for a deeper check by hand).
  const int scale = std::getenv("KILN_TEXT_ORACLE_SCALE") ? std::max(1, std::atoi(std::getenv("KILN_TEXT_ORACLE_SCALE"))) : 1;
  for (int i = 0; i < 400 * scale; ++i) texts.push_back(random_text(rng, 1 + i % 60, i % 5 == 0, specials));
  texts.push_back(std::string(3000, ' '));
  texts.push_back(std::string(500, '\n') + "x" + std::string(700, '\t'));
  texts.push_back("");

  // Random id sequences for decode (Qwen's byte-level decoder is lossy UTF-8 in both implementations;
  // Gemma's ByteFallback differs on invalid runs, so it is checked on encodings only).
  std::vector<std::vector<TokenId>> decode_ids;
  const bool byte_level = GetParam().pkg == "qwen3";
  for (int i = 0; i < 100 && byte_level; ++i) {
    std::vector<TokenId> ids;
    int len = std::uniform_int_distribution<int>(1, 30)(rng);
    for (int k = 0; k < len; ++k) ids.push_back(std::uniform_int_distribution<TokenId>(0, static_cast<TokenId>(tok->vocab_size()) - 1)(rng));
    decode_ids.push_back(ids);
  }
  // Our encodings of every third text are decoded by the oracle too (they must equal its own).
  std::vector<std::vector<TokenId>> ours;
  for (std::size_t i = 0; i < texts.size(); ++i) ours.push_back(tok->encode(texts[i]));
  for (std::size_t i = 0; i < texts.size(); i += 3) decode_ids.push_back(ours[i]);
  // With add_special the post-processor runs too (Gemma's <bos>).
  const std::vector<std::string> with_special = {"Hello", "<start_of_turn>user\nhi", ""};
  json req = {{"dir", model_dir(GetParam().pkg).string()}, {"no_nfc", GetParam().no_nfc}, {"encode", json::array()},
              {"decode", decode_ids}, {"encode_special", with_special}};
  for (const auto& t : texts) req["encode"].push_back(oracle_text(t));
  json res = run_oracle(req);
  ASSERT_EQ(res["encode"].size(), texts.size());
  int bad = 0;
  for (std::size_t i = 0; i < texts.size() && bad < 5; ++i) {
    auto want = res["encode"][i].get<std::vector<TokenId>>();
    const auto& got = ours[i];
    if (got != want) {
      ++bad;
      ADD_FAILURE() << "encode mismatch on text " << i << ": " << json(oracle_text(texts[i])).dump();
    }
  }
  for (std::size_t i = 0; i < decode_ids.size(); ++i)
    EXPECT_EQ(tok->decode(decode_ids[i]), res["decode"][i].get<std::string>()) << "decode " << json(decode_ids[i]).dump();
  EncodeOptions add;
  add.add_special = true;
  for (std::size_t i = 0; i < with_special.size(); ++i)
    EXPECT_EQ(tok->encode(with_special[i], add), res["encode_special"][i].get<std::vector<TokenId>>());
}

INSTANTIATE_TEST_SUITE_P(Models, Real, ::testing::ValuesIn(real_models()),
                         [](const ::testing::TestParamInfo<RealModel>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln::text
