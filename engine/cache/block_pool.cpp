#include "cache/block_pool.hpp"

#include <cassert>

namespace kiln::cache {

BlockPool::BlockPool(uint32_t n_blocks) : refs_(n_blocks, 0) {
  free_.reserve(n_blocks);
  // Low ids on top of the stack so a fresh pool hands out 0, 1, 2, ... (stable layouts in tests).
  for (uint32_t i = n_blocks; i-- > 0;) free_.push_back(static_cast<int32_t>(i));
}

bool BlockPool::allocate(uint32_t n, std::vector<int32_t>* out) {
  if (n > free_.size()) return false;
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(b)] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::retain(int32_t block) { ++refs_[static_cast<size_t>(block)]; }

void BlockPool::release(int32_t block) {
  uint32_t& r = refs_[static_cast<size_t>(block)];
  assert(r > 0 && "block released more often than allocated");
  if (r > 0 && --r == 0) free_.push_back(block);
}

}  // namespace kiln::cache
