// Prefix caching: the scheduler on the model host (no threads, exact) for a full-attention model
// (stories260K) and the hybrid test model (delta-rule, sliding-window and full layers at once), and
// kiln serve's usage.cached_tokens, cache_salt and metrics over HTTP.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "gemma4_checkpoint.hpp"
#include "host_helpers.hpp"
#include "llama_helpers.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "sched/sampler.hpp"
#include "sched/scheduler.hpp"
#include "server_harness.hpp"
#include "source_paths.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_5(uint32_t, uint32_t);

namespace kiln::sched {
namespace {

const std::string kStories = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";

model::HostOptions options(uint32_t blocks = 256, uint32_t budget = 256) {
  model::HostOptions o = test::cpu_options();
  o.max_context = 256;
  o.max_seqs = 8;
  o.max_batch_tokens = budget;
  o.cache.block_tokens = 16;
  o.cache.memory_bytes = uint64_t{blocks} * 16 * 1280;  // stories260K: 1280 bytes of f32 K and V per token
  o.prefix_snapshots = true;
  return o;
}

/** The hybrid test model's host: 4 sequences, blocks of 4 tokens, snapshots for the prefix cache. */
model::HostOptions hybrid_options(uint32_t max_context = 128) {
  model::HostOptions o = test::cpu_options();
  o.max_context = max_context;
  o.max_seqs = 4;
  o.cache.block_tokens = 4;
  o.prefix_snapshots = true;
  return o;
}

std::vector<int32_t> prompt(int seed, size_t n, int vocab = 500) {
  std::vector<int32_t> p = {1};
  for (size_t i = 1; i < n; ++i) p.push_back(static_cast<int32_t>(3 + (seed * 131 + i * 17) % (vocab - 3)));
  return p;
}

/**
 * Runs until every sequence has `gen` tokens, greedy or sampled with `sampling` (one seeded sampler
 * per sequence, as the engine has); prefill tokens the steps computed in `computed`.
 */
void run(model::ModelHost& host, Scheduler& sched, std::vector<Sequence*> seqs, size_t gen,
         uint64_t* computed = nullptr, const SamplingParams* sampling = nullptr) {
  std::map<Sequence*, Sampler> samplers;
  for (Sequence* s : seqs) {
    sched.enqueue(s);
    if (sampling) samplers.emplace(s, Sampler(*sampling, host.limits().n_vocab, s->tokens));
  }
  const uint32_t V = host.limits().n_vocab;
  size_t done = 0;
  for (int guard = 0; done < seqs.size() && guard < 100000; ++guard) {
    Plan p = sched.plan();
    ASSERT_FALSE(p.empty());
    model::StepResult r;
    const model::StepStatus st = host.step(p.steps(), &r);
    ASSERT_TRUE(st.ok()) << st.message;
    sched.commit(p);
    if (computed) *computed += p.prefill_tokens;
    for (size_t i = 0; i < p.rows.size(); ++i) {
      if (!p.rows[i].sample) continue;
      uint32_t row = 0;
      while (r.row_seq[row] != p.rows[i].step.seq) ++row;
      Sequence* s = p.rows[i].seq;
      const float* logits = r.logits.data() + size_t{row} * V;
      s->tokens.push_back(sampling ? samplers.at(s).sample(logits).token : test::argmax(logits, V));
      if (s->tokens.size() - s->prompt_len == gen) {
        sched.remove(s);
        ++done;
      }
    }
  }
}

Sequence seq(std::vector<int32_t> tokens, std::string salt = "") {
  Sequence s;
  s.prompt_len = static_cast<uint32_t>(tokens.size());
  s.tokens = std::move(tokens);
  s.cache_key = std::move(salt);
  return s;
}

std::vector<int32_t> output(const Sequence& s) {
  return {s.tokens.begin() + s.prompt_len, s.tokens.end()};
}

TEST(PrefixCache, ARepeatedPromptStartsOnItsCachedBlocksAndGivesTheSameTokens) {
  auto host = model::ModelHost::open(kStories, test::llama_registry(), options());
  Scheduler sched(*host, 0, true);
  Sequence a = seq(prompt(1, 100)), b = seq(prompt(1, 100)), c = seq(prompt(1, 100), "tenant-2");
  run(*host, sched, {&a}, 30);
  EXPECT_EQ(a.cached, 0u);
  uint64_t computed = 0;
  run(*host, sched, {&b}, 30, &computed);
  // Whole blocks of the first 99 tokens (the last prompt token is always recomputed).
  EXPECT_EQ(b.cached, 96u);
  EXPECT_EQ(computed, 4u);
  EXPECT_EQ(output(b), output(a));
  // Another salt shares nothing.
  run(*host, sched, {&c}, 30);
  EXPECT_EQ(c.cached, 0u);
  EXPECT_EQ(output(c), output(a));
  // A next turn (the first prompt, its answer and more) reuses the answer's blocks too: the first
  // 129 of its 130 tokens were computed (the last sampled token never was), 128 in whole blocks.
  std::vector<int32_t> longer = a.tokens;
  longer.push_back(7);
  Sequence d = seq(longer);
  run(*host, sched, {&d}, 4);
  EXPECT_EQ(d.cached, 128u);
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.prefix_hits, 2u);
  EXPECT_EQ(st.cached_tokens, 96u + 128u);
  EXPECT_GT(st.cached_blocks, 0u);
}

TEST(PrefixCache, SimultaneousArrivalsComputeTheirSharedPrefixOnce) {
  // Prefill chunks of 32 tokens: while the first sequence computes the shared 160 tokens, the
  // others wait for those blocks instead of computing them too.
  auto host = model::ModelHost::open(kStories, test::llama_registry(), options(256, 32));
  Scheduler sched(*host, 0, true);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prompt(3, 160);
    p.push_back(10 + i);  // different last tokens
    seqs.push_back(seq(p));
  }
  uint64_t computed = 0;
  run(*host, sched, {&seqs[0], &seqs[1], &seqs[2], &seqs[3]}, 8, &computed);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(seqs[i].cached, 160u) << i;
  // The first computes 160 tokens in prefill steps (its last prompt token runs as a decode step);
  // each of the others its one own token.
  EXPECT_EQ(computed, 160u + 3u);
  // Each output is the one it has alone on a host without a prefix cache.
  auto plain = model::ModelHost::open(kStories, test::llama_registry(), options(256, 32));
  Scheduler uncached(*plain);
  for (int i = 0; i < 4; ++i) {
    Sequence s = seq(std::vector<int32_t>(seqs[i].tokens.begin(), seqs[i].tokens.begin() + seqs[i].prompt_len));
    run(*plain, uncached, {&s}, 8);
    EXPECT_EQ(output(s), output(seqs[i])) << i;
  }
}

