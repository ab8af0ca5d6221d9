// Encode/decode on in-memory toy tokenizers: merges, added tokens and their flags, special tokens
// as text, post-processing, round trips, and clear errors for bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "text/tokenizer.hpp"
#include "text_test_util.hpp"
#include "toy_tokenizers.hpp"

namespace kiln::text {
namespace {

using testing::bl;
using Ids = std::vector<TokenId>;

const Tokenizer& byte_level() {
  static const Tokenizer t = Tokenizer::from_vocab(testing::toy_byte_level_spec());
  return t;
}
const Tokenizer& gemma() {
  static const Tokenizer t = Tokenizer::from_json(testing::toy_gemma_json());
  return t;
}
const Tokenizer& llama2() {
  static const Tokenizer t = Tokenizer::from_json(testing::toy_gemma_json(true));
  return t;
}

TokenId id(const Tokenizer& t, const std::string& s) {
  auto v = t.token_to_id(s);
  EXPECT_TRUE(v.has_value()) << s;
  return v.value_or(-1);
}

TEST(ToyByteLevel, MergesAndWords) {
  const Tokenizer& t = byte_level();
  EXPECT_EQ(t.encode("the hello"), (Ids{id(t, "the"), id(t, bl(" ")), id(t, "hello")}));
  EXPECT_EQ(t.encode(" the"), (Ids{id(t, bl(" the"))}));
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{id(t, bl("\xC3\xA9"))}));
  EXPECT_EQ(t.decode(t.encode("the hello \xC3\xA9!")), "the hello \xC3\xA9!");
}

TEST(ToyByteLevel, SpecialTokensRecognisedOrText) {
  const Tokenizer& t = byte_level();
  TokenId end = id(t, "<|end|>"), think = id(t, "<think>");
  Ids with = t.encode("the<|end|><think>");
  EXPECT_EQ(with, (Ids{id(t, "the"), end, think}));
  EncodeOptions no;
  no.allow_special = false;
  Ids without = t.encode("the<|end|><think>", no);
  EXPECT_EQ(std::count(without.begin(), without.end(), end), 0);
  EXPECT_EQ(without.back(), think);  // non-special added tokens are always recognised
  EXPECT_EQ(t.decode(without), "the<|end|><think>");
  EXPECT_TRUE(t.is_special(end));
  EXPECT_FALSE(t.is_special(think));
  EXPECT_EQ(t.eos_id(), end);
}

TEST(ToyByteLevel, RoundTripRandomTextIncludingInvalidUtf8) {
  const Tokenizer& t = byte_level();
  std::mt19937 rng(1);
  EncodeOptions no;
  no.allow_special = false;
  for (int i = 0; i < 300; ++i) {
    std::string s = testing::random_text(rng, 30, true, {"<|end|>", "<think>"});
    std::string expect;
    utf8::append_lossy(expect, s);
    ASSERT_EQ(t.decode(t.encode(s)), expect);
    ASSERT_EQ(t.decode(t.encode(s, no)), expect);
  }
}

TEST(ToyByteLevel, LstripRstripSingleWord) {
  VocabSpec v = testing::toy_byte_level_spec();
  TokenId next = static_cast<TokenId>(v.tokens.size());
  v.added.push_back({"<L>", next, true, /*lstrip*/ true, false});
  v.tokens.push_back("<L>");
  v.added.push_back({"<R>", next + 1, true, false, /*rstrip*/ true});
  v.tokens.push_back("<R>");
  v.added.push_back({"word", next + 2, false, false, false, false, /*single_word*/ true});
  v.tokens.push_back("word");
  Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("the  <L>"), (Ids{id(t, "the"), next}));
  EXPECT_EQ(t.encode("<R>  \nthe"), (Ids{next + 1, id(t, "the")}));
  EXPECT_EQ(t.encode("a word b"), (Ids{id(t, "a"), id(t, bl(" ")), next + 2, id(t, bl(" ")), id(t, "b")}));
  Ids inside = t.encode("swords");
  EXPECT_EQ(std::count(inside.begin(), inside.end(), next + 2), 0);
}

TEST(ToyGemma, ByteFallbackAndAddedNewlines) {
  const Tokenizer& t = gemma();
  TokenId nn = id(t, "\n\n");
  Ids ids = t.encode("hello ab\n\nc\xE4\xB8\xAD");
  Ids expect = {id(t, "hello"), id(t, "\xE2\x96\x81"), id(t, "ab"), nn, id(t, "c"), id(t, "<0xE4>"), id(t, "<0xB8>"), id(t, "<0xAD>")};
  EXPECT_EQ(ids, expect);
  EXPECT_EQ(t.decode(ids), "hello ab\n\nc\xE4\xB8\xAD");
  EncodeOptions add;
  add.add_special = true;
  EXPECT_EQ(t.encode("ab", add), (Ids{2, id(t, "ab")}));
  EXPECT_EQ(t.encode("  ")[0], id(t, "\xE2\x96\x81\xE2\x96\x81"));
}

TEST(ToyGemma, InvalidByteRunDecodesToOneReplacementPerByte) {
  const Tokenizer& t = gemma();
  Ids ids = {id(t, "a"), id(t, "<0xE4>"), id(t, "<0xB8>"), id(t, "b")};
  std::string r(utf8::kReplacement);
  EXPECT_EQ(t.decode(ids), "a" + r + r + "b");  // Hugging Face ByteFallback, not maximal subparts
}

