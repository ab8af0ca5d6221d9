#include "model/tensor_info.hpp"

#include "core/convert.hpp"
#include "core/error.hpp"

namespace kiln::model {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool checked_numel(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > (int64_t{1} << 62) / d) return false;
    n *= d;
  }
  *out = n;
  return true;
}

std::vector<float> tensor_to_f32(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!to_f32(t.dtype, t.data, t.numel(), out.data()))
    throw_error("[model] tensor {} in {} has type {}, which is not a floating-point type", t.name, t.file,
                dtype_name(t.dtype));
  return out;
}

}  // namespace kiln::model