TEST(PrefixCache, UnderMemoryPressureCachedBlocksGoBeforeAnySequenceIsPreempted) {
  // 24 blocks; each request takes 5 (64 + 16 tokens): the tree keeps what the last ones left and
  // gives it up, least recently used first, when a new request needs the room.
  auto host = model::ModelHost::open(kStories, test::llama_registry(), options(24));
  Scheduler sched(*host, 0, true);
  std::vector<std::vector<int32_t>> outs;
  for (int i = 0; i < 8; ++i) {
    Sequence s = seq(prompt(10 + i, 64));
    run(*host, sched, {&s}, 16);
    outs.push_back(output(s));
  }
  const SchedulerStats st = sched.stats();
  EXPECT_GT(st.evicted_blocks, 0u);
  EXPECT_EQ(st.preemptions, 0u);
  // The most recent prompt is still cached.
  Sequence again = seq(prompt(17, 64));
  run(*host, sched, {&again}, 16);
  EXPECT_EQ(again.cached, 48u);
  EXPECT_EQ(output(again), outs.back());
}

TEST(PrefixCache, AHybridModelResumesAtTheDeepestPositionEveryCacheKindServes) {
  // Delta-rule layers (snapshots every 8 tokens), a sliding window of 16 and full attention.
  test::TempDir dir;
  test::HybridSpec spec;
  spec.layers = {"linear", "sliding", "full", "linear"};
  spec.window = 16;
  test::write_tiny_hybrid(dir.str(), spec);
  const model::HostOptions o = hybrid_options();
  auto host = model::ModelHost::open(dir.str(), test::host_registry(), o);
  ASSERT_TRUE(host->limits().recurrent);
  ASSERT_GT(host->limits().snapshot_slots, 0u);
  Scheduler sched(*host, 0, true);
  Sequence a = seq(prompt(5, 43, 96));
  run(*host, sched, {&a}, 6);
  // The prefill was cut at 40 (the last multiple of the delta-rule chunk before the prompt's end),
  // where a snapshot was taken; a second request resumes there: recurrent state from the snapshot,
  // the sliding layer's last window and the full layer's blocks from the tree.
  Sequence b = seq(prompt(5, 43, 96));
  run(*host, sched, {&b}, 6);
  EXPECT_EQ(b.cached, 40u);
  EXPECT_EQ(output(b), output(a));
  // The same against a host without any cache: the bits of an uninterrupted run.
  auto plain = model::ModelHost::open(dir.str(), test::host_registry(), o);
  Scheduler uncached(*plain);
  Sequence c = seq(prompt(5, 43, 96));
  run(*plain, uncached, {&c}, 6);
  EXPECT_EQ(output(c), output(a));
  EXPECT_GT(sched.stats().snapshots, 0u);
}

