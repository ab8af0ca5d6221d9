// TensorDesc helpers.
#include "backend/tensor.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace kiln::backend {

bool is_weight_dtype(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || is_quantized(t);
}

TensorDesc::TensorDesc(DType t, std::initializer_list<int64_t> shape) : dtype(t) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) throw_error("[backend] at most {} dims", kMaxDims);
  for (int64_t d : shape) ne[ndim++] = d;
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (uint32_t i = 0; i < ndim; ++i) n *= ne[i];
  return n;
}

bool TensorDesc::same_shape(const TensorDesc& o) const {
  if (ndim != o.ndim) return false;
  for (uint32_t i = 0; i < ndim; ++i)
    if (ne[i] != o.ne[i]) return false;
  return true;
}

std::string TensorDesc::str() const {
  std::string s = fmt::format("{}[", dtype_name(dtype));
  for (uint32_t i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace kiln::backend
