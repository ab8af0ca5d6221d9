// The per-request sampler: greedy ties, the cuts (top-k / top-p / min-p), penalties, bias, seeds,
// and logprobs of the distribution sampled from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

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

// A row's best ids from the device (value descending, ties to the lower id) are enough for greedy
// and top-k sampling: the same tokens, logprobs and RNG draws as from the whole row, over ties,
// sampleable masks whose excluded ids rank high, and every cut.
TEST(Sampler, CandidatesPickAsTheWholeRowDoes) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t V = trial % 3 == 0 ? 40 : 3000;
    const int levels = trial % 2 ? 7 : 100000;  // few levels: ties across the k-th place
    std::vector<uint64_t> ok((V + 63) / 64, ~uint64_t{0});
    const bool masked = trial % 4 == 1;
    size_t excluded = 0;
    if (masked)
      for (size_t t = 0; t < V; t += 37) ok[t >> 6] &= ~(uint64_t{1} << (t & 63)), ++excluded;
    SamplingParams p;
    p.seed = static_cast<uint64_t>(trial);
    const int kind = trial % 5;
    p.temperature = kind == 0 ? 0.0 : std::vector<double>{0.3, 1.0, 1.7}[trial % 3];
    p.top_k = kind == 0 ? 0 : std::vector<int>{1, 5, 20, 64}[trial % 4];
    p.top_p = kind == 2 ? 0.6 : kind == 3 ? 0.95 : 1.0;
    p.min_p = kind == 4 ? 0.05 : 0.0;
    p.top_logprobs = kind == 0 ? -1 : trial % 3 == 0 ? -1 : 5;
    Sampler whole(p, V, {}, masked ? ok.data() : nullptr), cand(p, V, {}, masked ? ok.data() : nullptr);
    const size_t need = whole.candidates_needed();
    ASSERT_GT(need, 0u) << "trial " << trial;
    const size_t k = std::min(V, size_t{64} + excluded);
    std::vector<float> x(V);
    std::vector<int32_t> order(V);
    for (int step = 0; step < 20; ++step) {
      for (size_t i = 0; i < V; ++i) {
        x[i] = static_cast<float>(static_cast<int>(rng() % static_cast<uint32_t>(levels))) * (8.0f / levels);
        if (masked && i % 37 == 0 && step % 2) x[i] = 100;  // excluded ids at the very top
      }
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
      std::vector<float> vals(k);
      for (size_t i = 0; i < k; ++i) vals[i] = x[static_cast<size_t>(order[i])];
      const auto a = whole.sample(x.data());
      const auto b = cand.sample_candidates(order.data(), vals.data(), k);
      ASSERT_EQ(a.token, b.token) << "trial " << trial << " step " << step;
      ASSERT_EQ(a.logprob, b.logprob);
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t i = 0; i < a.top.size(); ++i) {
        EXPECT_EQ(a.top[i].token, b.top[i].token);
        EXPECT_EQ(a.top[i].logprob, b.top[i].logprob);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6000);
}

TEST(Sampler, WholeRowNeedsAreNamed) {
  SamplingParams p;
  EXPECT_EQ(Sampler(p, 100).candidates_needed(), 1u);  // greedy
  p.top_logprobs = 2;
  EXPECT_EQ(Sampler(p, 100).candidates_needed(), 0u);  // greedy logprobs: the whole softmax
  p = {};
  p.temperature = 0.7;
  EXPECT_EQ(Sampler(p, 100).candidates_needed(), 0u);  // no top_k: the whole distribution
  p.top_k = 20;
  EXPECT_EQ(Sampler(p, 100).candidates_needed(), 20u);
  for (int which = 0; which < 4; ++which) {
    SamplingParams q = p;
    if (which == 0) q.logit_bias = {{3, 1.0f}};
    if (which == 1) q.repetition_penalty = 1.1;
    if (which == 2) q.presence_penalty = 0.5;
    if (which == 3) q.frequency_penalty = 0.5;
    EXPECT_EQ(Sampler(q, 100).candidates_needed(), 0u) << which;
  }
  p = {};
  p.temperature = 0.7;
  Sampler t(p, 10);
  const int32_t ids[] = {1};
  const float v[] = {0};
  EXPECT_THROW(t.sample_candidates(ids, v, 1), std::logic_error);
}
