#include "cache/block_pool.hpp"

#include <cassert>

namespace kiln::cache {

BlockPool::BlockPool(uint32_t n_blocks) : refs_(n_blocks, 0), held_(n_blocks, 0) {
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

template <class Fn>
void BlockPool::update(int32_t block, Fn&& change) {
  const size_t b = static_cast<size_t>(block);
  const bool was = idle(b);
  change(refs_[b], held_[b]);
  const bool now = idle(b);
  idle_ += now - was;
}

void BlockPool::retain(int32_t block) {
  update(block, [](uint32_t& r, uint32_t&) { ++r; });
}

void BlockPool::release(int32_t block) {
  update(block, [&](uint32_t& r, uint32_t&) {
    assert(r > 0 && "block released more often than allocated");
    if (r > 0 && --r == 0) free_.push_back(block);
  });
}

void BlockPool::hold(int32_t block) {
  update(block, [](uint32_t& r, uint32_t& h) {
    ++r;
    ++h;
  });
}

void BlockPool::unhold(int32_t block) {
  update(block, [&](uint32_t& r, uint32_t& h) {
    assert(r > 0 && h > 0 && "a hold dropped more often than taken");
    if (h > 0) --h;
    if (r > 0 && --r == 0) free_.push_back(block);
  });
}

}  // namespace kiln::cache