// A state's bits depend on where the steps that built it ended (the chunked delta rule cuts at
// absolute chunk multiples; a decode step is one step of the recurrence): after a decode step or a
// budget cut off the chunk grid, no snapshot of that sequence may serve a hit.
TEST(PrefixCache, HybridSnapshotsComeOnlyFromStepsOnTheChunkGrid) {
  test::TempDir dir;
  test::HybridSpec spec;
  spec.layers = {"linear", "full", "linear"};
  test::write_tiny_hybrid(dir.str(), spec);  // delta-rule chunk 8
  const model::HostOptions o = hybrid_options();
  for (uint32_t budget : {0u, 5u}) {  // 5: prefill steps end at 5, 10, 15, ...
    SCOPED_TRACE(budget);
    auto host = model::ModelHost::open(dir.str(), test::host_registry(), o);
    auto plain = model::ModelHost::open(dir.str(), test::host_registry(), o);
    Scheduler cached(*host, budget, true), uncached(*plain, budget);
    Sequence a = seq(prompt(6, 21, 96));
    run(*host, cached, {&a}, 21);  // decodes through 24, 32 and 40
    std::vector<int32_t> longer = a.tokens;
    for (int i = 0; i < 3; ++i) longer.push_back(5 + i);
    Sequence b = seq(longer), c = seq(longer);
    run(*host, cached, {&b}, 6);
    run(*plain, uncached, {&c}, 6);
    EXPECT_EQ(output(b), output(c)) << "reused " << b.cached;
    // The prompt's own prefill ended at 16, on the grid; under a budget of 5 no step did.
    EXPECT_EQ(b.cached, budget == 0 ? 16u : 0u);
  }
}

/** One architecture of the exactness test: its model, a block size, where hits can land. */
struct Arch {
  std::string name;
  uint32_t block_tokens;
  uint32_t hit_grid;  ///< hits land on multiples of this (blocks; delta-rule chunks for hybrids)
  int vocab;
};

/** (architecture, temperature, cache.kv_dtype) */
class PrefixExactness : public ::testing::TestWithParam<std::tuple<Arch, double, const char*>> {};

