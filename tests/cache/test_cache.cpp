// Cache kinds, memory accounting and ragged-batch descriptions.
#include <gtest/gtest.h>

#include "cache/block_pool.hpp"
#include "cache/kv_cache.hpp"
#include "cache/layout.hpp"
#include "cache/ragged_batch.hpp"
#include "core/config.hpp"
#include "core/error.hpp"

using namespace kiln::cache;

namespace {

LayerSpec full(uint32_t heads = 2, uint32_t dim = 4) {
  LayerSpec s;
  s.kind = KILN_CACHE_FULL_KV;
  s.n_kv_heads = heads;
  s.head_dim_k = s.head_dim_v = dim;
  return s;
}
LayerSpec sliding(uint32_t window) {
  LayerSpec s = full();
  s.kind = KILN_CACHE_SLIDING_KV;
  s.window = window;
  return s;
}
LayerSpec recurrent() {
  LayerSpec s;
  s.kind = KILN_CACHE_RECURRENT;
  s.state_shapes = {{3, 8}, {2, 4, 4}};
  s.state_dtypes = {KILN_DTYPE_F32, KILN_DTYPE_F32};
  return s;
}
CacheOptions opts(uint64_t budget, uint32_t bt = 4) {
  CacheOptions o;
  o.block_tokens = bt;
  o.budget_bytes = budget;
  o.kv_dtype = KILN_DTYPE_F16;
  o.max_seqs = 4;
  o.max_context = 64;
  o.max_batch_tokens = 8;
  return o;
}

}  // namespace

TEST(BlockPool, AllOrNothingAndRefcounts) {
  BlockPool p(4);
  std::vector<int32_t> got;
  EXPECT_TRUE(p.allocate(3, &got));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(p.allocate(2, &got));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(p.free_count(), 1u);
  p.retain(1);
  p.release(1);
  EXPECT_EQ(p.free_count(), 1u);
  p.release(1);
  EXPECT_EQ(p.free_count(), 2u);
}

