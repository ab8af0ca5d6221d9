// The BPE model: vocabulary ids, merge ranks, and the merge loop (lowest rank first, leftmost on
// ties, exactly Hugging Face's Word::merge_all). Symbols are token ids from the start: bytes for a
// byte-level vocabulary, characters (or <0xXX> byte-fallback tokens) for a SentencePiece one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

using TokenId = std::int32_t;

/** Open-addressing map (a, b) → (rank, merged id); read-only after construction. */
class MergeTable {
 public:
  struct Value { std::int32_t rank; TokenId id; };
  void reserve(std::size_t n);
  void insert(TokenId a, TokenId b, Value v);  // the first insert of a pair wins (lowest rank)
  const Value* find(TokenId a, TokenId b) const {
    if (mask_ == 0) return nullptr;
    std::uint64_t k = key(a, b);
    const std::size_t hk = hash(k);
    // Most candidate pairs are not merges; a small bit filter (fits in cache) rejects them without
    // touching the large slot array.
    const std::size_t f = (hk >> 32) & fmask_;
    if (!(filter_[f >> 6] >> (f & 63) & 1)) return nullptr;
    for (std::size_t h = hk & mask_;; h = (h + 1) & mask_) {
      const Slot& s = slots_[h];
      if (s.key == k) return &s.v;
      if (s.key == kEmpty) return nullptr;
    }
  }
  /** Starts loading the slot of (a, b) so several lookups' cache misses overlap. */
  void prefetch(TokenId a, TokenId b) const {
    if (mask_ != 0) __builtin_prefetch(&slots_[hash(key(a, b)) & mask_]);
  }
  std::size_t size() const { return count_; }

 private:
  static constexpr std::uint64_t kEmpty = ~0ULL;
  struct Slot { std::uint64_t key = kEmpty; Value v{}; };
  static std::uint64_t key(TokenId a, TokenId b) { return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b); }
  static std::size_t hash(std::uint64_t k) {  // murmur3 fmix64: both ids reach the low bits
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<Slot> slots_;
  std::vector<std::uint64_t> filter_;
  std::size_t mask_ = 0, count_ = 0, fmask_ = 0;
};

/**
 * Token text → id, built once: all keys in one arena, open addressing over (offset, length, id).
 * Lookups take a string_view and never allocate; one malloc'd node per token (unordered_map) made
 * loading a 262k vocabulary several times slower.
 */
class StringIdMap {
 public:
  /** Duplicate keys keep the first id. */
  void build(const std::vector<std::pair<std::string, std::int64_t>>& entries);
  /** The id, or -1. */
  TokenId find(std::string_view key) const {
    if (slots_.empty()) return -1;
    for (std::size_t h = hash(key) & mask_;; h = (h + 1) & mask_) {
      const Slot& s = slots_[h];
      if (s.id < 0) return -1;
      if (s.len == key.size() && std::string_view(arena_.data() + s.off, s.len) == key) return s.id;
    }
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.id >= 0) f(std::string_view(arena_.data() + s.off, s.len), s.id);
  }
  std::size_t size() const { return count_; }

 private:
  struct Slot { std::uint32_t off = 0, len = 0; TokenId id = -1; };
  static std::size_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  std::string arena_;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
};

struct Bpe {
  StringIdMap vocab;  // model vocabulary only
  MergeTable merges;
  std::array<TokenId, 256> byte_ids{};  // byte-level: id of each byte's alphabet character; fallback: <0xXX>
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  TokenId unk = -1;
  std::size_t max_id = 0;  // largest model id + 1
  std::vector<TokenId> bmp_chars;  // SentencePiece-style: id of each single-character token below U+10000, or -1

  /** Merges `syms` in place (the word's initial symbols) down to the final tokens. */
  void merge(std::vector<TokenId>& syms) const;
  /** Initial symbols of a SentencePiece-style word (characters, byte fallback, unk), appended. */
  void char_symbols(std::string_view word, std::vector<TokenId>& syms) const;
};

}  // namespace kiln::text