PluginRegistry& all_models() {
  static const bool init = [] {
    PluginRegistry& r = test::host_registry();
    if (!r.find_model_type("gemma4_text")) r.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
    if (!r.find_model_type("qwen3_5")) r.register_static(&kiln_plugin_descriptor_qwen3_5, "<static qwen3_5>");
    return true;
  }();
  (void)init;
  return test::host_registry();
}

// Hits inside a block, on a block boundary, on a delta-rule chunk boundary, past the sliding
// window (8 on gemma4's): generation from a cache hit has the bits of a fresh host's, greedy and
// seeded at temperature 1, and with quantized caches (a row's quantized bits depend on it alone).
TEST_P(PrefixExactness, AHitGivesTheBitsOfAFreshHostAtEveryPosition) {
  const Arch& a = std::get<0>(GetParam());
  test::TempDir dir;
  std::string path = kStories;
  if (a.name == "gemma4") {
    test::write_gemma4_hf(test::gemma4_kitchen_sink(), dir.str());
    path = dir.str();
  } else if (a.name == "qwen3_5") {
    test::write_qwen35_hf(test::qwen35_moe_tiny(), dir.str());
    path = dir.str();
  }
  model::HostOptions o = test::cpu_options();
  o.max_context = 256;
  o.max_seqs = 4;
  o.cache.block_tokens = a.block_tokens;
  o.prefix_snapshots = true;
  o.cache.kv_dtype = std::get<2>(GetParam());
  // Every layer quantized: the last one, and gemma4's donor layers 2 and 3 (its last layers share).
  o.cache.kv_layers = {{-1, o.cache.kv_dtype}};
  if (a.name == "gemma4") o.cache.kv_layers = {{2, o.cache.kv_dtype}, {3, o.cache.kv_dtype}};
  auto cached_host = model::ModelHost::open(path, all_models(), o);
  auto fresh_host = model::ModelHost::open(path, all_models(), o);
  Scheduler cached(*cached_host, 0, true), fresh(*fresh_host);
  SamplingParams sp;
  sp.temperature = std::get<1>(GetParam());
  sp.seed = 1234;
  const std::vector<int32_t> base = prompt(9, 150, a.vocab);
  Sequence warm = seq(base);
  run(*cached_host, cached, {&warm}, 8, nullptr, &sp);
  uint32_t hits = 0;
  for (uint32_t k : {0u, 37u, 48u, 64u, 90u, 130u, 149u}) {
    std::vector<int32_t> q(base.begin(), base.begin() + k);
    for (int i = 0; i < 12; ++i) q.push_back(static_cast<int32_t>(3 + (k * 7 + i * 29) % (a.vocab - 3)));
    Sequence hit = seq(q), alone = seq(q);
    run(*cached_host, cached, {&hit}, 16, nullptr, &sp);
    run(*fresh_host, fresh, {&alone}, 16, nullptr, &sp);
    EXPECT_EQ(output(hit), output(alone)) << a.name << " hit " << hit.cached << " of a " << k << "-token prefix";
    EXPECT_LE(hit.cached, k);
    EXPECT_EQ(hit.cached % a.hit_grid, 0u) << k;
    hits += hit.cached > 0;
  }
  EXPECT_GE(hits, a.name == "qwen3_5" ? 2u : 5u);
}

const auto kArchs =
    ::testing::Values(Arch{"llama", 16, 16, 500}, Arch{"gemma4", 4, 4, 512}, Arch{"qwen3_5", 16, 64, 512});
const auto kExactnessName = [](const auto& info) {
  const std::string kv = std::get<2>(info.param);
  return std::get<0>(info.param).name + (std::get<1>(info.param) > 0 ? "_temperature1" : "_greedy") +
         (kv == "f32" ? "" : "_" + kv);
};
INSTANTIATE_TEST_SUITE_P(Architectures, PrefixExactness,
                         ::testing::Combine(kArchs, ::testing::Values(0.0, 1.0), ::testing::Values("f32")),
                         kExactnessName);
INSTANTIATE_TEST_SUITE_P(QuantizedKv, PrefixExactness,
                         ::testing::Combine(kArchs, ::testing::Values(0.0), ::testing::Values("q8", "q4")),
                         kExactnessName);

