// The BPE model: vocabulary ids, merge ranks, and the merge loop (lowest rank first, leftmost on
// ties, exactly Hugging Face's Word::merge_all). Symbols are token ids from the start: bytes for a
// byte-level vocabulary, characters (or <0xXX> byte-fallback tokens) for a SentencePiece one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
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
    for (std::size_t h = hash(k) & mask_;; h = (h + 1) & mask_) {
      const Slot& s = slots_[h];
      if (s.key == k) return &s.v;
      if (s.key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const { return count_; }

 private:
  static constexpr std::uint64_t kEmpty = ~0ULL;
  struct Slot { std::uint64_t key = kEmpty; Value v{}; };
  static std::uint64_t key(TokenId a, TokenId b) { return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b); }
  static std::size_t hash(std::uint64_t k) { return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ULL) >> 17); }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
};

struct Bpe {
  std::unordered_map<std::string, TokenId> vocab;  // model vocabulary only
  MergeTable merges;
  std::array<TokenId, 256> byte_ids{};  // byte-level: id of each byte's alphabet character; fallback: <0xXX>
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  TokenId unk = -1;
  std::size_t max_id = 0;  // largest model id + 1

  /** Merges `syms` in place (the word's initial symbols) down to the final tokens. */
  void merge(std::vector<TokenId>& syms) const;
  /** Initial symbols of a SentencePiece-style word (characters, byte fallback, unk), appended. */
  void char_symbols(std::string_view word, std::vector<TokenId>& syms) const;
};

}  // namespace kiln::text
