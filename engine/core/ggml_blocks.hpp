// ggml's weight block formats as a GGUF file holds them, and their dequantization to f32, value for
// value as ggml's reference dequantize_row_* computes it (ggml-quants.c; the tests compare against
// the libggml that node-llama-cpp ships, bit for bit). Layouts, in bytes (f16 = IEEE half):
//   q8_0   34 per 32:  f16 d, int8 q[32]                         q·d
//   q4_0   18 per 32:  f16 d, qs[16]                             (nibble − 8)·d
//   q4_1   20 per 32:  f16 d, f16 m, qs[16]                      nibble·d + m
//   q5_0   22 per 32:  f16 d, qh[4], qs[16]                      (nibble | bit<<4 − 16)·d
//   q5_1   24 per 32:  f16 d, f16 m, qh[4], qs[16]               (nibble | bit<<4)·d + m
//   iq4_nl 18 per 32:  f16 d, qs[16]                             table[nibble]·d
//   q2_K   84 per 256: scales[16], qs[64], f16 d, f16 dmin       per 16: d·(s&15)·q − dmin·(s>>4)
//   q3_K  110 per 256: hmask[32], qs[64], scales[12], f16 d      per 16: d·(s6 − 32)·(q − 4·!hbit)
//   q4_K  144 per 256: f16 d, f16 dmin, scales[12], qs[128]       per 32: d·s6·q − dmin·m6
//   q5_K  176 per 256: f16 d, f16 dmin, scales[12], qh[32], qs[128]  per 32: d·s6·q − dmin·m6
//   q6_K  210 per 256: ql[128], qh[64], int8 scales[16], f16 d   per 16: d·s·(q − 32)
//   iq4_xs 136 per 256: f16 d, u16 scales_h, scales_l[4], qs[128]  per 32: d·(s6 − 32)·table[nibble]
// In the 32-value formats byte j of qs holds element j (low nibble) and j + 16 (high nibble).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace kiln {

/** IQ4_NL's and IQ4_XS's 16 values (ggml-common.h kvalues_iq4nl). */
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/** The k-quants' eight 6-bit scales and mins (one per 32-value group) from their 12 packed bytes:
    group j < 4 has the low 6 bits of bytes j (scale) and j + 4 (min); group j ≥ 4 the low (scale)
    and high (min) nibble of byte j + 4, under the top 2 bits of bytes j − 4 (scale) and j (min).
    Static: the CPU backend's ISA-flagged translation
    units include this, and an inline function with external linkage could be emitted with their
    instructions and picked for everyone's calls. */
static inline void k_scales_mins(const uint8_t* q, uint8_t scales[8], uint8_t mins[8]) {
  uint32_t w[3];
  __builtin_memcpy(w, q, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  const uint32_t s[2] = {w[0] & low6, (w[2] & low4) | (((w[0] >> 6) & top2) << 4)};
  const uint32_t m[2] = {w[1] & low6, ((w[2] >> 4) & low4) | (((w[1] >> 6) & top2) << 4)};
  __builtin_memcpy(scales, s, 8);
  __builtin_memcpy(mins, m, 8);
}

/** Q3_K's sixteen 6-bit scales (each still offset by 32) from their 12 packed bytes. */
void q3_k_scales(const uint8_t* packed, int8_t out[16]);

/** Where a block of format `t` keeps its f16 fields (scale, and min or dmin), in bytes from the
    block's start (the layouts above); empty for other types. */
std::vector<int> half_fields(DType t);

/**
 * Dequantizes `n` values (a whole number of blocks, quant_block(t)) of weight block format `t`.
 * False for other types and a partial block.
 */
bool dequantize_blocks(DType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace kiln