TEST(Layout, GroupsByKindAndWindowWithSharingAndState) {
  LayerSpec shared = full();
  shared.shares_with = 0;
  const CacheOptions o = opts(1 << 20);
  CacheLayout L = plan_layout({full(), sliding(8), full(), shared, recurrent(), sliding(8), {}}, o);
  ASSERT_EQ(L.groups.size(), 2u);
  EXPECT_EQ(L.groups[0].layers, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(L.groups[1].layers, (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(L.layer_group, (std::vector<int32_t>{0, 1, 0, 0, -1, 1, -1}));
  EXPECT_EQ(L.layer_source[3], 0);
  // 4 tokens x 2 heads x (4 + 4) dims x 2 bytes, two layers.
  EXPECT_EQ(L.groups[0].bytes_per_block, 2u * 4 * 2 * 8 * 2);
  EXPECT_EQ(L.state_bytes_per_slot, (3u * 8 + 2 * 4 * 4) * 4);
  EXPECT_EQ(L.n_state_slots, 4u);
  // Full layers are capped by max_seqs x max_context, sliding by window + batch (+1 block).
  EXPECT_EQ(L.groups[0].n_blocks, 4u * 16);
  EXPECT_EQ(L.groups[1].n_blocks, 4u * (4 + 1));
  EXPECT_LE(L.total_bytes(), o.budget_bytes);
}

TEST(Layout, BudgetSplitsEquallyAndRefusesTooSmall) {
  const uint64_t per_block = 4 * 2 * 8 * 2;
  CacheLayout L = plan_layout({full(), full()}, opts(per_block * 2 * 40));
  EXPECT_EQ(L.groups[0].n_blocks, 40u);
  try {
    plan_layout({full()}, opts(per_block * 3));
    FAIL() << "expected an error";
  } catch (const kiln::HostError& e) {
    EXPECT_NE(std::string(e.what()).find("raise cache.memory"), std::string::npos) << e.what();
  }
  LayerSpec bad = full();
  bad.shares_with = 3;
  EXPECT_THROW(plan_layout({full(), bad}, opts(1 << 20)), kiln::HostError);
}

TEST(Layout, BudgetFromConfig) {
  kiln::CacheConfig c;
  c.memory_bytes = 12345;
  EXPECT_EQ(budget_from_config(c, 1000, 1000), 12345u);
  c.memory_bytes = 0;
  c.memory_fraction = 0.5;
  EXPECT_EQ(budget_from_config(c, 1000, 800), 300u);  // 500 allowed, 200 already used
  EXPECT_EQ(budget_from_config(c, 1000, 100), 0u);
}

TEST(KvCache, AppendReleaseAndOutOfBlocksIsAStatus) {
  const uint64_t per_block = 4 * 2 * 8 * 2;
  CacheOptions o = opts(per_block * 5);
  o.max_seqs = 1;
  o.max_context = 20;
  KvCache c(plan_layout({full()}, o), o);
  ASSERT_EQ(c.free_blocks(0), 5u);
  ASSERT_EQ(c.add(1), Status::ok);
  EXPECT_EQ(c.add(1), Status::duplicate_sequence);
  ASSERT_EQ(c.append(1, 5), Status::ok);
  EXPECT_EQ(c.length(1), 5u);
  EXPECT_EQ(c.block_table(1, 0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c.slot(1, 0, 4), 4);
  ASSERT_EQ(c.add(2), Status::ok);
  ASSERT_EQ(c.append(2, 8), Status::ok);  // blocks 2, 3
  EXPECT_EQ(c.append(2, 5), Status::out_of_blocks);  // needs 2 more, 1 free
  EXPECT_EQ(c.length(2), 8u);                        // unchanged
  EXPECT_EQ(c.append_all({{1, 4}, {2, 4}}), Status::out_of_blocks);
  EXPECT_EQ(c.length(1), 5u);
  EXPECT_EQ(c.append(1, 16), Status::too_long);
  EXPECT_EQ(c.append(9, 1), Status::unknown_sequence);
  c.release(2);
  EXPECT_EQ(c.free_blocks(0), 3u);
  EXPECT_EQ(c.append(1, 15), Status::ok);
  EXPECT_EQ(c.blocks_held(1, 0), 5u);
}

TEST(KvCache, SlidingWindowReturnsBlocksThatLeftTheWindow) {
  CacheOptions o = opts(1 << 20);
  KvCache c(plan_layout({sliding(6)}, o), o);
  ASSERT_EQ(c.add(7), Status::ok);
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(c.append(7, 1), Status::ok);
    const uint32_t len = c.length(7);
    // The query at position len-1 sees keys len-6 .. len-1: every block holding one of them is kept.
    for (uint32_t p = len >= 6 ? len - 6 : 0; p < len; ++p) EXPECT_GE(c.slot(7, 0, p), 0) << len << " " << p;
    EXPECT_LE(c.blocks_held(7, 0), 3u) << len;
  }
  EXPECT_EQ(c.slot(7, 0, 0), -1);
  const uint32_t held = c.blocks_held(7, 0);
  EXPECT_EQ(c.free_blocks(0), c.layout().groups[0].n_blocks - held);

  CacheOptions keep = o;
  keep.free_out_of_window = false;
  KvCache k(plan_layout({sliding(6)}, keep), keep);
  ASSERT_EQ(k.add(7), Status::ok);
  ASSERT_EQ(k.append(7, 40), Status::ok);
  EXPECT_EQ(k.blocks_held(7, 0), 10u);
}

TEST(KvCache, RecurrentSlotsRunOut) {
  CacheOptions o = opts(1 << 20);
  o.max_seqs = 2;
  KvCache c(plan_layout({recurrent(), full()}, o), o);
  ASSERT_EQ(c.add(1), Status::ok);
  ASSERT_EQ(c.add(2), Status::ok);
  EXPECT_NE(c.state_slot(1), c.state_slot(2));
  EXPECT_EQ(c.add(3), Status::out_of_slots);
  const int32_t s2 = c.state_slot(2);
  c.release(2);
  ASSERT_EQ(c.add(3), Status::ok);
  EXPECT_EQ(c.state_slot(3), s2);
  EXPECT_NE(std::string(status_message(Status::out_of_blocks)).find("cache.memory"), std::string::npos);
}

TEST(RaggedBatch, PositionsAndTablesArePerSequenceWithoutPadding) {
  CacheOptions o = opts(1 << 20);
  KvCache c(plan_layout({full(), sliding(4)}, o), o);
  ASSERT_EQ(c.add(10), Status::ok);
  ASSERT_EQ(c.add(20), Status::ok);
  ASSERT_EQ(c.append(10, 6), Status::ok);  // seq 10 has 6 tokens already: it decodes
  RaggedBatch b;
  ASSERT_EQ(plan_batch(c, {{10, {42}, true, false}, {20, {1, 2, 3, 4, 5}, true, false}}, &b), Status::ok);
  EXPECT_EQ(b.n_tokens, 6u);
  EXPECT_EQ(b.n_seqs, 2u);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{42, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{6, 0, 1, 2, 3, 4}));
  EXPECT_EQ(b.seqs, (std::vector<int32_t>{0, 1, 7, -1, 1, 5, 5, -1}));
  EXPECT_EQ(b.logits_rows, (std::vector<int32_t>{0, 5}));
  ASSERT_EQ(b.groups.size(), 2u);
  EXPECT_EQ(b.groups[0].max_blocks, 2u);
  EXPECT_EQ(b.groups[0].block_table, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(b.groups[0].slots, (std::vector<int32_t>{6, 8, 9, 10, 11, 12}));
  // Sliding group, window 4: seq 10's query at 6 sees 3..6, so block 0 (positions 0-3) stays.
  EXPECT_EQ(b.groups[1].slots[0], c.slot(10, 1, 6));
  // A failing step changes nothing.
  std::vector<int32_t> many(70, 1);
  EXPECT_EQ(plan_batch(c, {{20, many, true, false}}, &b), Status::too_long);
  EXPECT_EQ(c.length(20), 5u);
  EXPECT_EQ(plan_batch(c, {{99, {1}, true, false}}, &b), Status::unknown_sequence);
}
