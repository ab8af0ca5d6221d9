// Element conversions between kiln's storage types (core/dtype.hpp) and f32: f16 / bf16 / f64
// widening and narrowing, ggml's weight blocks dequantized (core/ggml_blocks.hpp) and quantized as
// llama.cpp does (core/ggml_quantize.hpp). The
// checkpoint readers, the model host and the CPU backend's kernels all convert through these.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace kiln {

/**
 * Converts `n` elements of `src` stored as `t` to f32. False for types that are not numbers of a
 * model (integers, bool) and for a quantized `n` that is not a whole number of blocks. For the KV formats
 * (kv_q8, kv_q4) `n` is one row: its length decides the groups (kv_group).
 */
bool to_f32(DType t, const void* src, int64_t n, float* dst);
/**
 * Stores `n` f32 values as `t`: f32, f16, bf16, the block formats quantize_blocks writes (`n` a
 * whole number of blocks), or one row of kiln's KV formats. False for every other type.
 */
bool from_f32(DType t, const float* src, int64_t n, void* dst);

}  // namespace kiln
