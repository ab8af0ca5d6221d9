#include "cache/ragged_batch.hpp"

#include <algorithm>
#include <bit>

namespace kiln::cache {

std::vector<std::pair<uint64_t, uint32_t>> step_appends(Steps steps) {
  std::vector<std::pair<uint64_t, uint32_t>> appends;
  for (const auto& s : steps)
    if (!s.tokens.empty()) appends.emplace_back(s.seq, static_cast<uint32_t>(s.tokens.size()));
  return appends;
}

RaggedBatch describe_batch(const KvCache& cache, const Transaction& tx, Steps steps) {
  RaggedBatch b;
  const auto& layout = cache.layout();
  b.groups.resize(layout.groups.size());
  for (const SeqStep& s : steps) {
    if (s.tokens.empty()) continue;
    const Transaction::Seq* rec = tx.find(s.seq);
    const uint32_t start = rec ? rec->start : cache.length(s.seq) - static_cast<uint32_t>(s.tokens.size());
    const auto q_start = static_cast<int32_t>(b.tokens.size());
    const auto q_len = static_cast<int32_t>(s.tokens.size());
    for (int32_t t = 0; t < q_len; ++t) {
      const uint32_t pos = start + static_cast<uint32_t>(t);
      b.tokens.push_back(s.tokens[static_cast<size_t>(t)]);
      b.positions.push_back(static_cast<int32_t>(pos));
      for (size_t g = 0; g < b.groups.size(); ++g) b.groups[g].slots.push_back(cache.slot(s.seq, g, pos));
      if (s.logits_all || (s.logits && t == q_len - 1)) b.logits_rows.push_back(q_start + t);
    }
    b.seqs.insert(b.seqs.end(), {q_start, q_len, static_cast<int32_t>(start) + q_len, cache.state_slot(s.seq)});
    b.seq_ids.push_back(s.seq);
  }
  b.n_tokens = static_cast<uint32_t>(b.tokens.size());
  b.n_seqs = static_cast<uint32_t>(b.seq_ids.size());
  for (size_t g = 0; g < b.groups.size(); ++g) {
    auto& G = b.groups[g];
    uint32_t longest = 1;
    for (uint64_t id : b.seq_ids) longest = std::max(longest, static_cast<uint32_t>(cache.block_table(id, g).size()));
    G.max_blocks = std::bit_ceil(longest);
    G.block_table.assign(size_t{b.n_seqs} * G.max_blocks, -1);
    for (uint32_t s = 0; s < b.n_seqs; ++s) {
      const auto& t = cache.block_table(b.seq_ids[s], g);
      std::copy(t.begin(), t.end(), G.block_table.begin() + static_cast<long>(size_t{s} * G.max_blocks));
    }
  }
  return b;
}

Status plan_batch(KvCache& cache, Steps steps, RaggedBatch* out, Transaction* tx) {
  for (const auto& s : steps)
    if (!cache.has(s.seq)) return Status::unknown_sequence;
  if (Status st = cache.begin(step_appends(steps), tx); st != Status::ok) return st;
  *out = describe_batch(cache, *tx, steps);
  return Status::ok;
}

}  // namespace kiln::cache
