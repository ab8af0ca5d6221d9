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

TEST(Layout, RecurrentStateMustBeF32) {
  // The ops keep state in f32: a plugin declaring bf16 state is refused, not budgeted as bf16 and
  // allocated as f32.
  LayerSpec bf16 = recurrent();
  bf16.state_dtypes[1] = KILN_DTYPE_BF16;
  try {
    plan_layout({bf16, full()}, opts(1 << 20));
    FAIL() << "expected an error";
  } catch (const kiln::HostError& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state must be f32"), std::string::npos) << e.what();
  }
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
  o.max_seqs = 2;
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
  ASSERT_EQ(c.append(2, 8), Status::ok);             // blocks 2, 3
  EXPECT_EQ(c.append(2, 5), Status::out_of_blocks);  // needs 2 more, 1 free
  EXPECT_EQ(c.length(2), 8u);                        // unchanged
  EXPECT_EQ(c.append_all({{1, 4}, {2, 4}}), Status::out_of_blocks);
  EXPECT_EQ(c.length(1), 5u);
  EXPECT_EQ(c.append(1, 16), Status::too_long);
  EXPECT_EQ(c.append(9, 1), Status::unknown_sequence);
  EXPECT_EQ(c.add(3), Status::out_of_slots);  // max_seqs alive already
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
    // The next query, at position len, sees keys len-5 .. len: every block holding one of them is kept.
    for (uint32_t p = len >= 5 ? len - 5 : 0; p < len; ++p) EXPECT_GE(c.slot(7, 0, p), 0) << len << " " << p;
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
  Transaction tx;
  ASSERT_EQ(plan_batch(c, {{10, {42}, true, false}, {20, {1, 2, 3, 4, 5}, true, false}}, &b, &tx), Status::ok);
  c.commit(tx);
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
  EXPECT_EQ(plan_batch(c, {{20, many, true, false}}, &b, &tx), Status::too_long);
  EXPECT_EQ(c.length(20), 5u);
  EXPECT_EQ(plan_batch(c, {{99, {1}, true, false}}, &b, &tx), Status::unknown_sequence);
  EXPECT_EQ(plan_batch(c, {{10, {1}, true, false}, {10, {2}, true, false}}, &b, &tx), Status::repeated_in_step);
  EXPECT_EQ(c.length(10), 7u);
}

// ------------------------------------------------------------------------------------------------
// Transactions: a step's changes are tentative until commit; rollback restores every table.

TEST(KvCache, RollbackRestoresLengthsTablesAndFreeBlocksLatestFirst) {
  CacheOptions o = opts(1 << 20);
  KvCache c(plan_layout({full(), sliding(6)}, o), o);
  ASSERT_EQ(c.add(1), Status::ok);
  ASSERT_EQ(c.append(1, 9), Status::ok);
  const auto t0 = c.block_table(1, 0), s0 = c.block_table(1, 1);
  const uint32_t f0 = c.free_blocks(0), f1 = c.free_blocks(1);
  Transaction a, b;
  ASSERT_EQ(c.begin({{1, 5}}, &a), Status::ok);  // 9 -> 14
  ASSERT_EQ(c.begin({{1, 4}}, &b), Status::ok);  // planned on top of a: 14 -> 18
  EXPECT_EQ(c.length(1), 18u);
  EXPECT_EQ(a.seqs[0].start, 9u);
  EXPECT_EQ(b.seqs[0].start, 14u);
  c.rollback(b);
  c.rollback(a);
  EXPECT_EQ(c.length(1), 9u);
  EXPECT_EQ(c.block_table(1, 0), t0);
  EXPECT_EQ(c.block_table(1, 1), s0);
  EXPECT_EQ(c.free_blocks(0), f0);
  EXPECT_EQ(c.free_blocks(1), f1);
  // A sequence with an open step cannot be released, truncated or held.
  Transaction open;
  ASSERT_EQ(c.begin({{1, 1}}, &open), Status::ok);
  EXPECT_THROW(c.release(1), kiln::HostError);
  EXPECT_THROW(c.truncate(1, 2), kiln::HostError);
  EXPECT_THROW(c.hold(1, 2), kiln::HostError);
  c.rollback(open);
  // Commit returns the sliding blocks no later query sees (none before it: a failed step keeps them).
  ASSERT_EQ(c.begin({{1, 15}}, &a), Status::ok);  // 9 -> 24: the next query at 24 sees 19..23
  EXPECT_GE(c.slot(1, 1, 4), 0);                  // seen from 9 on
  c.commit(a);
  EXPECT_EQ(c.slot(1, 1, 15), -1);
  EXPECT_GE(c.slot(1, 1, 19), 0);
}

// ------------------------------------------------------------------------------------------------
// Sharing: held blocks, sequences started from them, copy before write, truncation, refcounts.

