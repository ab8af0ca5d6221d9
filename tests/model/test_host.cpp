// The model host as a scheduler drives it (docs/model-host.md §3): recurrent slots reused without
// leaking state, steps checked before anything runs, failed steps rolled back, graphs built once
// per shape, two steps in flight, blocks shared between sequences and held outside them, state
// snapshots, host-resident tables; and a scheduler-shaped run of 200+ steps with sequences joining
// and leaving and failures injected, every sequence bitwise what it gives alone. Every test runs on
// the CPU reference and, when registered, on Vulkan (lavapipe in CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "host_helpers.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr size_t kVocab = 96;

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<int32_t> ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % 90) + 3;
  return v;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to));
}

/** Runs `tokens` of `seq` in steps of the given sizes; returns each step's last-token logits. */
std::vector<std::vector<float>> run_steps(model::ModelHost& host, uint64_t seq, const std::vector<int32_t>& tokens,
                                          const std::vector<size_t>& steps, size_t from = 0) {
  std::vector<std::vector<float>> out;
  for (size_t n : steps) {
    model::StepResult r;
    const auto st = host.step({{seq, slice(tokens, from, from + n), true, false}}, &r);
    EXPECT_TRUE(st.ok()) << st.message;
    out.push_back(r.logits);
    from += n;
  }
  return out;
}

}  // namespace

class Host : public DeviceTest {
 protected:
  std::unique_ptr<model::ModelHost> hybrid(const TempDir& dir, const HybridSpec& spec = {},
                                           model::HostOptions o = {}) const {
    write_tiny_hybrid(dir.str(), spec);
    if (o.device.empty()) o = options();
    return model::ModelHost::open(dir.str(), host_registry(), o);
  }
  std::unique_ptr<model::ModelHost> llama(const TempDir& dir, model::HostOptions o = {}, uint32_t window = 0) const {
    write_tiny_qwen3(dir.str(), DType::f32, window);
    if (o.device.empty()) o = options();
    return model::ModelHost::open(dir.str(), host_registry(), o);
  }
};
INSTANTIATE_TEST_SUITE_P(Devices, Host, ::testing::Values("cpu", "vulkan"),
                         [](const auto& info) { return std::string(info.param); });

// ------------------------------------------------------------------------------------------------
// Recurrent state slots are reused without being cleared.

TEST_P(Host, AReleasedHybridSlotGivesTheNextSequenceAFreshState) {
  TempDir dir;
  model::HostOptions o = options();
  o.max_seqs = 1;  // one state slot: the second sequence must reuse the first one's
  auto host = hybrid(dir, {}, o);
  const auto first = ids(19, 1), second = ids(13, 2);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const int32_t slot = host->cache().state_slot(1);
  run_steps(*host, 1, first, {19});
  model::StepResult r;
  ASSERT_TRUE(host->step({{1, {5}, true, false}}, &r).ok());
  host->release(1);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  EXPECT_EQ(host->cache().state_slot(2), slot);
  const auto reused = run_steps(*host, 2, second, {9, 4});

  TempDir fresh_dir;
  auto fresh = hybrid(fresh_dir, {}, o);
  ASSERT_EQ(fresh->add_sequence(7), cache::Status::ok);
  const auto clean = run_steps(*fresh, 7, second, {9, 4});
  ASSERT_EQ(reused.size(), clean.size());
  for (size_t i = 0; i < clean.size(); ++i) EXPECT_TRUE(bitwise(reused[i], clean[i])) << "step " << i;
}

// ------------------------------------------------------------------------------------------------
// Chunking: rows do not depend on the batch; the delta rule's cuts at chunk multiples are invisible.

TEST_P(Host, HowAPrefillIsChunkedChangesNoBitsAtChunkMultiples) {
  TempDir dir;
  auto host = hybrid(dir);  // delta-rule chunk 8
  const auto p = ids(40, 3);
  uint64_t seq = 10;
  auto run = [&](const std::vector<size_t>& steps) {
    EXPECT_EQ(host->add_sequence(seq), cache::Status::ok);
    auto out = run_steps(*host, seq, p, steps);
    host->release(seq++);
    return out;
  };
  // A cut at 16 (a multiple of 8) after a step that started off the grid (12): the same bits.
  const auto plain = run({12, 28}), cut = run({12, 4, 24});
  EXPECT_TRUE(bitwise(plain[1], cut[2]));
  const auto whole = run({40}), at24 = run({24, 16});
  EXPECT_TRUE(bitwise(whole[0], at24[1]));
}

