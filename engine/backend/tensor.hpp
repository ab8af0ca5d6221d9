// Tensor descriptions shared by the graph builder and every backend: element types (including the
// GGUF Q8_0 / Q4_0 block layouts), shapes, and a tensor placed in a backend buffer.
#pragma once

#include <kiln/kiln_plugin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kiln::backend {

class Buffer;

/** Element types. Values equal the SDK's kiln_dtype so conversions are casts. */
enum class DType : uint8_t {
  f32 = KILN_DTYPE_F32,
  f16 = KILN_DTYPE_F16,
  bf16 = KILN_DTYPE_BF16,
  i32 = KILN_DTYPE_I32,
  q8_0 = KILN_DTYPE_I8,  ///< blocks of 32: f16 scale d, 32 × int8 q; value = q·d (34 bytes)
  q4_0 = KILN_DTYPE_Q4,  ///< blocks of 32: f16 scale d, 16 bytes; byte j holds element j (low
                         ///< nibble) and j+16 (high nibble); value = (nibble − 8)·d (18 bytes)
};

constexpr int64_t kQuantBlock = 32;
constexpr int kMaxDims = KILN_MAX_DIMS;

const char* dtype_name(DType t);
bool is_quantized(DType t);
/** True for dtypes a weight operand of GET_ROWS / MATMUL / MOE_MATMUL may have. */
bool is_weight_dtype(DType t);
/** Bytes of one row of `n` elements (n a multiple of 32 for quantized types). */
size_t row_bytes(DType t, int64_t n);
/** Parses a kiln_dtype value; throws for KILN_DTYPE_ANY or unknown values. */
DType dtype_from_kiln(uint32_t t);

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
