// A fixed pool of equally sized cache blocks. Allocation is all-or-nothing and running out is a
// status, never an exception, so the scheduler can queue or preempt. Blocks are reference-counted
// so a prefix cache can share them between sequences later. Holders that are not sequences (prefix-
// tree nodes) are counted apart, so that blocks only they hold (idle: reusable after an eviction,
// as vLLM's free-but-cached blocks) are known without a walk of the tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::cache {

class BlockPool {
 public:
  explicit BlockPool(uint32_t n_blocks);

  uint32_t capacity() const { return static_cast<uint32_t>(refs_.size()); }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  /** Appends `n` block ids to `out` and returns true, or changes nothing and returns false. */
  bool allocate(uint32_t n, std::vector<int32_t>* out);
  /** One more holder of `block`. */
  void retain(int32_t block);
  /** Drops one holder; the block returns to the pool when none is left. */
  void release(int32_t block);
  uint32_t refs(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  /** One more holder of `block` that is not a sequence (KvCache::hold). */
  void hold(int32_t block);
  /** Drops such a holder (KvCache::drop). */
  void unhold(int32_t block);
  /** Blocks in use whose every holder is a non-sequence one. */
  uint32_t idle_count() const { return idle_; }

 private:
  std::vector<uint32_t> refs_;
  std::vector<int32_t> free_;  ///< a stack: the most recently freed block is reused first
  std::vector<uint32_t> held_;  ///< per block: holders that are not sequences
  uint32_t idle_ = 0;
  bool idle(size_t b) const { return refs_[b] > 0 && refs_[b] == held_[b]; }
  /** Applies `change` to block `b`'s counts, keeping idle_ true. */
  template <class Fn>
  void update(int32_t b, Fn&& change);
};

}  // namespace kiln::cache
