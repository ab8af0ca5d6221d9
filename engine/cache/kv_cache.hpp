// Per-sequence cache bookkeeping over the pools of a CacheLayout: block tables per KV group,
// sliding-window layers releasing blocks that left the window, recurrent state slots. Every call
// that needs memory returns a Status; running out never throws and never leaves partial changes.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_pool.hpp"
#include "cache/layout.hpp"

namespace kiln::cache {

enum class Status {
  ok = 0,
  out_of_blocks,     ///< a KV pool has too few free blocks: queue or preempt, then retry
  out_of_slots,      ///< every recurrent state slot is taken
  too_long,          ///< the sequence would exceed max_context
  unknown_sequence,
  duplicate_sequence,
};
const char* status_message(Status s);

class KvCache {
 public:
  KvCache(CacheLayout layout, CacheOptions options);

  const CacheLayout& layout() const { return layout_; }
  const CacheOptions& options() const { return options_; }

  /** Starts a sequence (takes a recurrent slot when the model has recurrent layers). */
  Status add(uint64_t seq);
  /**
   * Makes room for `n` more tokens of `seq` (positions length()..length()+n-1) and advances its
   * length. Sliding groups first return blocks no query of this step can see.
   */
  Status append(uint64_t seq, uint32_t n);
  /** append() for several sequences, all or nothing. */
  Status append_all(const std::vector<std::pair<uint64_t, uint32_t>>& steps);
  /** Frees every block and the state slot of `seq`. Unknown sequences are ignored. */
  void release(uint64_t seq);

  bool has(uint64_t seq) const { return seqs_.count(seq) != 0; }
  uint32_t length(uint64_t seq) const;
  int32_t state_slot(uint64_t seq) const;  ///< -1 without recurrent layers
  /** Block ids by logical block index (position / block_tokens); -1 for blocks already released. */
  const std::vector<int32_t>& block_table(uint64_t seq, size_t group) const;
  /** Cache row (block * block_tokens + offset) holding `pos` of `seq` in `group`, -1 if released. */
  int32_t slot(uint64_t seq, size_t group, uint32_t pos) const;
  uint32_t blocks_held(uint64_t seq, size_t group) const;
  uint32_t free_blocks(size_t group) const { return pools_[group].free_count(); }
  uint32_t free_state_slots() const { return static_cast<uint32_t>(free_slots_.size()); }
  size_t n_sequences() const { return seqs_.size(); }

 private:
  struct Seq {
    uint32_t length = 0;
    int32_t state_slot = -1;
    std::vector<std::vector<int32_t>> tables;  ///< per group
  };
  /** Blocks `seq` would newly need and could release in `group` for n more tokens. */
  void needs(const Seq& s, size_t group, uint32_t n, uint32_t* fresh, uint32_t* releasable) const;
  void apply(Seq& s, uint32_t n);

  CacheLayout layout_;
  CacheOptions options_;
  std::vector<BlockPool> pools_;
  std::vector<int32_t> free_slots_;
  std::unordered_map<uint64_t, Seq> seqs_;
};

}  // namespace kiln::cache