// ------------------------------------------------------------------------------------------------
// Steps are checked before anything runs; a refused or failed step changes nothing.

TEST_P(Host, StepsBeyondALimitAreRefusedNamingTheSequenceAndChangeNothing) {
  TempDir dir;
  model::HostOptions o = options();
  o.max_batch_tokens = 16;
  auto host = llama(dir, o);
  const model::HostLimits& L = host->limits();
  EXPECT_EQ(L.n_vocab, kVocab);
  EXPECT_EQ(L.max_batch_tokens, 16u);
  EXPECT_LE(L.max_batch_seqs, o.max_seqs);
  EXPECT_FALSE(L.recurrent);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  model::StepResult r;
  auto st = host->step({{1, {4, 5}, true, false}, {2, {6}, true, false}, {1, {7}, true, false}}, &r);
  EXPECT_EQ(st.status, cache::Status::repeated_in_step);
  EXPECT_EQ(st.seq, std::optional<uint64_t>(1));
  st = host->step({{1, {4}, true, false}, {2, {6, static_cast<int32_t>(kVocab)}, true, false}}, &r);
  EXPECT_EQ(st.status, cache::Status::invalid_token);
  EXPECT_EQ(st.seq, std::optional<uint64_t>(2));
  EXPECT_NE(st.message.find("outside the vocabulary"), std::string::npos) << st.message;
  EXPECT_EQ(host->step({{1, ids(17, 1), true, false}}, &r).status, cache::Status::too_many_tokens);
  EXPECT_EQ(host->step({{1, {4}, false, false}}, &r).status, cache::Status::empty_step);
  EXPECT_EQ(host->step({{9, {4}, true, false}}, &r).status, cache::Status::unknown_sequence);
  EXPECT_EQ(host->length(1), 0u);
  EXPECT_EQ(host->length(2), 0u);
  EXPECT_TRUE(host->step({{1, {4, 5}, true, false}, {2, {6}, true, false}}, &r).ok());
  EXPECT_EQ(host->length(1), 2u);
}

