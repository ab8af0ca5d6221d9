#include "cache/kv_cache.hpp"

#include <algorithm>
#include <unordered_set>

#include "core/error.hpp"

namespace kiln::cache {

const char* status_message(Status s) {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::out_of_blocks:
      return "the KV cache is full (no free blocks); wait for sequences to finish or raise cache.memory";
    case Status::out_of_slots:
      return "max_seqs sequences are alive (or every recurrent state slot is taken); wait for one to finish or "
             "raise max_seqs";
    case Status::too_long:
      return "the sequence would exceed the context limit (max_context)";
    case Status::unknown_sequence:
      return "unknown sequence";
    case Status::duplicate_sequence:
      return "the sequence already exists";
    case Status::repeated_in_step:
      return "a sequence is listed twice in one step; give each sequence one entry";
    case Status::invalid_token:
      return "a token id is outside the model's vocabulary";
    case Status::too_many_tokens:
      return "the step holds more tokens than max_batch_tokens; split it";
    case Status::too_many_seqs:
      return "the step holds more sequences than one step may (host or device limit); split it";
    case Status::prefix_unusable:
      return "the shared prefix cannot be resumed at its length (a sliding window's blocks or the recurrent state "
             "there is missing); recompute it";
    case Status::busy:
      return "the sequence has a step in flight; finish that step first";
    case Status::sequence_failed:
      return "the sequence's recurrent state was lost with a failed step; release it and start it again";
    case Status::empty_step:
      return "a step needs at least one token and one logits row";
  }
  return "?";
}

namespace {
uint32_t ceil_div(uint32_t a, uint32_t b) {
  return (a + b - 1) / b;
}
}  // namespace

KvCache::KvCache(CacheLayout layout, CacheOptions options) : layout_(std::move(layout)), options_(options) {
  for (const auto& g : layout_.groups) pools_.emplace_back(g.n_blocks);
  for (uint32_t i = layout_.n_state_slots; i-- > 0;) free_slots_.push_back(static_cast<int32_t>(i));
}

Status KvCache::take_state_slot(Seq* s) {
  if (!layout_.has_recurrent()) return Status::ok;
  // Snapshots take slots too; a live sequence never does beyond max_seqs.
  if (free_slots_.empty()) return Status::out_of_slots;
  s->state_slot = free_slots_.back();
  free_slots_.pop_back();
  return Status::ok;
}

Status KvCache::add(uint64_t seq) {
  if (seqs_.count(seq)) return Status::duplicate_sequence;
  if (seqs_.size() >= options_.max_seqs) return Status::out_of_slots;
  Seq s;
  if (Status st = take_state_slot(&s); st != Status::ok) return st;
  s.tables.resize(layout_.groups.size());
  seqs_.emplace(seq, std::move(s));
  return Status::ok;
}

uint32_t KvCache::first_visible(size_t g, uint32_t length) const {
  const KvGroup& G = layout_.groups[g];
  if (G.kind != KILN_CACHE_SLIDING_KV || !options_.free_out_of_window) return 0;
  // The next query sits at position `length` and sees keys > length - window.
  return length >= G.window ? length - G.window + 1 : 0;
}

bool KvCache::prefix_usable(const BlockSpan& span) const {
  if (span.tables.size() != layout_.groups.size()) return false;
  const uint32_t bt = layout_.block_tokens;
  for (size_t g = 0; g < span.tables.size(); ++g) {
    const auto& t = span.tables[g];
    if (t.size() < ceil_div(span.length, bt)) return false;
    for (uint32_t p = first_visible(g, span.length) / bt * bt; p < span.length; p += bt)
      if (t[p / bt] < 0) return false;
  }
  return true;
}

Status KvCache::add(uint64_t seq, const BlockSpan& prefix) {
  if (seqs_.count(seq)) return Status::duplicate_sequence;
  if (seqs_.size() >= options_.max_seqs) return Status::out_of_slots;
  if (prefix.length > options_.max_context) return Status::too_long;
  if (!prefix_usable(prefix)) return Status::prefix_unusable;
  Seq s;
  if (Status st = take_state_slot(&s); st != Status::ok) return st;
  const uint32_t bt = layout_.block_tokens;
  s.length = prefix.length;
  s.tables.resize(layout_.groups.size());
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    const uint32_t keep_from = first_visible(g, prefix.length) / bt;
    for (uint32_t b = 0; b < ceil_div(prefix.length, bt); ++b) {
      const int32_t id = b < keep_from ? -1 : prefix.tables[g][b];
      if (id >= 0) pools_[g].retain(id);
      s.tables[g].push_back(id);
    }
  }
  seqs_.emplace(seq, std::move(s));
  return Status::ok;
}

