// A fixed pool of equally sized cache blocks. Allocation is all-or-nothing and running out is a
// status, never an exception, so the scheduler can queue or preempt. Blocks are reference-counted
// so a prefix cache can share them between sequences later.
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

 private:
  std::vector<uint32_t> refs_;
  std::vector<int32_t> free_;  ///< a stack: the most recently freed block is reused first
};

}  // namespace kiln::cache
