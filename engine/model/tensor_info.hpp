// One tensor of a checkpoint as the readers find it: name, storage type, row-major shape (outermost
// first, as Hugging Face writes it; GGUF's innermost-first dims are reversed on read) and a pointer
// into the memory-mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::model {

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;       ///< outermost first
  const std::byte* data = nullptr;  ///< inside a MappedFile kept alive by the reader
  uint64_t nbytes = 0;
  std::string file;                 ///< the file it came from (for error messages)
  /** The file's own dtype where DType has none: "F8_E4M3" (read as u8 bytes, unpacked with the
   *  checkpoint's quantization_config, model/quantized_checkpoint.hpp). */
  std::string stored;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/** "[2, 3]" */
std::string shape_str(const std::vector<int64_t>& shape);
/** Product of dims; false on a negative dim or overflow past 2^62. */
bool checked_numel(const std::vector<int64_t>& shape, int64_t* out);

/** The tensor's values as F32 (dequantized / widened); throws for integer types. */
std::vector<float> tensor_to_f32(const TensorInfo& t);

}  // namespace kiln::model
