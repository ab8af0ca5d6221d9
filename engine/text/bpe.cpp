#include "text/bpe.hpp"

#include <queue>

#include "text/utf8.hpp"

namespace kiln::text {

void MergeTable::reserve(std::size_t n) {
  std::size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  std::size_t bits = 1 << 12;
  while (bits < n * 16 && bits < (std::size_t(1) << 26)) bits <<= 1;  // ~16 bits per merge
  filter_.assign(bits / 64, 0);
  fmask_ = bits - 1;
}

void MergeTable::insert(TokenId a, TokenId b, Value v) {
  if ((count_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.size());  // doubles: reserve(n) picks capacity >= 2n
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key & 0xFFFFFFFFu), s.v);
  }
  std::uint64_t k = key(a, b);
  for (std::size_t h = hash(k) & mask_;; h = (h + 1) & mask_) {
    Slot& s = slots_[h];
    if (s.key == k) return;
    if (s.key == kEmpty) {
      s.key = k;
      s.v = v;
      ++count_;
      const std::size_t f = (hash(k) >> 32) & fmask_;
      filter_[f >> 6] |= std::uint64_t(1) << (f & 63);
      return;
    }
  }
}

void StringIdMap::build(const std::vector<std::pair<std::string, std::int64_t>>& entries) {
  std::size_t bytes = 0;
  for (const auto& e : entries) bytes += e.first.size();
  arena_.clear();
  arena_.reserve(bytes);
  std::size_t cap = 16;
  while (cap < entries.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  for (const auto& [key, id] : entries) {
    for (std::size_t h = hash(key) & mask_;; h = (h + 1) & mask_) {
      Slot& s = slots_[h];
      if (s.id < 0) {
        s.off = static_cast<std::uint32_t>(arena_.size());
        s.len = static_cast<std::uint32_t>(key.size());
        s.id = static_cast<TokenId>(id);
        arena_.append(key);
        ++count_;
        break;
      }
      if (s.len == key.size() && std::string_view(arena_.data() + s.off, s.len) == key) break;
    }
  }
}

void Bpe::char_symbols(std::string_view word, std::vector<TokenId>& syms) const {
  bool last_unk = false;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t len = utf8::seq_len(static_cast<unsigned char>(word[i]));
    std::string_view ch = word.substr(i, len);
    TokenId id;
    if (len < 4 && !bmp_chars.empty()) {
      std::size_t l;
      id = bmp_chars[utf8::decode_at(word, i, l)];
    } else {
      id = vocab.find(ch);
    }
    if (id >= 0) {
      syms.push_back(id);
      last_unk = false;
    } else if (byte_fallback) {
      for (char b : ch) syms.push_back(byte_ids[static_cast<unsigned char>(b)]);
      last_unk = false;
    } else if (unk >= 0) {
      if (!(fuse_unk && last_unk)) syms.push_back(unk);
      last_unk = true;
    }
    i += len;
  }
}

void Bpe::merge(std::vector<TokenId>& syms) const {
  const std::size_t n = syms.size();
  if (n < 2) return;
  if (n <= 24) {
    // Short words: a rank per adjacent pair, rescanned for the minimum (in cache), and only the
    // two pairs around a merge looked up again.
    std::int32_t rank[24];
    TokenId merged[24];
    auto look = [&](std::size_t i) {
      const MergeTable::Value* v = merges.find(syms[i], syms[i + 1]);
      rank[i] = v ? v->rank : INT32_MAX;
      merged[i] = v ? v->id : 0;
    };
    std::size_t len = n;
    for (std::size_t i = 0; i + 1 < len; ++i) merges.prefetch(syms[i], syms[i + 1]);
    for (std::size_t i = 0; i + 1 < len; ++i) look(i);
    for (;;) {
      std::int32_t best_rank = INT32_MAX;
      std::size_t best = 0;
      for (std::size_t i = 0; i + 1 < len; ++i)
        if (rank[i] < best_rank) { best_rank = rank[i]; best = i; }
      if (best_rank == INT32_MAX) break;
      syms[best] = merged[best];
      for (std::size_t i = best + 1; i + 1 < len; ++i) syms[i] = syms[i + 1];
      for (std::size_t i = best + 1; i + 2 < len; ++i) {
        rank[i] = rank[i + 1];
        merged[i] = merged[i + 1];
      }
      --len;
      if (best > 0) look(best - 1);
      if (best + 1 < len) look(best);
    }
    syms.resize(len);
    return;
  }
  // Long words: doubly linked symbols and a min-heap of (rank, left position).
  std::vector<std::int32_t> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
  }
  struct Cand { std::int32_t rank; std::int32_t pos; TokenId left, right, id; };
  auto cmp = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(cmp)> heap(cmp);
  auto push = [&](std::int32_t p) {
    if (p < 0 || next[p] < 0) return;
    if (const MergeTable::Value* v = merges.find(syms[p], syms[next[p]]))
      heap.push({v->rank, p, syms[p], syms[next[p]], v->id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (i + 8 + 1 < n) merges.prefetch(syms[i + 8], syms[i + 9]);  // keep ~8 misses in flight
    push(static_cast<std::int32_t>(i));
  }
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    std::int32_t p = c.pos;
    if (dead[p] || next[p] < 0 || syms[p] != c.left || syms[next[p]] != c.right) continue;  // stale
    std::int32_t q = next[p];
    syms[p] = c.id;
    dead[q] = true;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) merges.prefetch(syms[prev[p]], syms[p]);
    if (next[p] >= 0) merges.prefetch(syms[p], syms[next[p]]);
    push(prev[p]);
    push(p);
  }
  std::size_t w = 0;
  for (std::int32_t p = 0; p >= 0; p = next[p]) syms[w++] = syms[p];
  syms.resize(w);
}

}  // namespace kiln::text