TEST(ToyGemma, RoundTrip) {
  const Tokenizer& t = gemma();
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string s = testing::random_text(rng, 25, true);
    // A literal "▁" in the text decodes to a space (as in Hugging Face), so leave it out here.
    for (std::size_t p; (p = s.find("\xE2\x96\x81")) != std::string::npos;) s.replace(p, 3, "_");
    std::string expect;
    utf8::append_lossy(expect, s);
    ASSERT_EQ(t.decode(t.encode(s)), expect);
  }
}

TEST(ToyLlama2, PrependAndStrip) {
  const Tokenizer& t = llama2();
  Ids ids = t.encode("hello");
  EXPECT_EQ(ids, (Ids{id(t, "\xE2\x96\x81hello")}));
  EXPECT_EQ(t.decode(ids), "hello");
  // Prepend applies to every segment between added tokens, as in Hugging Face.
  Ids two = t.encode("hello<start_of_turn>hello");
  EXPECT_EQ(two, (Ids{id(t, "\xE2\x96\x81hello"), id(t, "<start_of_turn>"), id(t, "\xE2\x96\x81hello")}));
}

TEST(ToyGemma, NormalizedAddedTokenMatchesNormalizedText) {
  auto j = nlohmann::json::parse(testing::toy_gemma_json());
  j["added_tokens"].push_back({{"id", 900}, {"content", "ab ab"}, {"special", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", true}, {"single_word", false}});
  Tokenizer t = Tokenizer::from_json(j.dump());
  // The content is normalized ("ab▁ab") and matched in the normalized text.
  EXPECT_EQ(t.encode("c ab ab"), (Ids{id(t, "c"), id(t, "\xE2\x96\x81"), 900}));
  EXPECT_EQ(t.encode("ab\xE2\x96\x81" "ab"), (Ids{900}));
}

TEST(ToyByteLevel, Gpt2StylePreTokenizerAndMetaspace) {
  // ByteLevel with its own GPT-2 regex and a prefix space (GPT-2, RoBERTa), through the PCRE2 path.
  auto j = nlohmann::json::parse(testing::toy_gemma_json());
  VocabSpec v = testing::toy_byte_level_spec();
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  nlohmann::json merges = nlohmann::json::array();
  for (auto& [a, b] : v.merges) merges.push_back(a + " " + b);  // legacy "a b" form
  nlohmann::json g = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
                      {"decoder", {{"type", "ByteLevel"}}}};
  Tokenizer t = Tokenizer::from_json(g.dump());
  EXPECT_EQ(t.encode("the hello"), (Ids{id(t, bl(" the")), id(t, bl(" ")), id(t, "hello")}));
  EXPECT_EQ(t.decode(t.encode("the hello")), " the hello");
  // Metaspace pre-tokenizer (split, prepend first) + Metaspace decoder.
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}},
                                                      {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  Tokenizer m = Tokenizer::from_json(j.dump());
  EXPECT_EQ(m.encode("hello hello"), (Ids{id(m, "\xE2\x96\x81hello"), id(m, "\xE2\x96\x81hello")}));
  // "first": only the segment at the start of the text gets the prefix, not the one after <start_of_turn>.
  EXPECT_EQ(m.encode("hello<start_of_turn>hello"), (Ids{id(m, "\xE2\x96\x81hello"), id(m, "<start_of_turn>"), id(m, "hello")}));
  EXPECT_EQ(m.decode(m.encode("hello hello")), "hello hello");
}

TEST(ToyByteLevel, ConcurrentEncodesAgree) {
  // Each thread has its own word cache; results must not depend on which thread encodes.
  Tokenizer t = Tokenizer::from_vocab(testing::toy_byte_level_spec());
  std::mt19937 rng(21);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(testing::random_text(rng, 40));
  std::vector<Ids> want;
  for (const auto& x : texts) want.push_back(t.encode(x));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 20; ++r)
        for (std::size_t i = 0; i < texts.size(); ++i)
          if (t.encode(texts[(i + static_cast<std::size_t>(k)) % texts.size()]) != want[(i + static_cast<std::size_t>(k)) % texts.size()]) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TokenizerErrors, ClearMessages) {
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; wanted " << needle;
    } catch (const std::exception& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("[tokenizer]"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  expect_error([] { Tokenizer::from_json("{not json"); }, "not valid JSON");
  expect_error([] { Tokenizer::from_json(R"({"model":{"type":"Unigram","vocab":[]}})"); }, "Unigram");
  expect_error([] { Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}})"); }, "merge #0");
  expect_error([] { Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0}},"normalizer":{"type":"NFKD"}})"); }, "NFKD");
  expect_error([] { Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(("}}})"); }, "regex");
  expect_error([] { Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":"x"}})"); }, "vocab");
  expect_error([] { Tokenizer::from_dir("/nonexistent-kiln-dir"); }, "tokenizer.json");
  expect_error([] { byte_level().decode(std::vector<TokenId>{1, 999999}); }, "out of range");
  expect_error([] { byte_level().decode(std::vector<TokenId>{-1}); }, "out of range");
}

}  // namespace
}  // namespace kiln::text
