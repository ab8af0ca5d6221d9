// Streaming detokenizer properties on toy tokenizers: for many random id sequences (byte-level
// fragments, byte-fallback runs valid and invalid, added tokens, leading-space rules) the deltas
// concatenate to the full decode, no delta is invalid UTF-8, and stop strings cut exactly.
#include <gtest/gtest.h>

#include <random>

#include "text/stream_decoder.hpp"
#include "text/tokenizer.hpp"
#include "text_test_util.hpp"
#include "toy_tokenizers.hpp"

namespace kiln::text {
namespace {

std::string stream_all(const Tokenizer& t, const std::vector<TokenId>& ids, StreamOptions o = {}, bool* stopped = nullptr) {
  StreamDecoder d(t, std::move(o));
  std::string all;
  for (TokenId id : ids) {
    std::string delta = d.push(id);
    EXPECT_TRUE(utf8::is_valid(delta)) << "delta is not valid UTF-8";
    all += delta;
  }
  std::string tail = d.finish();
  EXPECT_TRUE(utf8::is_valid(tail));
  all += tail;
  if (stopped) *stopped = d.stopped();
  return all;
}

std::string cut_at_stop(const std::string& full, const std::vector<std::string>& stops) {
  std::size_t best = std::string::npos;
  for (const auto& s : stops) best = std::min(best, full.find(s));
  return best == std::string::npos ? full : full.substr(0, best);
}

void check_tokenizer(const Tokenizer& t, unsigned seed) {
  std::mt19937 rng(seed);
  const auto n = static_cast<TokenId>(t.vocab_size());
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<TokenId> ids;
    int len = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < len; ++i) {
      TokenId id = std::uniform_int_distribution<TokenId>(0, n - 1)(rng);
      if (t.id_to_token(id).empty()) continue;
      ids.push_back(id);
    }
    std::string full = t.decode(ids);
    ASSERT_EQ(stream_all(t, ids), full);
    DecodeOptions skip;
    skip.skip_special = true;
    StreamOptions sk;
    sk.skip_special = true;
    ASSERT_EQ(stream_all(t, ids, sk), t.decode(ids, skip));
    // Stop strings: pieces of the decoded text itself, so they really occur and span tokens.
    if (full.size() > 4) {
      std::size_t a = std::uniform_int_distribution<std::size_t>(0, full.size() - 2)(rng);
      std::size_t l = std::uniform_int_distribution<std::size_t>(1, std::min<std::size_t>(8, full.size() - a))(rng);
      std::string stop = full.substr(a, l);
      if (!utf8::is_valid(stop)) continue;
      StreamOptions so;
      so.stop = {stop, "\x01never"};
      bool stopped = false;
      ASSERT_EQ(stream_all(t, ids, so, &stopped), cut_at_stop(full, so.stop));
      ASSERT_TRUE(stopped);
    }
  }
}

TEST(StreamToy, ByteLevel) { check_tokenizer(Tokenizer::from_vocab(testing::toy_byte_level_spec()), 11); }
TEST(StreamToy, GemmaByteFallback) { check_tokenizer(Tokenizer::from_json(testing::toy_gemma_json()), 12); }
TEST(StreamToy, Llama2Strip) { check_tokenizer(Tokenizer::from_json(testing::toy_gemma_json(true)), 13); }

TEST(StreamToy, SentencePieceFromVocab) {
  VocabSpec v;
  v.type = VocabSpec::Type::kSentencePieceBpe;
  v.add_space_prefix = true;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
  }
  for (const char* s : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a"}) v.tokens.push_back(s);
  v.merges.push_back({"\xE2\x96\x81", "a"});
  v.unk = 0;
  Tokenizer t = Tokenizer::from_vocab(v);
  std::vector<TokenId> ids = t.encode("a b");
  EXPECT_EQ(ids, (std::vector<TokenId>{259, 256, 258}));  // ▁a ▁ b
  EXPECT_EQ(t.decode(ids), "a b");                        // leading space stripped (Metaspace)
  EXPECT_EQ(stream_all(t, ids), "a b");
  StreamOptions cont;
  cont.at_sequence_start = false;  // continuing after a prompt: the space is real
  EXPECT_EQ(stream_all(t, ids, cont), " a b");
  check_tokenizer(t, 14);
}

TEST(StreamToy, SentencePieceMergesFromScores) {
  // A llama-style GGUF vocabulary: no merges, scores rank the tokens (higher merges first).
  VocabSpec v;
  v.type = VocabSpec::Type::kSentencePieceBpe;
  v.add_space_prefix = true;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xE2\x96\x81", -1}, {"a", -2}, {"b", -3}, {"c", -4}, {"ab", -5}, {"bc", -1.5f}, {"\xE2\x96\x81" "a", -6}, {"abc", -7}};
  for (const auto& [p, sc] : pieces) {
    v.tokens.push_back(p);
    v.scores.push_back(sc);
  }
  Tokenizer t = Tokenizer::from_vocab(v);
  // "bc" outranks "ab", so "abc" is a + bc (no merge makes "abc" from those).
  EXPECT_EQ(t.encode("abc"), (std::vector<TokenId>{*t.token_to_id("\xE2\x96\x81" "a"), *t.token_to_id("bc")}));
  EXPECT_EQ(t.decode(t.encode("abc cab")), "abc cab");
}

TEST(StreamToy, HoldsIncompleteUtf8AndStopPrefixes) {
  Tokenizer t = Tokenizer::from_vocab(testing::toy_byte_level_spec());
  // "中" = E4 B8 AD, one byte-level token per byte.
  StreamDecoder d(t, {});
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "\xE4\xB8\xAD");
  StreamOptions o;
  o.stop = {"END"};
  StreamDecoder s(t, o);
  EXPECT_EQ(s.push('a'), "a");
  EXPECT_EQ(s.push('E'), "");
  EXPECT_EQ(s.push('N'), "");
  EXPECT_EQ(s.push('x'), "ENx");
  EXPECT_EQ(s.push('E'), "");
  EXPECT_EQ(s.push('N'), "");
  EXPECT_EQ(s.push('D'), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_index(), 0);
  EXPECT_EQ(s.push('z'), "");
  EXPECT_EQ(s.finish(), "");
}

}  // namespace
}  // namespace kiln::text
