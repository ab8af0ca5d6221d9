#include "cache/kv_cache.hpp"

#include "core/error.hpp"

namespace kiln::cache {

const char* status_message(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::out_of_blocks: return "the KV cache is full (no free blocks); wait for sequences to finish or raise cache.memory";
    case Status::out_of_slots: return "every recurrent state slot is in use; wait for a sequence to finish or raise max_seqs";
    case Status::too_long: return "the sequence would exceed the context limit (max_context)";
    case Status::unknown_sequence: return "unknown sequence";
    case Status::duplicate_sequence: return "the sequence already exists";
  }
  return "?";
}

KvCache::KvCache(CacheLayout layout, CacheOptions options) : layout_(std::move(layout)), options_(options) {
  for (const auto& g : layout_.groups) pools_.emplace_back(g.n_blocks);
  for (uint32_t i = layout_.n_state_slots; i-- > 0;) free_slots_.push_back(static_cast<int32_t>(i));
}

Status KvCache::add(uint64_t seq) {
  if (seqs_.count(seq)) return Status::duplicate_sequence;
  Seq s;
  if (layout_.has_recurrent()) {
    if (free_slots_.empty()) return Status::out_of_slots;
    s.state_slot = free_slots_.back();
    free_slots_.pop_back();
  }
  s.tables.resize(layout_.groups.size());
  seqs_.emplace(seq, std::move(s));
  return Status::ok;
}

void KvCache::needs(const Seq& s, size_t g, uint32_t n, uint32_t* fresh, uint32_t* releasable) const {
  const uint32_t bt = layout_.block_tokens;
  const auto& table = s.tables[g];
  const uint32_t want = (s.length + n + bt - 1) / bt;
  *fresh = want > table.size() ? want - static_cast<uint32_t>(table.size()) : 0;
  *releasable = 0;
  const KvGroup& G = layout_.groups[g];
  if (G.kind != KILN_CACHE_SLIDING_KV || !options_.free_out_of_window) return;
  // The first query of this step sits at position `length` and sees keys > length - window; a block
  // whose last position is below that is invisible to every query from now on.
  const int64_t first_visible = static_cast<int64_t>(s.length) - G.window + 1;
  if (first_visible <= 0) return;
  const auto keep_from = static_cast<size_t>(first_visible / bt);
  for (size_t b = 0; b < keep_from && b < table.size(); ++b)
    if (table[b] >= 0) ++*releasable;
}

void KvCache::apply(Seq& s, uint32_t n) {
  const uint32_t bt = layout_.block_tokens;
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    auto& table = s.tables[g];
    const KvGroup& G = layout_.groups[g];
    if (G.kind == KILN_CACHE_SLIDING_KV && options_.free_out_of_window) {
      const int64_t first_visible = static_cast<int64_t>(s.length) - G.window + 1;
      if (first_visible > 0)
        for (size_t b = 0; b < static_cast<size_t>(first_visible / bt) && b < table.size(); ++b)
          if (table[b] >= 0) {
            pools_[g].release(table[b]);
            table[b] = -1;
          }
    }
    const uint32_t want = (s.length + n + bt - 1) / bt;
    if (want > table.size()) {
      const bool ok = pools_[g].allocate(want - static_cast<uint32_t>(table.size()), &table);
      if (!ok) throw_error("[cache] internal error: allocation failed after the capacity check");
    }
  }
  s.length += n;
}

Status KvCache::append(uint64_t seq, uint32_t n) { return append_all({{seq, n}}); }

Status KvCache::append_all(const std::vector<std::pair<uint64_t, uint32_t>>& steps) {
  std::vector<int64_t> balance(pools_.size(), 0);  // blocks still free after the whole step
  for (size_t g = 0; g < pools_.size(); ++g) balance[g] = pools_[g].free_count();
  std::unordered_map<uint64_t, uint32_t> total;  // a sequence may appear once per step; sum if repeated
  for (const auto& [seq, n] : steps) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return Status::unknown_sequence;
    total[seq] += n;
  }
  for (const auto& [seq, n] : total) {
    const Seq& s = seqs_.at(seq);
    if (uint64_t{s.length} + n > options_.max_context) return Status::too_long;
    for (size_t g = 0; g < pools_.size(); ++g) {
      uint32_t fresh, releasable;
      needs(s, g, n, &fresh, &releasable);
      balance[g] += static_cast<int64_t>(releasable) - static_cast<int64_t>(fresh);
    }
  }
  for (int64_t b : balance)
    if (b < 0) return Status::out_of_blocks;
  // Release first in every sequence so the allocations below can use those blocks.
  for (const auto& [seq, n] : total) {
    Seq& s = seqs_.at(seq);
    apply(s, n);
  }
  return Status::ok;
}

void KvCache::release(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (size_t g = 0; g < pools_.size(); ++g)
    for (int32_t b : it->second.tables[g])
      if (b >= 0) pools_[g].release(b);
  if (it->second.state_slot >= 0) free_slots_.push_back(it->second.state_slot);
  seqs_.erase(it);
}

uint32_t KvCache::length(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

int32_t KvCache::state_slot(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.state_slot;
}

const std::vector<int32_t>& KvCache::block_table(uint64_t seq, size_t group) const {
  static const std::vector<int32_t> empty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? empty : it->second.tables[group];
}

int32_t KvCache::slot(uint64_t seq, size_t group, uint32_t pos) const {
  const auto& t = block_table(seq, group);
  const uint32_t bt = layout_.block_tokens;
  if (pos / bt >= t.size() || t[pos / bt] < 0) return -1;
  return t[pos / bt] * static_cast<int32_t>(bt) + static_cast<int32_t>(pos % bt);
}

uint32_t KvCache::blocks_held(uint64_t seq, size_t group) const {
  uint32_t n = 0;
  for (int32_t b : block_table(seq, group)) n += b >= 0;
  return n;
}

}  // namespace kiln::cache
