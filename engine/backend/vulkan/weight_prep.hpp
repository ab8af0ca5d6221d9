// Weight preparation at upload (Buffer::upload_weights): what the Vulkan kernels can rely on for
// weights that went through it, and the byte ranges of a buffer that did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::vk {

/**
 * Copies `n` f16 values from src to dst (any alignment: checkpoint tensors need not be 2-byte
 * aligned) with subnormals flushed to signed zero, which is what every f16 weight read of the
 * kernels does anyway (matmul.comp f16x2, wload.glsl w_scalar). Returns false
 * when some value is inf or NaN (exponent 31): such ranges keep the checked matmul path.
 */
bool flush_half_subnormals(const void* src, void* dst, size_t n);

/** Disjoint, sorted byte ranges [lo, hi). */
class RangeSet {
 public:
  void add(size_t lo, size_t hi);
  void erase(size_t lo, size_t hi);
  /** Whether [lo, hi) lies inside the set (lo == hi: true). */
  bool covers(size_t lo, size_t hi) const;
  bool empty() const { return r_.empty(); }

 private:
  std::vector<std::pair<size_t, size_t>> r_;
};

}  // namespace kiln::vk
