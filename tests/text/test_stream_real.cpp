// Streaming detokenizer on the real tokenizers: deltas concatenate to the full decode for encodings
// of hard text and for random id sequences, with and without stop strings.
#include <gtest/gtest.h>

#include <random>

#include "real_models.hpp"
#include "text/stream_decoder.hpp"

namespace kiln::text {
namespace {

using namespace testing;

class RealStream : public ::testing::TestWithParam<RealModel> {};

TEST_P(RealStream, DeltasConcatenateToFullDecode) {
  KILN_LOAD_REAL_OR_SKIP(tok, GetParam());
  std::mt19937 rng(99);
  const auto n = static_cast<TokenId>(tok->vocab_size());
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<TokenId> ids;
    if (iter % 2 == 0) {
      ids = tok->encode(random_text(rng, 1 + iter % 50, iter % 6 == 0, {"<|im_end|>", "<start_of_turn>", "<think>"}));
    } else {
      int len = std::uniform_int_distribution<int>(0, 40)(rng);
      for (int k = 0; k < len; ++k) ids.push_back(std::uniform_int_distribution<TokenId>(0, n - 1)(rng));
    }
    std::string full = tok->decode(ids);
    StreamOptions o;
    std::string stop;
    if (iter % 3 == 0 && full.size() > 6) {
      std::size_t a = std::uniform_int_distribution<std::size_t>(0, full.size() - 3)(rng);
      stop = full.substr(a, 3);
      if (utf8::is_valid(stop)) o.stop = {stop};
      else stop.clear();
    }
    StreamDecoder d(*tok, o);
    std::string all;
    for (TokenId id : ids) {
      std::string delta = d.push(id);
      ASSERT_TRUE(utf8::is_valid(delta));
      all += delta;
    }
    all += d.finish();
    std::string want = stop.empty() ? full : full.substr(0, full.find(stop));
    ASSERT_EQ(all, want) << "ids " << nlohmann::json(ids).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RealStream, ::testing::ValuesIn(real_models()),
                         [](const ::testing::TestParamInfo<RealModel>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln::text