TEST_P(Host, AStepThatFailsToBuildIsRolledBackAndTheNextRuns) {
  TempDir dir;
  HybridSpec spec;
  spec.fail_at_tokens = 7;  // the plugin refuses batches of 7 tokens
  auto host = hybrid(dir, spec);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  const auto p = ids(30, 4);
  run_steps(*host, 1, p, {5});
  const uint32_t free_before = host->cache().free_blocks(0);
  model::StepResult r;
  try {
    host->step({{1, slice(p, 5, 9), true, false}, {2, slice(p, 0, 3), true, false}}, &r);
    ADD_FAILURE() << "the build should have failed";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(host->length(1), 5u);
  EXPECT_EQ(host->length(2), 0u);
  EXPECT_EQ(host->cache().free_blocks(0), free_before);
  EXPECT_EQ(host->in_flight(), 0u);
  // Nothing ran on the device, so even the recurrent sequences go on (a build failure is not a loss).
  const auto after = run_steps(*host, 1, p, {4, 2}, 5);
  ASSERT_EQ(host->add_sequence(3), cache::Status::ok);
  const auto alone = run_steps(*host, 3, p, {5, 4, 2});
  EXPECT_TRUE(bitwise(after[1], alone[2]));
}

TEST_P(Host, ADeviceFailureRollsBackKvButLosesRecurrentState) {
  FaultyDevice* dev = faulty(GetParam());
  ASSERT_NE(dev, nullptr);
  for (bool recurrent : {false, true}) {
    SCOPED_TRACE(recurrent ? "hybrid" : "llama");
    TempDir dir;
    model::HostOptions o = options();
    o.device = dev->info().id;
    auto host = recurrent ? hybrid(dir, {}, o) : llama(dir, o);
    const auto p = ids(20, 5);
    ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
    run_steps(*host, 1, p, {6});
    dev->fail_wait(1);
    model::StepResult r;
    EXPECT_THROW(host->step({{1, slice(p, 6, 10), true, false}}, &r), HostError);
    EXPECT_EQ(host->length(1), 6u);
    const auto st = host->check({{1, slice(p, 6, 10), true, false}});
    if (recurrent) {
      EXPECT_EQ(st.status, cache::Status::sequence_failed);
      EXPECT_EQ(st.seq, std::optional<uint64_t>(1));
      EXPECT_THROW(host->snapshot(1), HostError);  // its prefix must not be cached
      EXPECT_EQ(host->add_sequence(1), cache::Status::duplicate_sequence);
      EXPECT_EQ(host->check({{1, {3}, true, false}}).status, cache::Status::sequence_failed);  // still failed
      host->release(1);
      ASSERT_EQ(host->add_sequence(1), cache::Status::ok);  // the id starts over
      run_steps(*host, 1, p, {6});
    }
    // KV below the length was never touched: the retried step gives what an unfailed run gives.
    const auto retried = run_steps(*host, 1, p, {4}, 6);
    ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
    const auto clean = run_steps(*host, 2, p, {6, 4});
    EXPECT_TRUE(bitwise(retried[0], clean[1]));
  }
}

// ------------------------------------------------------------------------------------------------
// Graphs are built once per shape: a steady decode builds, plans, binds and records nothing.

TEST_P(Host, ASteadyDecodeReusesItsShapesGraph) {
  TempDir dir;
  auto host = llama(dir);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  model::StepResult r;
  ASSERT_TRUE(host->step({{1, ids(5, 1), true, false}, {2, ids(9, 2), true, false}}, &r).ok());
  EXPECT_FALSE(r.graph_cached);
  const size_t before = host->cached_graphs();
  std::vector<model::StepResult> decode(40);
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(
        host->step({{1, {5 + i}, true, false}, {2, {6 + i}, true, false}}, &decode[static_cast<size_t>(i)]).ok());
  // Block-table columns grow in powers of two: 9 + 40 tokens cross 16 and 32 tokens (blocks of 16
  // columns 1 -> 2 -> 4), so three decode shapes, each built once.
  int built = 0;
  for (const auto& d : decode) {
    if (!d.graph_cached)
      ++built;
    else
      EXPECT_EQ(d.timings.build + d.timings.plan + d.timings.bind, 0.0);
  }
  EXPECT_LE(built, 3);
  EXPECT_LE(host->cached_graphs(), before + 3);
}

// ------------------------------------------------------------------------------------------------
// Candidates: each row's best ids and their logits, computed on the device after the logits, read
// back instead of the rows.

TEST_P(Host, CandidatesAreEachRowsBestIdsAndReadBackLess) {
  TempDir dir;
  auto host = llama(dir);
  for (uint64_t s = 1; s <= 4; ++s) ASSERT_EQ(host->add_sequence(s), cache::Status::ok);
  const auto a = ids(7, 3), b = ids(4, 4);
  model::StepResult whole, cand, all;
  ASSERT_TRUE(host->step({{1, a, true, false}, {2, b, true, false}}, &whole).ok());
  ASSERT_TRUE(host->step({{3, a, true, false}, {4, b, true, false}}, &cand, {8}).ok());
  EXPECT_FALSE(cand.graph_cached);  // reading back candidates is a graph of its own
  ASSERT_EQ(whole.rows, 2u);
  ASSERT_EQ(cand.rows, 2u);
  EXPECT_TRUE(cand.logits.empty());
  ASSERT_EQ(cand.candidates, 8u);
  EXPECT_EQ(whole.readback_bytes, 2 * kVocab * 4);
  EXPECT_EQ(cand.readback_bytes, 2 * 8 * 2 * 4u);
  // The step's launches are counted; the candidates' TOP_K is one more.
  EXPECT_GT(whole.kernels, 10u);
  EXPECT_EQ(cand.kernels, whole.kernels + 1);
  if (GetParam() == std::string("vulkan")) {
    EXPECT_GT(whole.barriers, 0u);
  }
  for (size_t row = 0; row < 2; ++row) {
    std::vector<int32_t> order(kVocab);
    for (size_t i = 0; i < kVocab; ++i) order[i] = static_cast<int32_t>(i);
    const float* x = whole.logits.data() + row * kVocab;
    std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) { return x[p] > x[q]; });
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_EQ(cand.candidate_ids[row * 8 + j], order[j]) << row << " " << j;
      EXPECT_EQ(std::memcmp(&cand.candidate_logits[row * 8 + j], &x[order[j]], 4), 0);
    }
  }
  // More than the vocabulary: all of it, sorted.
  ASSERT_TRUE(host->step({{1, {9}, true, false}}, &all, {1000}).ok());
  ASSERT_EQ(all.candidates, kVocab);
  for (size_t j = 1; j < kVocab; ++j) EXPECT_GE(all.candidate_logits[j - 1], all.candidate_logits[j]);
}