void KvCache::check_settled(const Seq& s, uint64_t seq, const char* what) const {
  if (s.open)
    throw_error("[cache] {} of sequence {} while a step of it is open; commit or roll the step back first", what, seq);
}

void KvCache::release(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  check_settled(it->second, seq, "release");
  for (size_t g = 0; g < pools_.size(); ++g)
    for (int32_t b : it->second.tables[g])
      if (b >= 0) pools_[g].release(b);
  if (it->second.state_slot >= 0) free_slots_.push_back(it->second.state_slot);
  seqs_.erase(it);
}

Status KvCache::truncate(uint64_t seq, uint32_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Status::unknown_sequence;
  Seq& s = it->second;
  check_settled(s, seq, "truncate");
  if (length > s.length) return Status::too_long;
  const uint32_t bt = layout_.block_tokens, keep = ceil_div(length, bt);
  for (size_t g = 0; g < pools_.size(); ++g)
    for (uint32_t p = first_visible(g, length) / bt * bt; p < length; p += bt)
      if (s.tables[g][p / bt] < 0) return Status::prefix_unusable;
  for (size_t g = 0; g < pools_.size(); ++g) {
    auto& t = s.tables[g];
    for (size_t b = keep; b < t.size(); ++b)
      if (t[b] >= 0) pools_[g].release(t[b]);
    t.resize(keep);
  }
  s.length = length;
  return Status::ok;
}

BlockSpan KvCache::hold(uint64_t seq, uint32_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw_error("[cache] hold: unknown sequence {}", seq);
  const Seq& s = it->second;
  check_settled(s, seq, "hold");
  if (length > s.length) throw_error("[cache] hold: sequence {} has {} tokens, not {}", seq, s.length, length);
  BlockSpan span;
  span.length = length;
  const uint32_t n = ceil_div(length, layout_.block_tokens);
  for (size_t g = 0; g < pools_.size(); ++g) {
    span.tables.emplace_back(s.tables[g].begin(), s.tables[g].begin() + n);
    for (int32_t b : span.tables.back())
      if (b >= 0) pools_[g].hold(b);
  }
  return span;
}

void KvCache::drop(BlockSpan& span) {
  for (size_t g = 0; g < span.tables.size() && g < pools_.size(); ++g)
    for (int32_t b : span.tables[g])
      if (b >= 0) pools_[g].unhold(b);
  span = {};
}

int32_t KvCache::take_slot() {
  // Slots beyond the live sequences only: every sequence that may still start keeps one.
  const size_t reserved =
      layout_.has_recurrent() && options_.max_seqs > seqs_.size() ? options_.max_seqs - seqs_.size() : 0;
  if (free_slots_.size() <= reserved) return -1;
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void KvCache::free_slot(int32_t slot) {
  if (slot >= 0) free_slots_.push_back(slot);
}

uint32_t KvCache::fresh(const Seq& s, size_t g, uint32_t n, bool* copy) const {
  const uint32_t bt = layout_.block_tokens;
  const auto& table = s.tables[g];
  const uint32_t want = ceil_div(s.length + n, bt);
  uint32_t fresh = want > table.size() ? want - static_cast<uint32_t>(table.size()) : 0;
  // Writing into a partly filled block someone else holds: copy it first (copy-on-write), so
  // every holder keeps the rows it had.
  *copy = false;
  if (n && s.length % bt) {
    const int32_t last = table[s.length / bt];
    if (last >= 0 && pools_[g].refs(last) > 1) {
      *copy = true;
      ++fresh;
    }
  }
  return fresh;
}

Status KvCache::check(const std::vector<std::pair<uint64_t, uint32_t>>& appends, StepNeeds* needs) const {
  StepNeeds nd;
  nd.blocks.assign(pools_.size(), 0);
  for (size_t g = 0; g < pools_.size(); ++g) nd.free.push_back(pools_[g].free_count());
  std::unordered_set<uint64_t> seen;
  Status st = Status::ok;
  for (const auto& [seq, n] : appends) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return Status::unknown_sequence;
    if (!seen.insert(seq).second) return Status::repeated_in_step;
    const Seq& s = it->second;
    if (uint64_t{s.length} + n > options_.max_context) st = st == Status::ok ? Status::too_long : st;
    for (size_t g = 0; g < pools_.size(); ++g) {
      bool copy = false;
      nd.blocks[g] += fresh(s, g, n, &copy);
      nd.copies += copy;
    }
  }
  if (needs) *needs = nd;
  if (st != Status::ok) return st;
  return nd.fits() ? Status::ok : Status::out_of_blocks;
}

