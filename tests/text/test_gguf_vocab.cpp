// Tokenizer::from_vocab on a real GGUF SentencePiece vocabulary (stories260K: tokens + scores, no
// merges): the greedy sample's ids decode to the expected text, and text round-trips. The GGUF
// metadata reader here is a minimal one for the test only (the model host owns real GGUF loading).
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "text/stream_decoder.hpp"
#include "text/tokenizer.hpp"
#include "text_test_util.hpp"

namespace kiln::text {
namespace {

using namespace testing;

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  std::int64_t bos = -1, eos = -1, unk = -1;
};

class Reader {
 public:
  explicit Reader(const std::string& d) : d_(d.begin(), d.end()) {}
  template <class T>
  T get() {
    if (p_ + sizeof(T) > d_.size()) throw std::runtime_error("truncated GGUF");
    T v{};
    std::memcpy(&v, d_.data() + p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str() {
    auto n = get<std::uint64_t>();
    if (p_ + n > d_.size()) throw std::runtime_error("truncated GGUF string");
    std::string s(d_.begin() + static_cast<std::ptrdiff_t>(p_), d_.begin() + static_cast<std::ptrdiff_t>(p_ + n));
    p_ += n;
    return s;
  }
  void skip(std::uint32_t type) {
    static const std::size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) { str(); return; }
    if (type == 9) {
      auto t = get<std::uint32_t>();
      auto n = get<std::uint64_t>();
      for (std::uint64_t i = 0; i < n; ++i) skip(t);
      return;
    }
    if (type > 12) throw std::runtime_error("bad GGUF type");
    p_ += sizes[type];
  }
  std::int64_t integer(std::uint32_t type) {
    switch (type) {
      case 4: return get<std::uint32_t>();
      case 5: return get<std::int32_t>();
      case 10: return static_cast<std::int64_t>(get<std::uint64_t>());
      case 11: return get<std::int64_t>();
      default: skip(type); return -1;
    }
  }

 private:
  std::vector<char> d_;
  std::size_t p_ = 0;
};

GgufVocab read_gguf_vocab(const fs::path& p) {
  Reader r(read_file(p));
  if (r.get<std::uint32_t>() != 0x46554747) throw std::runtime_error("not GGUF");
  r.get<std::uint32_t>();  // version
  r.get<std::uint64_t>();  // tensors
  auto kvs = r.get<std::uint64_t>();
  GgufVocab v;
  for (std::uint64_t i = 0; i < kvs; ++i) {
    std::string key = r.str();
    auto type = r.get<std::uint32_t>();
    if (type == 9 && (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" || key == "tokenizer.ggml.token_type")) {
      auto et = r.get<std::uint32_t>();
      auto n = r.get<std::uint64_t>();
      for (std::uint64_t k = 0; k < n; ++k) {
        if (key == "tokenizer.ggml.tokens" && et == 8) v.tokens.push_back(r.str());
        else if (key == "tokenizer.ggml.scores" && et == 6) v.scores.push_back(r.get<float>());
        else if (key == "tokenizer.ggml.token_type" && et == 5) v.types.push_back(r.get<std::int32_t>());
        else r.skip(et);
      }
    } else if (key == "tokenizer.ggml.bos_token_id") {
      v.bos = r.integer(type);
    } else if (key == "tokenizer.ggml.eos_token_id") {
      v.eos = r.integer(type);
    } else if (key == "tokenizer.ggml.unknown_token_id") {
      v.unk = r.integer(type);
    } else {
      r.skip(type);
    }
  }
  return v;
}

TEST(GgufVocab, Stories260kDecodesTheExpectedSample) {
  fs::path dir = fixtures_dir() / "stories260K";
  if (!fs::exists(dir / "stories260K.gguf") || !fs::exists(dir / "EXPECTED_GREEDY.txt"))
    GTEST_SKIP() << "missing " << (dir / "stories260K.gguf") << " or EXPECTED_GREEDY.txt";
  GgufVocab g = read_gguf_vocab(dir / "stories260K.gguf");
  ASSERT_EQ(g.tokens.size(), 512u);
  ASSERT_EQ(g.scores.size(), g.tokens.size());
  VocabSpec v;
  v.type = VocabSpec::Type::kSentencePieceBpe;
  v.tokens = g.tokens;
  v.scores = g.scores;
  v.add_space_prefix = true;
  for (std::size_t i = 0; i < g.types.size(); ++i)
    if (g.types[i] == 3) v.added.push_back({g.tokens[i], static_cast<TokenId>(i), true});  // control
  if (g.unk >= 0) v.unk = static_cast<TokenId>(g.unk);
  if (g.bos >= 0) v.bos = static_cast<TokenId>(g.bos);
  if (g.eos >= 0) v.eos = static_cast<TokenId>(g.eos);
  v.add_bos = v.bos.has_value();
  Tokenizer tok = Tokenizer::from_vocab(v);

  std::string expected = read_file(dir / "EXPECTED_GREEDY.txt");
  std::size_t open = expected.find("ids: [");
  ASSERT_NE(open, std::string::npos);
  std::size_t close = expected.find(']', open);
  ASSERT_NE(close, std::string::npos);
  std::vector<TokenId> ids;
  std::string list = expected.substr(open + 6, close - open - 6);
  for (std::size_t pos = 0; pos < list.size();) {
    std::size_t end = list.find(',', pos);
    ids.push_back(std::stoi(list.substr(pos, end - pos)));
    pos = end == std::string::npos ? list.size() : end + 1;
  }
  ASSERT_EQ(ids.size(), 40u);
  std::size_t text_at = expected.find("\n ", expected.find("Text of first"));
  ASSERT_NE(text_at, std::string::npos);
  std::string text = expected.substr(text_at + 1);
  // Generated continuation after BOS: decode without the first-token space strip.
  StreamOptions cont;
  cont.at_sequence_start = false;
  StreamDecoder sd(tok, cont);
  std::string got;
  for (TokenId id : ids) got += sd.push(id);
  got += sd.finish();
  EXPECT_EQ(text.compare(0, got.size(), got), 0) << "decoded: [" << got << "]";
  EXPECT_GT(got.size(), 100u);
  // The full decode strips the leading space of the first token, as llama.cpp/HF do for a prompt.
  EXPECT_EQ(tok.decode(ids), got.substr(1));
  // Text round-trips, and a BOS is added with add_special.
  std::string sample = "Once upon a time, there was a little girl named Lily.\nShe loved the park!";
  EXPECT_EQ(tok.decode(tok.encode(sample)), sample);
  EncodeOptions add;
  add.add_special = true;
  EXPECT_EQ(tok.encode(sample, add).front(), static_cast<TokenId>(g.bos));
  // The greedy sample is the model's own tokenization: encoding its text gives the same ids.
  std::vector<TokenId> enc = tok.encode(got.substr(1));
  EXPECT_EQ(enc, ids);
}

}  // namespace
}  // namespace kiln::text