TEST(PrefixCache, ACancelledPrefillPublishesOnlyWhatItComputed) {
  auto host = model::ModelHost::open(kStories, test::llama_registry(), options(256, 32));
  Scheduler sched(*host, 0, true);
  Sequence a = seq(prompt(4, 150));
  sched.enqueue(&a);
  for (int i = 0; i < 2; ++i) {  // two chunks of 32 tokens, then the client goes away
    Plan p = sched.plan();
    model::StepResult r;
    ASSERT_TRUE(host->step(p.steps(), &r).ok());
    sched.commit(p);
  }
  ASSERT_EQ(a.computed, 64u);
  sched.remove(&a);
  Sequence b = seq(prompt(4, 150));
  run(*host, sched, {&b}, 8);
  EXPECT_EQ(b.cached, 64u);
  auto plain = model::ModelHost::open(kStories, test::llama_registry(), options(256, 32));
  Scheduler uncached(*plain);
  Sequence c = seq(prompt(4, 150));
  run(*plain, uncached, {&c}, 8);
  EXPECT_EQ(output(b), output(c));
}

/**
 * A router's view of one replica, built from its KV-cache events alone, enforcing the protocol on
 * the way: a chain's parent is known before it, a hash is stored once until removed, a removed
 * block has no live children, each block has block_tokens tokens.
 */
struct EventIndex {
  struct Block {
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
    std::string key;
  };
  uint32_t bt;
  std::map<uint64_t, Block> blocks;
  std::map<uint64_t, int> children;
  bool cleared_first = false;

  void apply(const cache::PrefixTree::Event& e) {
    using Kind = cache::PrefixTree::Event::Kind;
    if (e.kind == Kind::cleared) {
      blocks.clear();
      children.clear();
      cleared_first = true;
      return;
    }
    ASSERT_TRUE(cleared_first) << "the first event clears";
    if (e.kind == Kind::removed) {
      for (uint64_t h : e.hashes) {
        ASSERT_TRUE(blocks.count(h)) << "removed an unknown block";
        ASSERT_EQ(children[h], 0) << "removed a block before its children";
        if (blocks[h].parent) --children[*blocks[h].parent];
        blocks.erase(h);
        children.erase(h);
      }
      return;
    }
    ASSERT_FALSE(e.hashes.empty());
    ASSERT_EQ(e.tokens.size(), size_t{bt} * e.hashes.size());
    ASSERT_TRUE(!e.parent || blocks.count(*e.parent)) << "a child before its parent";
    std::optional<uint64_t> parent = e.parent;
    for (size_t i = 0; i < e.hashes.size(); ++i) {
      ASSERT_FALSE(blocks.count(e.hashes[i])) << "stored twice";
      Block b{parent, {e.tokens.begin() + i * bt, e.tokens.begin() + (i + 1) * bt}, parent ? "" : e.key};
      if (parent) ++children[*parent];
      blocks.emplace(e.hashes[i], std::move(b));
      parent = e.hashes[i];
    }
  }
  /** The router's prefix score: whole announced blocks of tokens[0, size - 1). */
  uint32_t score(const std::string& key, const std::vector<int32_t>& tokens) const {
    std::optional<uint64_t> at;
    uint32_t n = 0;
    for (; (n + 1) * bt + 1 <= tokens.size(); ++n) {
      const std::vector<int32_t> want(tokens.begin() + n * bt, tokens.begin() + (n + 1) * bt);
      std::optional<uint64_t> next;
      for (const auto& [h, b] : blocks)
        if (b.parent == at && b.tokens == want && (at || b.key == key)) next = h;
      if (!next) break;
      at = next;
    }
    return n * bt;
  }
  void expect_equals(const std::vector<cache::PrefixTree::Announced>& live) const {
    ASSERT_EQ(live.size(), blocks.size());
    for (const cache::PrefixTree::Announced& a : live) {
      auto it = blocks.find(a.hash);
      ASSERT_NE(it, blocks.end());
      EXPECT_EQ(it->second.parent, a.parent);
      EXPECT_EQ(it->second.tokens, a.tokens);
      EXPECT_EQ(it->second.key, a.key);
    }
  }
};

