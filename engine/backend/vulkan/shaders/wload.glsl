// Weight-element loaders shared by matmul.comp and get_rows.comp. Exactly one WT_* is defined.
// f32 weights come through a samplerBuffer (RGBA32F view); every other dtype through a
// usamplerBuffer (RGBA32UI view) whose words are unpacked here, so quantized blocks are
// dequantized in place (no repacking). 16-byte texels give the largest reach (2 GiB with 2^27
// texels); single elements / words are picked out of their texel. Offsets: elements for
// f32/f16/bf16 and bytes for q8_0/q4_0, relative to the view.
#ifndef KILN_WLOAD_GLSL
#define KILN_WLOAD_GLSL

#if defined(WT_F32)
layout(set = 0, binding = WLOAD_BINDING) uniform samplerBuffer W;
#else
layout(set = 0, binding = WLOAD_BINDING) uniform usamplerBuffer W;
#endif

#if defined(WT_Q8_0) || defined(WT_Q4_0)
#define WT_QUANT 1
#endif

float half_bits(uint h) { return unpackHalf2x16(h).x; }
float bf16_bits(uint h) { return uintBitsToFloat(h << 16); }

#if defined(WT_F32)
float w_scalar(uint e) { return texelFetch(W, int(e >> 2))[e & 3u]; }
#elif defined(WT_F16) || defined(WT_BF16)
float w_scalar(uint e) {
  uint wi = e >> 1;
  uint word = texelFetch(W, int(wi >> 2))[wi & 3u];
  uint h = (e & 1u) != 0u ? (word >> 16) : (word & 0xffffu);
#if defined(WT_F16)
  // Subnormal halves read as 0 in every kernel (matmul.comp's fast path must flush them, see
  // f16x2), so weights prepared by Buffer::upload_weights, which stores them flushed, read the same.
  return half_bits((h & 0x7c00u) == 0u ? (h & 0x8000u) : h);
#else
  return bf16_bits(h);
#endif
}
#endif

#if defined(WT_QUANT)
uint wword(uint i) { return texelFetch(W, int(i >> 2))[i & 3u]; }
// Reads the 32-bit words of a block's payload starting at byte q (2-byte aligned) into u[]:
// aligned payloads are direct word reads, others are funnel-shifted from neighbouring words.
float block_scale(uint b) {
  uint w0 = wword(b >> 2);
  return half_bits((b & 2u) != 0u ? (w0 >> 16) : (w0 & 0xffffu));
}
#if defined(WT_Q8_0)
const uint QWORDS = 8u;
const uint BLOCK_BYTES = 34u;
#else
const uint QWORDS = 4u;
const uint BLOCK_BYTES = 18u;
#endif
void block_words(uint q, out uint u[QWORDS]) {
  uint i0 = q >> 2;
  if ((q & 2u) == 0u) {
    [[unroll]] for (uint i = 0u; i < QWORDS; ++i) u[i] = wword(i0 + i);
  } else {
    uint prev = wword(i0);
    [[unroll]] for (uint i = 0u; i < QWORDS; ++i) {
      uint next = wword(i0 + i + 1u);
      u[i] = (prev >> 16) | (next << 16);
      prev = next;
    }
  }
}
#if defined(WT_Q8_0)
const uint NT = 3u;  // a 34-byte block spans words w0..w0+8: at most 3 RGBA32UI texels
#else
const uint NT = 2u;  // an 18-byte block spans words w0..w0+4: at most 2 texels
#endif
const uint NW = 4u * NT;
// One block at byte b: scale d and the 32 integer values as 8 vec4 (element order). Fetches the
// NT texels holding the block and aligns its words with two static select stages (no dynamic
// indexing, which lavapipe lowers to per-lane memory traffic).
float load_block(uint b, out vec4 v[8]) {
  uint w0 = b >> 2, t0 = w0 >> 2, o = w0 & 3u;
  uint W_[NW];
  [[unroll]] for (uint t = 0u; t < NT; ++t) {
    uvec4 x = texelFetch(W, int(t0 + t));
    W_[4u * t] = x.x;
    W_[4u * t + 1u] = x.y;
    W_[4u * t + 2u] = x.z;
    W_[4u * t + 3u] = x.w;
  }
  uint A_[NW - 2u];
  [[unroll]] for (uint i = 0u; i < NW - 2u; ++i) A_[i] = (o & 2u) != 0u ? W_[i + 2u] : W_[i];
  uint B_[NW - 3u];  // B_[i] = word w0 + i
  [[unroll]] for (uint i = 0u; i < NW - 3u; ++i) B_[i] = (o & 1u) != 0u ? A_[i + 1u] : A_[i];
  bool hi = (b & 2u) != 0u;  // scale in the high half of word w0, payload word-aligned at w0 + 1
  float d = half_bits(hi ? (B_[0] >> 16) : (B_[0] & 0xffffu));
  uint u[QWORDS];
  [[unroll]] for (uint i = 0u; i < QWORDS; ++i) u[i] = hi ? B_[i + 1u] : ((B_[i] >> 16) | (B_[i + 1u] << 16));
#if defined(WT_Q8_0)
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    ivec4 s = ivec4(int(u[i] << 24), int(u[i] << 16), int(u[i] << 8), int(u[i])) >> 24;
    v[i] = vec4(s);
  }
#else
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uvec4 lo = (uvec4(u[i]) >> uvec4(0u, 8u, 16u, 24u)) & 0xfu;
    uvec4 hi4 = (uvec4(u[i]) >> uvec4(4u, 12u, 20u, 28u)) & 0xfu;
    v[i] = vec4(ivec4(lo) - 8);
    v[i + 4u] = vec4(ivec4(hi4) - 8);
  }
#endif
  return d;
}
#endif

#endif
