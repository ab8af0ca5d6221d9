// The scheduling step driven directly on the model host (stories260K on the CPU device), without
// threads or HTTP: recompute preemption under a cache too small for the batch keeps every
// sequence's greedy output exact, and a long prompt prefilled in chunks never stalls a running decode.
#include <gtest/gtest.h>

#include <memory>

#include "llama_helpers.hpp"
#include "sched/scheduler.hpp"
#include "source_paths.hpp"

namespace kiln::sched {
namespace {

const std::string kModel = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";

std::unique_ptr<model::ModelHost> host_with_blocks(uint32_t blocks, uint32_t budget = 256) {
  model::HostOptions o = test::cpu_options();
  o.max_context = 256;
  o.max_seqs = 8;
  o.max_batch_tokens = budget;
  o.cache.block_tokens = 16;
  o.cache.memory_bytes = uint64_t{blocks} * 16 * 1280;  // 1280 bytes of f32 K and V per token
  return model::ModelHost::open(kModel, test::llama_registry(), o);
}

std::vector<int32_t> prompt(int seed, size_t n) {
  std::vector<int32_t> p = {1};
  for (size_t i = 1; i < n; ++i) p.push_back(static_cast<int32_t>(3 + (seed * 131 + i * 17) % 500));
  return p;
}

/** Runs the scheduler until every sequence has `gen` greedy tokens; returns each one's output. */
std::vector<std::vector<int32_t>> run(model::ModelHost& host, Scheduler& sched, std::vector<Sequence>& seqs, size_t gen,
                                      const std::function<void(const Plan&)>& on_plan = nullptr) {
  for (Sequence& s : seqs) sched.enqueue(&s);
  const uint32_t V = host.limits().n_vocab;
  size_t done = 0;
  for (int guard = 0; done < seqs.size() && guard < 100000; ++guard) {
    Plan p = sched.plan();
    EXPECT_FALSE(p.empty());
    if (p.empty()) break;
    if (on_plan) on_plan(p);
    model::StepResult r;
    const model::StepStatus st = host.step(p.steps(), &r);
    EXPECT_TRUE(st.ok()) << st.message;
    if (!st.ok()) break;
    sched.commit(p);
    uint32_t in_order = 0;  // the engine's reading: logits rows follow the plan's rows
    for (size_t i = 0; i < p.rows.size(); ++i) {
      in_order += p.rows[i].step.logits ? 1 : 0;
      if (!p.rows[i].sample) continue;
      uint32_t row = 0;
      while (r.row_seq[row] != p.rows[i].step.seq) ++row;
      EXPECT_EQ(row + 1, in_order);
      Sequence* s = p.rows[i].seq;
      s->tokens.push_back(test::argmax(r.logits.data() + size_t{row} * V, V));
      if (s->tokens.size() - s->prompt_len == gen) {
        sched.remove(s);
        ++done;
      }
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (Sequence& s : seqs) out.emplace_back(s.tokens.begin() + s.prompt_len, s.tokens.end());
  return out;
}

std::vector<Sequence> make(size_t n, size_t len) {
  std::vector<Sequence> seqs(n);
  for (size_t i = 0; i < n; ++i) {
    seqs[i].tokens = prompt(static_cast<int>(i), len);
    seqs[i].prompt_len = static_cast<uint32_t>(len);
  }
  return seqs;
}

TEST(Scheduler, RecomputePreemptionKeepsOutputsExact) {
  // Each sequence ends at 150 + 60 tokens = 14 blocks; 24 blocks hold one at a time to the end.
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < 3; ++i) {
    auto host = host_with_blocks(64);
    Scheduler sched(*host);
    std::vector<Sequence> one = make(3, 150);
    std::vector<Sequence> just = {one[i]};
    alone.push_back(run(*host, sched, just, 60)[0]);
  }
  auto host = host_with_blocks(24);
  Scheduler sched(*host);
  std::vector<Sequence> seqs = make(3, 150);
  const auto together = run(*host, sched, seqs, 60);
  EXPECT_GT(sched.stats().preemptions, 0u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << "sequence " << i;
  EXPECT_TRUE(sched.idle());
  EXPECT_EQ(host->cache().free_blocks(0), 24u);
}

TEST(Scheduler, ChunkedPrefillNeverStallsARunningDecode) {
  auto host = host_with_blocks(64, 32);  // 32 tokens per step
  Scheduler sched(*host);
  std::vector<Sequence> seqs = make(2, 8);
  seqs[1].tokens = prompt(7, 200);  // seven chunks
  seqs[1].prompt_len = 200;
  bool a_decoding = false;
  size_t plans_with_b_prefill = 0;
  run(*host, sched, seqs, 40, [&](const Plan& p) {
    bool a = false, b_prefill = false;
    uint32_t tokens = 0;
    for (size_t i = 0; i < p.rows.size(); ++i) {
      tokens += static_cast<uint32_t>(p.rows[i].step.tokens.size());
      if (p.rows[i].seq == &seqs[0]) a = true;
      if (p.rows[i].seq == &seqs[1] && p.rows[i].step.tokens.size() > 1) b_prefill = true;
    }
    EXPECT_LE(tokens, 32u);
    if (a && seqs[0].tokens.size() > seqs[0].prompt_len) a_decoding = true;
    if (b_prefill) {
      ++plans_with_b_prefill;
      // While the long prompt is prefilled, the running stream decodes in every step.
      if (a_decoding && seqs[0].tokens.size() - seqs[0].prompt_len < 40) {
        EXPECT_TRUE(a);
      }
    }
  });
  EXPECT_GE(plans_with_b_prefill, 6u);
}

}  // namespace
}  // namespace kiln::sched