Status KvCache::begin(const std::vector<std::pair<uint64_t, uint32_t>>& appends, Transaction* tx) {
  if (Status st = check(appends, nullptr); st != Status::ok) return st;
  Transaction t;
  t.open = true;
  for (const auto& [seq, n] : appends) {
    Seq& s = seqs_.at(seq);
    Transaction::Seq rec{seq, s.length, n, {}, {}};
    for (size_t g = 0; g < pools_.size(); ++g) {
      auto& table = s.tables[g];
      rec.old_size.push_back(table.size());
      bool copy = false;
      const uint32_t count = fresh(s, g, n, &copy);
      std::vector<int32_t> got;
      if (!pools_[g].allocate(count, &got)) throw_error("[cache] internal error: allocation failed after the check");
      size_t next = 0;
      if (copy) {
        // The sequence keeps its hold on the shared block until commit, so a rollback can put it back.
        const size_t idx = s.length / layout_.block_tokens;
        const BlockCopy c{g, table[idx], got[next++]};
        t.copies.push_back(c);
        rec.replaced.push_back(c);
        table[idx] = c.dst;
      }
      table.insert(table.end(), got.begin() + static_cast<long>(next), got.end());
    }
    s.length += n;
    ++s.open;
    t.seqs.push_back(std::move(rec));
  }
  *tx = std::move(t);
  return Status::ok;
}

void KvCache::release_out_of_window(Seq& s, uint32_t length) {
  const uint32_t bt = layout_.block_tokens;
  for (size_t g = 0; g < pools_.size(); ++g) {
    const uint32_t end = first_visible(g, length) / bt;
    auto& table = s.tables[g];
    for (size_t b = 0; b < end && b < table.size(); ++b)
      if (table[b] >= 0) {
        pools_[g].release(table[b]);
        table[b] = -1;
      }
  }
}

void KvCache::commit(Transaction& tx) {
  if (!tx.open) return;
  for (const Transaction::Seq& r : tx.seqs) {
    auto it = seqs_.find(r.seq);
    if (it == seqs_.end()) continue;
    for (const BlockCopy& c : r.replaced) pools_[c.group].release(c.src);
    release_out_of_window(it->second, r.start + r.n);
    --it->second.open;
  }
  tx.open = false;
}

void KvCache::rollback(Transaction& tx) {
  if (!tx.open) return;
  for (auto r = tx.seqs.rbegin(); r != tx.seqs.rend(); ++r) {
    auto it = seqs_.find(r->seq);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    for (size_t g = 0; g < pools_.size(); ++g) {
      auto& table = s.tables[g];
      for (size_t b = r->old_size[g]; b < table.size(); ++b)
        if (table[b] >= 0) pools_[g].release(table[b]);
      table.resize(r->old_size[g]);
    }
    for (const BlockCopy& c : r->replaced) {
      s.tables[c.group][r->start / layout_.block_tokens] = c.src;
      pools_[c.group].release(c.dst);
    }
    s.length = r->start;
    --s.open;
  }
  tx.open = false;
}

Status KvCache::append_all(const std::vector<std::pair<uint64_t, uint32_t>>& appends) {
  Transaction tx;
  if (Status st = begin(appends, &tx); st != Status::ok) return st;
  commit(tx);
  return Status::ok;
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