/**
 * Multi-turn sessions (two tenants by salt), each next turn its last turn's tokens and a few more,
 * in a cache small enough to evict: after every turn the event index equals the announced blocks,
 * and the score it gives the next turn is the prefix the scheduler then reuses.
 */
void events_track_the_tree(model::ModelHost& host, Scheduler& sched, int vocab, size_t first_len, uint32_t bt,
                           bool every_block) {
  ASSERT_TRUE(sched.announce_blocks());
  EventIndex index{bt, {}, {}, false};
  std::vector<std::vector<int32_t>> sessions;
  for (int i = 0; i < 5; ++i) sessions.push_back(prompt(40 + i, first_len, vocab));
  uint32_t hits = 0;
  std::mt19937 rng(7);
  for (int turn = 0; turn < 20; ++turn) {
    const size_t k = rng() % sessions.size();
    const std::string salt = k % 2 ? "tenant-b" : "";
    Sequence s = seq(sessions[k], salt);
    const uint32_t expect = index.score(salt, s.tokens);
    run(host, sched, {&s}, 4 + rng() % 6);
    EXPECT_EQ(s.cached, expect) << "turn " << turn;
    hits += s.cached > 0;
    for (const cache::PrefixTree::Event& e : sched.take_events()) index.apply(e);
    index.expect_equals(sched.announced());
    sessions[k] = s.tokens;
    for (int j = 0; j < 3; ++j) sessions[k].push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    if (sessions[k].size() > 80) sessions[k] = prompt(100 + turn, first_len, vocab);  // a new session
  }
  EXPECT_GT(hits, 5u);
  EXPECT_GT(sched.stats().evicted_blocks, 0u);
  // A recurrent model cannot resume past its last snapshot: those blocks are cached, not announced.
  if (every_block)
    EXPECT_EQ(sched.announced().size(), sched.stats().cached_blocks);
  else
    EXPECT_LT(sched.announced().size(), sched.stats().cached_blocks);
  sched.reset_prefix_cache();
  for (const cache::PrefixTree::Event& e : sched.take_events()) index.apply(e);
  EXPECT_TRUE(index.blocks.empty());
  EXPECT_TRUE(sched.announced().empty());
}

TEST(PrefixCacheEvents, AFullAttentionModelAnnouncesEveryCachedBlock) {
  auto host = model::ModelHost::open(kStories, test::llama_registry(), options(16));
  Scheduler sched(*host, 0, true);
  events_track_the_tree(*host, sched, 500, 40, 16, true);
  // Blocks only the tree holds are idle (vLLM counts them free): with nothing running, all of them.
  const cache::KvCache& kv = host->cache();
  EXPECT_EQ(kv.idle_blocks(0), kv.layout().groups[0].n_blocks - kv.free_blocks(0));
}

TEST(PrefixCacheEvents, AHybridModelAnnouncesOnlyUpToItsSnapshots) {
  test::TempDir dir;
  test::HybridSpec spec;
  spec.layers = {"linear", "sliding", "full", "linear"};
  spec.window = 16;
  test::write_tiny_hybrid(dir.str(), spec);
  model::HostOptions o = hybrid_options(96);
  o.cache.memory_bytes = 112 * 1024;
  o.cache.snapshot_memory_bytes = 64 * 1024;  // snapshots for every session: hits are the rule
  auto host = model::ModelHost::open(dir.str(), test::host_registry(), o);
  Scheduler sched(*host, 0, true, 8);
  events_track_the_tree(*host, sched, 96, 21, 4, false);
}

}  // namespace
}  // namespace kiln::sched

