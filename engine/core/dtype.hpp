// kiln's one element-type enum: the types a plugin and a kernel see (their values are the SDK's
// kiln_dtype, so conversions across the ABI are casts), then the storage-only types a checkpoint
// may hold (integers, bool, f64), which the model host converts or refuses before anything
// reaches a kernel. The quantized weight types are ggml's block layouts, kept as they are so a GGUF
// tensor goes to a kernel without repacking.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  f32 = KILN_DTYPE_F32,
  f16 = KILN_DTYPE_F16,
  bf16 = KILN_DTYPE_BF16,
  i32 = KILN_DTYPE_I32,
  q8_0 = KILN_DTYPE_Q8_0,    ///< blocks of 32: f16 scale d, 32 × int8 q; value = q·d (34 bytes)
  q4_0 = KILN_DTYPE_Q4_0,    ///< blocks of 32: f16 scale d, 16 bytes; byte j holds element j (low
                             ///< nibble) and j+16 (high nibble); value = (nibble − 8)·d (18 bytes)
  kv_q8 = KILN_DTYPE_KV_Q8,  ///< KV-cache rows (kv_group): D int8 values, D/G f16 scales, padded to 4 bytes
  kv_q4 = KILN_DTYPE_KV_Q4,  ///< KV-cache rows: D/2 bytes of nibbles (even element low), D/G f16 scales, padded
  // The rest of ggml's weight block formats (core/ggml_blocks.hpp has their layouts).
  q4_1 = KILN_DTYPE_Q4_1,
  q5_0 = KILN_DTYPE_Q5_0,
  q5_1 = KILN_DTYPE_Q5_1,
  q2_k = KILN_DTYPE_Q2_K,
  q3_k = KILN_DTYPE_Q3_K,
  q4_k = KILN_DTYPE_Q4_K,
  q5_k = KILN_DTYPE_Q5_K,
  q6_k = KILN_DTYPE_Q6_K,
  iq4_nl = KILN_DTYPE_IQ4_NL,
  iq4_xs = KILN_DTYPE_IQ4_XS,
  // Storage only (checkpoint readers).
  i64 = 64,
  i16,
  i8,
  u8,
  boolean,
  f64,
};

constexpr int64_t kQuantBlock = 32;  ///< values per Q8_0 / Q4_0 block (quant_block() for every format)

/** "f32", "bf16", "q8_0", ... */
const char* dtype_name(DType t);
/** ggml's weight block formats (q8_0, q4_0, q4_1, ..., the k-quants, iq4_nl, iq4_xs). */
bool is_quantized(DType t);
/** Values per block of a weight block format (32 or 256); 1 for every other type. */
int64_t quant_block(DType t);
/** Bytes per block of a weight block format; 0 for every other type. */
int64_t quant_block_bytes(DType t);
/** kiln's KV-cache formats kv_q8 / kv_q4. */
bool is_kv_quantized(DType t);
/** Either: a row is packed groups with scales and can be neither split nor sliced. */
inline bool is_packed(DType t) {
  return is_quantized(t) || is_kv_quantized(t);
}
/**
 * Values per scale in a kv_q8 / kv_q4 row of `n` values: the largest power of two dividing n, at
 * most 32; 0 when n is not a positive multiple of 8 (such rows cannot be stored in these formats).
 * A group never straddles an 8-value boundary, so kernels read 8 values with one scale.
 */
int64_t kv_group(int64_t n);
/** Bytes of `n` elements (for the KV formats: one row of n values); nullopt for a negative n, a
 *  quantized n that is not a whole number of blocks or a KV-format n that kv_group refuses. */
std::optional<uint64_t> dtype_bytes(DType t, int64_t n);
/** Bytes of one row of `n` elements (n a whole number of blocks for quantized types). */
size_t row_bytes(DType t, int64_t n);
/** A KV-cache dtype as YAML names it (cache.kv_dtype, cache.kv_layers): f32, f16, bf16, q8, q4. */
std::optional<DType> kv_dtype_from_name(std::string_view name);
/** The YAML name of a KV-cache dtype ("q8" for kv_q8). */
const char* kv_dtype_yaml_name(DType t);

/** A kiln_dtype value as a DType; throws HostError for KILN_DTYPE_ANY and unknown values. */
DType dtype_from_kiln(uint32_t t);
/** The kiln_dtype of `t`, or KILN_DTYPE_ANY for the storage-only types. */
kiln_dtype to_kiln(DType t);
/** The name of a kiln_dtype value as a plugin declares it ("any" for KILN_DTYPE_ANY). */
const char* kiln_dtype_name(uint32_t t);

}  // namespace kiln