TEST(KvCache, ASequenceStartsFromHeldBlocksAndCopiesAPartBlockBeforeWritingIt) {
  CacheOptions o = opts(1 << 20);  // blocks of 4
  KvCache c(plan_layout({full(), full()}, o), o);
  const uint32_t all = c.free_blocks(0);
  ASSERT_EQ(c.add(1), Status::ok);
  ASSERT_EQ(c.append(1, 10), Status::ok);  // blocks 0, 1, 2 (2 holds positions 8, 9)
  BlockSpan three = c.hold(1, 8), part = c.hold(1, 10);
  EXPECT_EQ(three.tables[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c.block_refs(0, 0), 3u);
  EXPECT_EQ(c.block_refs(0, 2), 2u);
  // Full blocks: shared as they are, nothing to copy.
  ASSERT_EQ(c.add(2, three), Status::ok);
  EXPECT_EQ(c.length(2), 8u);
  Transaction tx;
  ASSERT_EQ(c.begin({{2, 1}}, &tx), Status::ok);
  EXPECT_TRUE(tx.copies.empty());
  EXPECT_EQ(c.block_table(2, 0)[0], 0);
  c.commit(tx);
  // A partly filled shared block: the first write goes to a copy.
  ASSERT_EQ(c.add(3, part), Status::ok);
  StepNeeds needs;
  ASSERT_EQ(c.check({{3, 3}}, &needs), Status::ok);
  EXPECT_EQ(needs.copies, 1u);
  EXPECT_EQ(needs.blocks[0], 2u);  // the copy of block 2, and block 3 for position 12
  ASSERT_EQ(c.begin({{3, 3}}, &tx), Status::ok);
  ASSERT_EQ(tx.copies.size(), 1u);  // one per group (both layers are in one)
  EXPECT_EQ(tx.copies[0].src, 2);
  EXPECT_EQ(c.block_table(3, 0)[2], tx.copies[0].dst);
  EXPECT_EQ(c.block_table(1, 0)[2], 2);  // the owner keeps its block
  c.rollback(tx);
  EXPECT_EQ(c.block_table(3, 0)[2], 2);
  ASSERT_EQ(c.begin({{3, 3}}, &tx), Status::ok);
  c.commit(tx);
  EXPECT_EQ(c.block_refs(0, 2), 2u);  // sequence 1 and the span
  // The owner writing into its own now-shared block copies it too.
  ASSERT_EQ(c.begin({{1, 1}}, &tx), Status::ok);
  EXPECT_EQ(tx.copies.size(), 1u);
  c.commit(tx);
  // Everything returns to the pool.
  for (uint64_t s : {1, 2, 3}) c.release(s);
  c.drop(three);
  c.drop(part);
  EXPECT_TRUE(three.empty());
  EXPECT_EQ(c.free_blocks(0), all);
}

TEST(KvCache, SlidingPrefixesNeedTheirWindowAndTruncationReturnsBlocks) {
  CacheOptions o = opts(1 << 20);  // blocks of 4, window 6
  KvCache c(plan_layout({full(), sliding(6)}, o), o);
  ASSERT_EQ(c.add(1), Status::ok);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.append(1, 4), Status::ok);  // 20 tokens, steps of 4
  // At 20 the next query sees 15..20: blocks 3 and 4 of the sliding group are there, 0-2 are not.
  BlockSpan at20 = c.hold(1, 20);
  EXPECT_TRUE(c.prefix_usable(at20));
  ASSERT_EQ(c.add(2, at20), Status::ok);
  EXPECT_EQ(c.block_table(2, 1)[3] >= 0, true);
  // At 12 the query would see 7..12: block 1 (positions 4-7) was returned long ago.
  BlockSpan at12 = c.hold(1, 12);
  EXPECT_FALSE(c.prefix_usable(at12));
  EXPECT_EQ(c.add(3, at12), Status::prefix_unusable);
  EXPECT_EQ(c.truncate(1, 12), Status::prefix_unusable);
  EXPECT_EQ(c.length(1), 20u);
  // Truncating within the window returns the blocks past the new end.
  const uint32_t free_full = c.free_blocks(0);
  ASSERT_EQ(c.truncate(2, 17), Status::ok);
  EXPECT_EQ(c.length(2), 17u);
  EXPECT_EQ(c.block_table(2, 0).size(), 5u);
  EXPECT_EQ(c.free_blocks(0), free_full);  // block 4 is still the span's and sequence 1's
  c.drop(at20);
  c.drop(at12);
  c.release(1);
  c.release(2);
  EXPECT_EQ(c.free_blocks(0), c.layout().groups[0].n_blocks);
  EXPECT_EQ(c.free_blocks(1), c.layout().groups[1].n_blocks);
}