namespace kiln::serve::test {

TEST(ServePrefixCache, UsageReportsCachedTokensAndSaltsKeepTenantsApart) {
  Server s;
  std::string prompt = "Once upon a time";
  for (int i = 0; i < 10; ++i) prompt += " there was a little dog and a cat";
  const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  const json first = s.post("/v1/completions", body);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const json second = s.post("/v1/completions", body);
  const int prompt_tokens = second["usage"]["prompt_tokens"];
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  json salted = body;
  salted["cache_salt"] = "tenant-b";
  EXPECT_EQ(s.post("/v1/completions", salted)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(s.metric("kiln_prefix_cache_hits_total"), 1);
  EXPECT_GT(s.metric("kiln_prefix_cache_tokens_total"), 0);
  EXPECT_GT(s.metric("kiln_prefix_cache_blocks"), 0);
  salted["cache_salt"] = 7;
  int status = 0;
  const json err = s.post("/v1/completions", salted, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(err["error"]["param"], "cache_salt");
}

// Eight requests sent at once share a long prefix and end in suffixes naming each its own marker:
// every one but at most one reuses the prefix (computed once), and each answer is the one it gets
// alone. Repeating a request gives the same bytes.
TEST(ServePrefixCache, SimultaneousArrivalsShareTheirPrefixAndKeepTheirOwnAnswers) {
  std::string prefix = "Once upon a time";
  for (int i = 0; i < 12; ++i) prefix += " there was a little dog and a cat who played in the park";
  const auto body = [&](int i) {
    return json{{"prompt", prefix + ". The marker is " + std::string(1, static_cast<char>('A' + i)) + "."},
                {"max_tokens", 16},
                {"temperature", 0}};
  };
  const int N = 8;
  std::vector<json> alone(N);
  {
    ModelConfig off = model_config();
    off.cache.prefix_caching = false;
    Server s({}, off);
    for (int i = 0; i < N; ++i) alone[i] = s.post("/v1/completions", body(i));
  }
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  Server s({}, model_config(), dev->info().id);
  dev->slow_wait(std::chrono::milliseconds(2));  // so that the eight surely overlap
  std::vector<std::future<json>> together;
  for (int i = 0; i < N; ++i)
    together.push_back(std::async(std::launch::async, [&, i] { return s.post("/v1/completions", body(i)); }));
  int without = 0;
  for (int i = 0; i < N; ++i) {
    const json r = together[i].get();
    const std::string text = r["choices"][0]["text"];
    EXPECT_FALSE(text.empty()) << i;
    EXPECT_EQ(text, alone[i]["choices"][0]["text"]) << i;
    const int cached = r["usage"]["prompt_tokens_details"]["cached_tokens"], total = r["usage"]["prompt_tokens"];
    EXPECT_LT(cached, total) << i;
    without += cached == 0;
  }
  dev->slow_wait(std::chrono::milliseconds(0));
  EXPECT_LE(without, 1);
  // The same request twice: the same bytes (but for id and creation time), the second from the cache.
  json first = s.post("/v1/completions", body(0)), second = s.post("/v1/completions", body(0));
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (json* r : {&first, &second}) {
    r->erase("id");
    r->erase("created");
    (*r)["usage"].erase("prompt_tokens_details");
  }
  EXPECT_EQ(first.dump(), second.dump());
}

TEST(ServePrefixCache, OffMeansNoReuse) {
  ModelConfig mc = model_config();
  mc.cache.prefix_caching = false;
  Server s({}, mc);
  const json body = {{"prompt", "Once upon a time there was a little dog and a cat and a bird"}, {"max_tokens", 4}};
  s.post("/v1/completions", body);
  EXPECT_EQ(s.post("/v1/completions", body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (int i = 0; i < 200 && s.metric("kiln_kv_blocks_used") != 0; ++i)  // gauges follow the step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.metric("kiln_kv_blocks_used"), 0);
  EXPECT_EQ(s.metric("kiln_prefix_cache_lookups_total"), 0);
}

}  // namespace kiln::serve::test