// ------------------------------------------------------------------------------------------------
// Two steps in flight: the device runs them in order; a failure of the first undoes both.

TEST_P(Host, TwoStepsInFlightGiveTheBitsOfSteppingOneByOne) {
  TempDir dir;
  auto host = hybrid(dir);
  const auto a = ids(30, 6), b = ids(12, 7);
  // One by one.
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  model::StepResult r1, r2;
  ASSERT_TRUE(host->step({{1, slice(a, 0, 16), true, false}, {2, slice(b, 0, 12), true, false}}, &r1).ok());
  ASSERT_TRUE(host->step({{1, slice(a, 16, 30), true, false}}, &r2).ok());
  host->release(1);
  host->release(2);
  // The second step (the same sequence's next chunk) submitted before the first finishes.
  ASSERT_EQ(host->add_sequence(3), cache::Status::ok);
  ASSERT_EQ(host->add_sequence(4), cache::Status::ok);
  model::StepTicket t1, t2;
  ASSERT_TRUE(host->submit({{3, slice(a, 0, 16), true, false}, {4, slice(b, 0, 12), true, false}}, &t1).ok());
  ASSERT_TRUE(host->submit({{3, slice(a, 16, 30), true, false}}, &t2).ok());
  EXPECT_EQ(host->in_flight(), 2u);
  EXPECT_EQ(host->length(3), 30u);  // planned on top of the first
  model::StepTicket t3;
  EXPECT_THROW(host->submit({{4, {3}, true, false}}, &t3), HostError);  // two is the limit
  model::StepResult ignored;
  EXPECT_THROW(host->step({{4, {3}, true, false}}, &ignored), HostError);  // step() needs none in flight
  model::StepResult p1, p2;
  EXPECT_THROW(host->finish(t2, &p2), HostError);  // in order only
  host->finish(t1, &p1);
  host->finish(t2, &p2);
  EXPECT_TRUE(bitwise(p1.logits, r1.logits));
  EXPECT_TRUE(bitwise(p2.logits, r2.logits));

  // A failure of the first rolls both back.
  FaultyDevice* dev = faulty(GetParam());
  TempDir dir2;
  model::HostOptions o = options();
  o.device = dev->info().id;
  auto fhost = llama(dir2, o);
  ASSERT_EQ(fhost->add_sequence(1), cache::Status::ok);
  const uint32_t free0 = fhost->cache().free_blocks(0);
  dev->fail_wait(1);
  ASSERT_TRUE(fhost->submit({{1, slice(a, 0, 16), true, false}}, &t1).ok());
  ASSERT_TRUE(fhost->submit({{1, slice(a, 16, 30), true, false}}, &t2).ok());
  EXPECT_THROW(fhost->finish(t1, &p1), HostError);
  try {
    fhost->finish(t2, &p2);
    ADD_FAILURE() << "the second step must fail with the first";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("an earlier step failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fhost->length(1), 0u);
  EXPECT_EQ(fhost->cache().free_blocks(0), free0);
  EXPECT_EQ(fhost->in_flight(), 0u);
}

TEST_P(Host, ASequenceReleasedWhileInFlightGoesWhenItsStepFinishes) {
  TempDir dir;
  auto host = llama(dir);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const uint32_t free0 = host->cache().free_blocks(0);
  model::StepTicket t;
  ASSERT_TRUE(host->submit({{1, ids(20, 1), true, false}}, &t).ok());
  host->release(1);
  EXPECT_TRUE(host->cache().has(1));  // its blocks are in use on the device
  EXPECT_EQ(host->truncate(1, 3), cache::Status::busy);
  model::StepResult r;
  host->finish(t, &r);
  EXPECT_EQ(r.rows, 1u);
  EXPECT_FALSE(host->cache().has(1));
  EXPECT_EQ(host->cache().free_blocks(0), free0);
}

// ------------------------------------------------------------------------------------------------
// Sharing blocks between sequences (the base of prefix caching).

TEST_P(Host, ASequenceStartedFromAnothersBlocksGivesTheBitsOfAnUnsharedRun) {
  TempDir dir;
  auto host = llama(dir);  // blocks of 16 (cpu_options)
  ASSERT_EQ(host->limits().block_tokens, 16u);
  const auto p = ids(70, 8);
  const uint32_t all = host->cache().free_blocks(0);
  // A: the 48-token prefix (3 blocks) in one step, then 12 more.
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const auto a = run_steps(*host, 1, p, {48, 12});
  // B starts from A's 3 full blocks: nothing is copied, and its step gives A's bits.
  cache::BlockSpan three = host->hold(1, 48);
  ASSERT_EQ(host->add_sequence(2, three), cache::Status::ok);
  EXPECT_EQ(host->length(2), 48u);
  EXPECT_EQ(host->cache().block_refs(0, three.tables[0][0]), 3u);  // A, the span, B
  const auto b = run_steps(*host, 2, p, {12}, 48);
  EXPECT_TRUE(bitwise(b[0], a[1]));
  // C starts from 40 tokens: block 2 is partly filled (32-39) and A wrote 40-59 there; C's first
  // write goes to a copy, so A's block keeps A's rows.
  cache::BlockSpan part = host->hold(1, 40);
  ASSERT_EQ(host->add_sequence(3, part), cache::Status::ok);
  const auto c = run_steps(*host, 3, p, {20}, 40);
  EXPECT_NE(host->cache().block_table(3, 0)[2], host->cache().block_table(1, 0)[2]);
  // The same without sharing: R computes the prefix as A did, truncates to 40, continues.
  ASSERT_EQ(host->add_sequence(4), cache::Status::ok);
  run_steps(*host, 4, p, {48});
  ASSERT_EQ(host->truncate(4, 40), cache::Status::ok);
  const auto r = run_steps(*host, 4, p, {20}, 40);
  EXPECT_TRUE(bitwise(c[0], r[0]));
  EXPECT_TRUE(bitwise(c[0], a[1]));  // and A's own 60th-token logits
  // A continues unharmed by C's writes: what an unshared A gives.
  const auto a_more = run_steps(*host, 1, p, {10}, 60);
  for (uint64_t s : {2, 3, 4}) host->release(s);
  ASSERT_EQ(host->add_sequence(5), cache::Status::ok);
  const auto ref = run_steps(*host, 5, p, {48, 12, 10});
  EXPECT_TRUE(bitwise(a_more[0], ref[2]));
  // Every reference returns: the pool is whole again.
  for (uint64_t s : {1, 5}) host->release(s);
  EXPECT_LT(host->cache().free_blocks(0), all);  // the spans still hold theirs
  host->drop(three);
  host->drop(part);
  EXPECT_EQ(host->cache().free_blocks(0), all);
}

TEST_P(Host, ASlidingWindowPrefixIsUsableOnlyWithItsWindow) {
  TempDir dir;
  model::HostOptions o = options();
  o.cache.block_tokens = 4;
  auto host = llama(dir, o, /*window=*/6);
  const auto p = ids(30, 9);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const auto a = run_steps(*host, 1, p, {8, 8, 8});
  cache::BlockSpan at24 = host->hold(1, 24), at8 = host->hold(1, 8);
  ASSERT_EQ(host->add_sequence(2, at24), cache::Status::ok);
  // At 8 the next query needs 3..7, but the blocks A held then left its window since.
  host->drop(at8);
  at8 = host->hold(1, 16);
  EXPECT_EQ(host->add_sequence(3, at8), cache::Status::prefix_unusable);
  const auto b = run_steps(*host, 2, p, {6}, 24);
  ASSERT_EQ(host->add_sequence(4), cache::Status::ok);
  const auto ref = run_steps(*host, 4, p, {8, 8, 8, 6});
  EXPECT_TRUE(bitwise(b[0], ref[3]));
  host->drop(at24);
  host->drop(at8);
}

// ------------------------------------------------------------------------------------------------
// Recurrent state snapshots.

TEST_P(Host, ASnapshotRestoredAtAChunkMultipleContinuesWithTheBitsOfAnUninterruptedRun) {
  TempDir dir;
  model::HostOptions o = options();
  o.snapshot_slots = 2;
  auto host = hybrid(dir, {}, o);  // delta-rule chunk 8
  EXPECT_TRUE(host->limits().recurrent);
  EXPECT_EQ(host->limits().state_chunk, 8u);
  EXPECT_EQ(host->limits().snapshot_slots, 2u);
  const auto p = ids(40, 10);
  // Uninterrupted: a first step off the chunk grid (12), then the rest in one step.
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const auto u = run_steps(*host, 1, p, {12, 28});
  // E stops at 16 (a multiple of 8); F resumes there from E's blocks and state snapshot.
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  run_steps(*host, 2, p, {12, 4});
  auto snap = host->snapshot(2);
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->length, 16u);
  cache::BlockSpan span = host->hold(2, 16);
  host->release(2);  // the snapshot and the span outlive the sequence
  EXPECT_EQ(host->add_sequence(3, span), cache::Status::prefix_unusable);  // no state: refused
  ASSERT_EQ(host->add_sequence(3, span, &*snap), cache::Status::ok);
  const auto f = run_steps(*host, 3, p, {24}, 16);
  EXPECT_TRUE(bitwise(f[0], u[1]));
  // A second sequence from the same snapshot: the same bits again (the snapshot is copied, not used).
  ASSERT_EQ(host->add_sequence(4, span, &*snap), cache::Status::ok);
  EXPECT_TRUE(bitwise(run_steps(*host, 4, p, {24}, 16)[0], u[1]));
  // A sliding-window layer's blocks before 33 left its window (8) at 40: no way back to 16.
  EXPECT_EQ(host->truncate(4, 16, &*snap), cache::Status::prefix_unusable);
  // Snapshots are bounded; slots come back.
  auto s2 = host->snapshot(1);
  ASSERT_TRUE(s2);
  EXPECT_FALSE(host->snapshot(1));
  host->release_snapshot(*s2);
  host->release_snapshot(*snap);
  EXPECT_FALSE(*snap);
  host->drop(span);
}

TEST_P(Host, ASnapshotResumedForAPromptsLastTokenGivesTheBitsOfTheWholePrefill) {
  // 17 tokens in one step end with a one-token chunk [16, 17); resumed from a snapshot at 16, the
  // 17th token is a one-token step (run recurrently). A one-token chunk is a step of the
  // recurrence, so both give the same bits.
  TempDir dir;
  model::HostOptions o = options();
  o.snapshot_slots = 1;
  auto host = hybrid(dir, {}, o);  // delta-rule chunk 8
  const auto p = ids(17, 14);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const auto whole = run_steps(*host, 1, p, {17});
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  run_steps(*host, 2, p, {16});
  auto snap = host->snapshot(2);
  ASSERT_TRUE(snap);
  cache::BlockSpan span = host->hold(2, 16);
  ASSERT_EQ(host->add_sequence(3, span, &*snap), cache::Status::ok);
  EXPECT_TRUE(bitwise(run_steps(*host, 3, p, {1}, 16)[0], whole[0]));
  host->release_snapshot(*snap);
  host->drop(span);
}

TEST_P(Host, TruncatingAHybridSequenceRestoresItsStateFromASnapshot) {
  TempDir dir;
  model::HostOptions o = options();
  o.snapshot_slots = 1;
  HybridSpec spec;
  spec.layers = {"linear", "full", "linear"};
  auto host = hybrid(dir, spec, o);
  const auto p = ids(40, 12), q = ids(20, 13);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  const auto ref = run_steps(*host, 1, p, {16, 24});
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  run_steps(*host, 2, p, {16});
  auto snap = host->snapshot(2);
  ASSERT_TRUE(snap);
  run_steps(*host, 2, q, {20});                                      // another continuation, then back to 16
  EXPECT_EQ(host->truncate(2, 16), cache::Status::prefix_unusable);  // the state cannot be rolled back alone
  ASSERT_EQ(host->truncate(2, 16, &*snap), cache::Status::ok);
  EXPECT_EQ(host->length(2), 16u);
  EXPECT_TRUE(bitwise(run_steps(*host, 2, p, {24}, 16)[0], ref[1]));
  host->release_snapshot(*snap);
}

// ------------------------------------------------------------------------------------------------
// Host-resident tables (KILN_TENSOR_HOST) are gathered on the host with the device's bits.

TEST_P(Host, AHostResidentTableGivesTheBitsOfTheSameTableOnTheDevice) {
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    HybridSpec on_host, on_device;
    on_host.dtype = on_device.dtype = t;
    on_device.host_table = false;
    TempDir d1, d2;
    auto a = hybrid(d1, on_host), b = hybrid(d2, on_device);
    EXPECT_GT(a->stats().host_bytes, 0u);
    EXPECT_EQ(b->stats().host_bytes, 0u);
    const auto p = ids(21, 11);
    ASSERT_EQ(a->add_sequence(1), cache::Status::ok);
    ASSERT_EQ(b->add_sequence(1), cache::Status::ok);
    const auto x = run_steps(*a, 1, p, {13, 8}), y = run_steps(*b, 1, p, {13, 8});
    EXPECT_TRUE(bitwise(x[0], y[0]));
    EXPECT_TRUE(bitwise(x[1], y[1]));
  }
}

