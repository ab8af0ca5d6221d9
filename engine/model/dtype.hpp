// Element types of checkpoint tensors and the conversions the model host needs (F16/BF16 <-> F32,
// GGML Q8_0 / Q4_0 blocks -> F32). Quantized types are stored as ggml's block layouts so a GGUF
// tensor can be handed to a kernel without repacking.
#pragma once

#include <kiln/kiln_plugin.h>

#include "core/half.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::model {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  q8_0,  ///< ggml block: f16 scale + 32 int8 (34 bytes per 32 values)
  q4_0,  ///< ggml block: f16 scale + 16 bytes of nibbles (18 bytes per 32 values), value = (q - 8) * d
  i64,
  i32,
  i16,
  i8,
  u8,
  boolean,
  f64,
};

constexpr int64_t kQuantBlock = 32;  ///< values per Q8_0 / Q4_0 block

const char* dtype_name(DType t);
/** Bytes of `n` elements (n must be a multiple of 32 for quantized types; returns nullopt otherwise). */
std::optional<uint64_t> dtype_bytes(DType t, int64_t n);
bool is_quantized(DType t);
/** The C ABI dtype a plugin declares for this storage type (KILN_DTYPE_ANY when it has none). */
kiln_dtype to_kiln_dtype(DType t);
const char* kiln_dtype_name(uint32_t t);

using kiln::bf16_to_f32;  // core/half.hpp
using kiln::f16_to_f32;
using kiln::f32_to_bf16;
using kiln::f32_to_f16;

/**
 * Converts `n` elements of `src` (any floating or quantized type) to F32. Returns false for types
 * that are not numbers of a model (integers, bool).
 */
bool to_f32(DType t, const void* src, int64_t n, float* dst);
/** Quantizes `n` (multiple of 32) F32 values into ggml Q8_0 / Q4_0 blocks, as llama.cpp does. */
void quantize_q8_0(const float* src, int64_t n, void* dst);
void quantize_q4_0(const float* src, int64_t n, void* dst);

}  // namespace kiln::model