TEST(KvCache, SnapshotSlotsNeverStarveSequences) {
  CacheOptions o = opts(1 << 20);
  o.max_seqs = 2;
  o.snapshot_slots = 2;
  KvCache c(plan_layout({recurrent(), full()}, o), o);
  EXPECT_EQ(c.layout().n_state_slots, 4u);
  const int32_t a = c.take_slot(), b = c.take_slot();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_EQ(c.take_slot(), -1);  // the other two are the sequences'
  ASSERT_EQ(c.add(1), Status::ok);
  ASSERT_EQ(c.add(2), Status::ok);
  EXPECT_EQ(c.add(3), Status::out_of_slots);
  c.free_slot(a);
  EXPECT_EQ(c.add(3), Status::out_of_slots);  // max_seqs, whatever slots are free
  c.release(2);
  ASSERT_EQ(c.add(3), Status::ok);
  c.free_slot(b);
  EXPECT_EQ(c.free_state_slots(), 2u);
}

TEST(Layout, QuantizedKvSizesBlocksByTheFormatsAndKeepsTheLastAndSensitiveLayers) {
  // Head dim 64: f16 rows are 128 bytes, q8 rows 64 + 2·2 = 68, q4 rows 32 + 4 = 36.
  LayerSpec sens = full(2, 64);
  sens.kv_sensitive = true;
  LayerSpec shared = full(2, 64);
  shared.shares_with = 0;
  LayerSpec odd = full(2, 36);  // not a multiple of 8: cannot be quantized
  CacheOptions o = opts(1 << 24);
  o.kv_dtype = KILN_DTYPE_KV_Q8;
  CacheLayout L = plan_layout({full(2, 64), sens, odd, shared, full(2, 64), full(2, 64)}, o);
  EXPECT_EQ(L.layer_kv_dtype, (std::vector<uint32_t>{KILN_DTYPE_KV_Q8, KILN_DTYPE_F16, KILN_DTYPE_F16, KILN_DTYPE_KV_Q8,
                                                     KILN_DTYPE_KV_Q8, KILN_DTYPE_F16}));
  EXPECT_EQ(L.layer_kv_reason[1], KvDtypeReason::sensitive);
  EXPECT_EQ(L.layer_kv_reason[2], KvDtypeReason::head_dims);
  EXPECT_EQ(L.layer_kv_reason[5], KvDtypeReason::last_layer);
  const uint64_t q8 = 2 * 68 * 2, f16 = 2 * 128 * 2, f16_36 = 2 * 72 * 2;  // heads x row bytes x (K, V)
  EXPECT_EQ(L.bytes_per_token(), 2 * q8 + 2 * f16 + f16_36);
  EXPECT_EQ(L.describe_kv_dtypes(),
            "q8 (layer 0), f16 (layer 1: marked sensitive), f16 (layer 2: head dims), q8 (layer 4), f16 (layer 5: last "
            "layer)");
  EXPECT_EQ(L.groups[0].bytes_per_block, 4 * L.bytes_per_token());
  EXPECT_EQ(L.token_capacity(), uint64_t{L.groups[0].n_blocks} * 4);
  // Named layers win, and what cannot be stored as named is an error naming the layer.
  o.kv_layers = {{5, KILN_DTYPE_KV_Q4}, {1, KILN_DTYPE_KV_Q8}};
  CacheLayout N = plan_layout({full(2, 64), sens, odd, shared, full(2, 64), full(2, 64)}, o);
  EXPECT_EQ(N.layer_kv_dtype[5], KILN_DTYPE_KV_Q4);
  EXPECT_EQ(N.layer_kv_dtype[1], KILN_DTYPE_KV_Q8);
  EXPECT_EQ(N.layer_kv_reason[5], KvDtypeReason::explicit_layer);
  for (auto bad :
       {std::map<uint32_t, uint32_t>{{2, KILN_DTYPE_KV_Q4}}, std::map<uint32_t, uint32_t>{{3, KILN_DTYPE_F16}},
        std::map<uint32_t, uint32_t>{{9, KILN_DTYPE_F16}}}) {
    o.kv_layers = bad;
    EXPECT_THROW(plan_layout({full(2, 64), sens, odd, shared, full(2, 64), full(2, 64)}, o), kiln::HostError);
  }
  // The same budget holds more tokens at q8 and q4 than at f16.
  CacheOptions b = opts(1 << 20);
  b.max_seqs = 1000;
  uint64_t tokens[3];
  for (int i = 0; i < 3; ++i) {
    b.kv_dtype = i == 0 ? KILN_DTYPE_F16 : i == 1 ? KILN_DTYPE_KV_Q8 : KILN_DTYPE_KV_Q4;
    b.kv_layers = {{1, b.kv_dtype}};  // every layer in the format
    tokens[i] = plan_layout({full(2, 64), full(2, 64)}, b).token_capacity();
  }
  EXPECT_GT(tokens[1] * 100, tokens[0] * 185);  // 128 / 68 = 1.88x
  EXPECT_GT(tokens[2] * 100, tokens[0] * 350);  // 128 / 36 = 3.56x
}