// ------------------------------------------------------------------------------------------------
// A scheduler-shaped run: requests arrive and leave over 200+ steps of mixed prefill chunks and
// decodes under a token budget, with a bad token, a graph the plugin refuses and a device failure
// injected midway. Every request that completes gives, step by step, the bits of running it alone
// with the same chunks.

namespace {

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<size_t> chunks;  ///< the prefill's steps
  int decode = 0, arrive = 0;
  size_t chunk = 0, fed = 0;
  int produced = 0;
  int32_t next = -1;
  bool active = false, done = false, dropped = false;
  int restarts = 0;
  std::vector<std::vector<float>> logits;  ///< each step's last-token logits

  bool prefilling() const { return fed < prompt.size(); }
  size_t next_len() const { return prefilling() ? chunks[chunk] : 1; }
  std::vector<int32_t> next_tokens() const {
    return prefilling() ? slice(prompt, fed, fed + chunks[chunk]) : std::vector<int32_t>{next};
  }
  void advance(std::vector<float> l) {
    next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // greedy
    logits.push_back(std::move(l));
    if (prefilling())
      fed += chunks[chunk++];
    else if (++produced == decode)
      done = true;
  }
  void restart() {
    chunk = fed = 0;
    produced = 0;
    next = -1;
    done = false;
    logits.clear();
    ++restarts;
  }
};

