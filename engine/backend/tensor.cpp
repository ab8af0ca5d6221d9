// Dtype tables and TensorDesc helpers.
#include "backend/tensor.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

namespace kiln::backend {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
  }
  return "?";
}

bool is_quantized(DType t) { return t == DType::q8_0 || t == DType::q4_0; }

bool is_weight_dtype(DType t) { return t != DType::i32; }

size_t row_bytes(DType t, int64_t n) {
  const auto un = static_cast<size_t>(n);
  switch (t) {
    case DType::f32:
    case DType::i32: return un * 4;
    case DType::f16:
    case DType::bf16: return un * 2;
    case DType::q8_0: return un / kQuantBlock * 34;
    case DType::q4_0: return un / kQuantBlock * 18;
  }
  return 0;
}

DType dtype_from_kiln(uint32_t t) {
  switch (t) {
    case KILN_DTYPE_F32: return DType::f32;
    case KILN_DTYPE_F16: return DType::f16;
    case KILN_DTYPE_BF16: return DType::bf16;
    case KILN_DTYPE_I32: return DType::i32;
    case KILN_DTYPE_I8: return DType::q8_0;
    case KILN_DTYPE_Q4: return DType::q4_0;
    default: throw_error("[backend] dtype {} is not a tensor element type (f32, f16, bf16, i32, q8_0, q4_0)", t);
  }
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
