// The per-request sampler: greedy ties, the cuts (top-k / top-p / min-p), penalties, bias, seeds,
// and logprobs of the distribution sampled from.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sched/sampler.hpp"

using kiln::sched::Sampler;
using kiln::sched::SamplingParams;

TEST(Sampler, GreedyTakesTheLowestIdAmongTies) {
  const std::vector<float> x = {1, 3, 3, 2};
  Sampler s(SamplingParams{}, x.size());
  EXPECT_EQ(s.sample(x.data()).token, 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(i * 1.7));
  const auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.5;
    p.seed = seed;
    Sampler s(p, x.size());
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(x.data()).token);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, TopKTopPMinPKeepOnlyTheHead) {
  const std::vector<float> x = {5, 4.9f, 1, 0, -1, -2};
  for (int mode = 0; mode < 3; ++mode) {
    SamplingParams p;
    p.temperature = 1;
    if (mode == 0) p.top_k = 2;
    if (mode == 1) p.top_p = 0.9;
    if (mode == 2) p.min_p = 0.5;
    std::map<int32_t, int> seen;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      p.seed = seed;
      Sampler s(p, x.size());
      ++seen[s.sample(x.data()).token];
    }
    EXPECT_EQ(seen.size(), 2u) << "mode " << mode;
    EXPECT_TRUE(seen.count(0) && seen.count(1)) << "mode " << mode;
  }
}

TEST(Sampler, LogitBiasBansAndForces) {
  const std::vector<float> x = {5, 1, 0};
  SamplingParams p;
  p.logit_bias = {{0, -100}, {2, 10}};
  Sampler s(p, x.size());
  EXPECT_EQ(s.sample(x.data()).token, 2);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  const std::vector<float> x = {2, 1.5f, 0};
  SamplingParams p;
  p.frequency_penalty = 1;
  Sampler s(p, x.size());
  EXPECT_EQ(s.sample(x.data()).token, 0);
  EXPECT_EQ(s.sample(x.data()).token, 1);  // 2 - 1 < 1.5
  SamplingParams r;
  r.repetition_penalty = 2;
  Sampler s2(r, x.size(), {0});  // the prompt holds token 0: 2 / 2 = 1 < 1.5
  EXPECT_EQ(s2.sample(x.data()).token, 1);
}

TEST(Sampler, LogprobsAreOfTheDistributionSampled) {
  const std::vector<float> x = {2, 1, 0, -1};
  SamplingParams p;
  p.top_logprobs = 3;
  Sampler g(p, x.size());
  const auto a = g.sample(x.data());
  double z = 0;
  for (float v : x) z += std::exp(v);
  EXPECT_NEAR(a.logprob, 2 - std::log(z), 1e-5);
  ASSERT_EQ(a.top.size(), 3u);
  EXPECT_EQ(a.top[1].token, 1);
  // top_k 2 at temperature 0.5: the kept two renormalised.
  p.temperature = 0.5;
  p.top_k = 2;
  Sampler s(p, x.size());
  const auto b = s.sample(x.data());
  const double p0 = std::exp(4.0) / (std::exp(4.0) + std::exp(2.0));
  ASSERT_EQ(b.top.size(), 2u);
  EXPECT_NEAR(b.top[0].logprob, std::log(p0), 1e-5);
  EXPECT_NEAR(b.top[1].logprob, std::log(1 - p0), 1e-5);
}