std::vector<Request> make_requests(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> out(n);
  for (size_t i = 0; i < n; ++i) {
    Request& r = out[i];
    r.id = 100 + i;
    r.prompt = ids(5 + rng() % 36, seed * 31 + static_cast<uint32_t>(i));
    for (size_t left = r.prompt.size(); left;) {
      const size_t c = std::min<size_t>(left, 3 + rng() % 10);
      r.chunks.push_back(c);
      left -= c;
    }
    r.decode = 10 + static_cast<int>(rng() % 31);
    r.arrive = static_cast<int>(rng() % 220);
  }
  return out;
}

/** The request by itself on `host`, with its own chunks; its logits step by step. */
std::vector<std::vector<float>> alone(model::ModelHost& host, Request r) {
  r.restart();
  EXPECT_EQ(host.add_sequence(r.id), cache::Status::ok);
  while (!r.done) {
    model::StepResult res;
    const auto st = host.step({{r.id, r.next_tokens(), true, false}}, &res);
    EXPECT_TRUE(st.ok()) << st.message;
    if (!st.ok()) break;
    r.advance(res.logits);
  }
  host.release(r.id);
  return r.logits;
}

}  // namespace

TEST_P(Host, SchedulerShapedRunWithFailuresGivesEverySequenceItsBitsAlone) {
  for (bool recurrent : {false, true}) {
    SCOPED_TRACE(recurrent ? "hybrid" : "llama");
    FaultyDevice* dev = faulty(GetParam());
    ASSERT_NE(dev, nullptr);
    model::HostOptions o = options();
    o.device = dev->info().id;
    o.max_seqs = 6;
    o.max_batch_tokens = 24;
    TempDir dir;
    HybridSpec spec;
    spec.fail_at_tokens = 11;  // the plugin refuses every batch of exactly 11 tokens
    auto host = recurrent ? hybrid(dir, spec, o) : llama(dir, o, /*window=*/0);
    std::vector<Request> reqs = make_requests(24, recurrent ? 5 : 3);
    int steps = 0, refused = 0, failures = 0, shrink = 0;
    bool lost = false;
    uint64_t victim = 0;
    for (int s = 0;
         s < 2000 && std::any_of(reqs.begin(), reqs.end(), [](const Request& r) { return !r.done && !r.dropped; });
         ++s) {
      for (Request& r : reqs)
        if (!r.active && !r.done && !r.dropped && r.arrive <= s && host->add_sequence(r.id) == cache::Status::ok)
          r.active = true;
      std::vector<cache::SeqStep> batch;
      size_t budget = o.max_batch_tokens;
      std::vector<Request*> in;
      for (Request& r : reqs)
        if (r.active && r.next_len() <= budget && in.size() < host->limits().max_batch_seqs) {
          budget -= r.next_len();
          batch.push_back({r.id, r.next_tokens(), true, false});
          in.push_back(&r);
        }
      for (int k = 0; k < shrink && batch.size() > 1; ++k) batch.pop_back(), in.pop_back();
      if (batch.empty()) continue;
      if (s >= 60 && !victim) {  // a bad token id in one request: refused before anything runs
        for (size_t i = 0; i < in.size() && !victim; ++i)
          if (!in[i]->prefilling()) victim = in[i]->id, batch[i].tokens = {static_cast<int32_t>(kVocab) + 3};
      }
      if (s >= 120 && !lost) dev->fail_wait(1), lost = true;  // the device loses this step
      model::StepResult res;
      model::StepStatus st;
      try {
        st = host->step(batch, &res);
      } catch (const HostError&) {
        ++failures;
        ++shrink;  // the same batch again would be refused again (the plugin's injected failure)
        // A device failure loses the recurrent state of the step's sequences: they start over.
        for (Request* r : in)
          if (host->check({{r->id, {1}, true, false}}).status == cache::Status::sequence_failed) {
            host->release(r->id);
            ASSERT_EQ(host->add_sequence(r->id), cache::Status::ok);
            r->restart();
          }
        continue;
      }
      shrink = 0;
      if (!st.ok()) {
        ASSERT_EQ(st.status, cache::Status::invalid_token) << st.message;
        ASSERT_EQ(st.seq, std::optional<uint64_t>(victim));
        ++refused;
        for (Request& r : reqs) {
          if (r.id != victim) continue;
          r.dropped = true, r.active = false;
          host->release(r.id);
        }
        continue;
      }
      ++steps;
      ASSERT_EQ(res.rows, batch.size());
      for (uint32_t row = 0; row < res.rows; ++row)
        for (Request* r : in) {
          if (r->id != res.row_seq[row]) continue;
          r->advance(std::vector<float>(res.logits.begin() + row * kVocab, res.logits.begin() + (row + 1) * kVocab));
          if (r->done) host->release(r->id), r->active = false;
        }
    }
    EXPECT_GE(steps, 200);
    EXPECT_EQ(refused, 1);
    EXPECT_GE(failures, recurrent ? 2 : 1);  // the device's, and (hybrid) at least one refused graph
    EXPECT_EQ(host->cache().n_sequences(), 0u);
    for (size_t g = 0; g < host->cache().layout().groups.size(); ++g)
      EXPECT_EQ(host->cache().free_blocks(g), host->cache().layout().groups[g].n_blocks) << "group " << g;
    // Alone, on a fresh host of the same device.
    TempDir dir2;
    model::HostOptions plain = options();
    plain.max_batch_tokens = 24;
    HybridSpec no_fail;
    auto ref = recurrent ? hybrid(dir2, no_fail, plain) : llama(dir2, plain, 0);
    int compared = 0, restarted = 0;
    for (const Request& r : reqs) {
      if (r.dropped) continue;
      ASSERT_TRUE(r.done) << "request " << r.id;
      restarted += r.restarts > 0;
      const auto want = alone(*ref, r);
      ASSERT_EQ(r.logits.size(), want.size()) << "request " << r.id;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(bitwise(r.logits[i], want[i])) << "request " << r.id << " step " << i;
      ++compared;
    }
    EXPECT_EQ(compared, 23);
    if (recurrent) {
      EXPECT_GE(restarted, 1);
    }
  }
}
