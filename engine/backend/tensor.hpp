// Tensor descriptions shared by the graph builder and every backend: shapes of kiln's element types
// (core/dtype.hpp), and a tensor placed in a backend buffer.
#pragma once

#include <kiln/kiln_plugin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.hpp"

namespace kiln::backend {

class Buffer;

constexpr int kMaxDims = KILN_MAX_DIMS;

/** True for dtypes a weight operand of GET_ROWS / MATMUL / MOE_MATMUL may have. */
bool is_weight_dtype(DType t);

/** Shape and element type of a contiguous row-major tensor (outermost dimension first). */
struct TensorDesc {
  DType dtype = DType::f32;
  uint32_t ndim = 0;
  std::array<int64_t, kMaxDims> ne{};  ///< ne[0] outermost, ne[ndim-1] contiguous

  TensorDesc() = default;
  TensorDesc(DType t, std::initializer_list<int64_t> shape);

  int64_t dim(int i) const { return ne[static_cast<size_t>(i < 0 ? i + static_cast<int>(ndim) : i)]; }
  int64_t last() const { return ndim ? ne[ndim - 1] : 1; }
  int64_t numel() const;
  /** Product of every dimension but the last. */
  int64_t rows() const { return last() ? numel() / last() : 0; }
  size_t bytes() const { return static_cast<size_t>(rows()) * row_bytes(dtype, last()); }
  bool same_shape(const TensorDesc& o) const;
  /** "f32[4, 7, 32]" */
  std::string str() const;
};

/** A tensor placed in a backend buffer: `bytes()` bytes starting at `offset`. */
struct TensorRef {
  Buffer* buffer = nullptr;
  size_t offset = 0;
  TensorDesc desc;
};

}  // namespace kiln::backend
