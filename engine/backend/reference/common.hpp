// Shared helpers of the CPU kernels: typed access to tensors in CPU buffers, f16/bf16 conversion,
// weight-row dequantization and the fixed-order dot product that makes results batch invariant.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/half.hpp"

namespace kiln::backend::reference {

inline std::byte* bytes_of(const TensorRef& t) {
  return static_cast<std::byte*>(t.buffer->host_ptr()) + t.offset;
}
inline float* f32_of(const TensorRef& t) {
  return reinterpret_cast<float*>(bytes_of(t));
}
inline int32_t* i32_of(const TensorRef& t) {
  return reinterpret_cast<int32_t*>(bytes_of(t));
}

using kiln::bf16_to_f32;  // core/half.hpp
using kiln::f16_to_f32;
using kiln::f32_to_bf16;
using kiln::f32_to_f16;

/** Converts one row of `n` elements of dtype `t` (any float or quantized type) to f32. */
void row_to_f32(DType t, const std::byte* src, int64_t n, float* dst);
/** Converts `n` f32 values to dtype `t` (f32, f16 or bf16). */
void row_from_f32(DType t, const float* src, int64_t n, std::byte* dst);

/**
 * Σ a[i]·b[i] in a fixed order that depends only on n: 8 interleaved partial sums, combined
 * pairwise. Every reduction over K uses this, so a row's result never depends on the batch.
 */
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/** Σ a[i]² with the same fixed order as dot(). */
inline float sum_squares(const float* a, int64_t n) {
  return dot(a, a, n);
}

/** Throws BackendError(invalid) "[backend cpu] <op>: <what>" for malformed bound graphs. */
[[noreturn]] void fail(const Node& node, const std::string& what);

}  // namespace kiln::backend::reference

namespace kiln::backend::reference {

/** One row of the "seqs" input. */
struct Seq {
  int32_t q_start, q_len, kv_len, slot;
};
/**
 * Reads and validates seqs (i32 [S, 4]): rows within [0, n_tokens), q_len >= 1,
 * kv_len >= q_len, slots within [0, n_slots) and distinct (n_slots < 0: slots unused).
 */
std::vector<Seq> read_seqs(const Node& node, const TensorRef& seqs, int64_t n_tokens, int64_t n_slots);

/** A MATMUL node's shapes, checked: x [R, K] (rows flattened), w [M, K]. */
struct MatmulShape {
  int64_t R, K, M;
};
MatmulShape check_matmul(const Node& n);  // matmul.cpp

/** A MOE_MATMUL node's shapes, checked, expert ids within [0, E) included. */
struct MoeShape {
  int64_t E, M, K, N, k;
  bool per_slot;       ///< x is [N, k, K] (one row per pair), not [N, K]
  const int32_t* ids;  ///< [N, k]
};
MoeShape check_moe_matmul(const Node& n);  // matmul.cpp

/** An ATTENTION node's shapes and inputs, checked: every block a query reads lies in the cache. */
struct AttentionShape {
  int64_t N, Hq, Dk, B, BS, Hkv, Dv, MB, window;
  std::vector<Seq> seqs;
  const int32_t* table;  ///< block_table [S, MB]
  float scale, cap;
};
AttentionShape check_attention(const Node& n);  // attention.cpp

/** A GATED_DELTA node's shapes, checked (mode known, sequences and state slots valid). */
struct DeltaShape {
  int64_t N, Hk, Dk, Hv, Dv;
  std::vector<Seq> seqs;
};
DeltaShape check_gated_delta(const Node& n);  // delta_net.cpp

/** A CONV1D_CAUSAL node's shapes, checked (sequences and state slots valid). */
struct ConvShape {
  int64_t N, C, K;
  std::vector<Seq> seqs;
};
ConvShape check_conv1d(const Node& n);  // conv.cpp

}  // namespace kiln::backend::reference
