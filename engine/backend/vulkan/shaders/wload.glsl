// Weight-element loaders shared by matmul.comp and get_rows.comp. Exactly one WT_* is defined.
// f32 weights come through a samplerBuffer (RGBA32F view); every other dtype through a
// usamplerBuffer (RGBA32UI view) whose words are unpacked here, so quantized blocks are
// dequantized in place (no repacking). 16-byte texels give the largest reach (2 GiB with 2^27
// texels); single elements / words are picked out of their texel. Offsets: elements for
// f32/f16/bf16 and bytes for the block formats, relative to the view.
//
// Block formats (core/ggml_blocks.hpp has their layouts): q8_0 and q4_0 load a 32-value block as
// a scale and 32 integers (load_block); the others (WT_SPLIT) as 32 integers with a scale and an
// offset per 16-value half (load_split), value = scale·q + offset, which is each format's own
// dequantization (the scale and offset are the products its definition forms first: d·s, dmin·m).
#ifndef KILN_WLOAD_GLSL
#define KILN_WLOAD_GLSL

#if defined(WT_F32)
layout(set = 0, binding = WLOAD_BINDING) uniform samplerBuffer W;
#else
layout(set = 0, binding = WLOAD_BINDING) uniform usamplerBuffer W;
#endif

#if defined(WT_Q8_0) || defined(WT_Q4_0)
#define WT_QUANT 1
#define WT_BLOCK32 1
#endif
#if defined(WT_Q4_1) || defined(WT_Q5_0) || defined(WT_Q5_1) || defined(WT_IQ4_NL) || defined(WT_Q2_K) || \
    defined(WT_Q3_K) || defined(WT_Q4_K) || defined(WT_Q5_K) || defined(WT_Q6_K) || defined(WT_IQ4_XS)
#define WT_QUANT 1
#define WT_SPLIT 1
#endif
// Formats whose values carry an offset (a min): matmul adds offset·sum(x) per half.
#if defined(WT_Q4_1) || defined(WT_Q5_1) || defined(WT_Q2_K) || defined(WT_Q4_K) || defined(WT_Q5_K)
#define WT_OFFSET 1
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
#endif

#if defined(WT_BLOCK32)
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

#if defined(WT_SPLIT)
// The 4 bytes at byte b (any alignment) as a little-endian word: blocks of 22, 110 or 210 bytes
// leave most fields off word boundaries. The next word is read only when b is not word-aligned: a
// tensor's last bytes may end its view (weights imported in place have no slack after them).
uint wbytes(uint b) {
  uint i = b >> 2, s = (b & 3u) * 8u, w = wword(i);
  if (s != 0u) w = (w >> s) | (wword(i + 1u) << (32u - s));
  return w;
}
uint wbyte(uint b) { return (wword(b >> 2) >> ((b & 3u) * 8u)) & 0xffu; }
float whalf(uint b) { return half_bits((wword(b >> 2) >> ((b & 2u) * 8u)) & 0xffffu); }  // b even
int wsbyte(uint b) { return int(wbyte(b) << 24) >> 24; }  // an int8 field
// The 4·N bytes at byte b (b even) as N words, from whole texels: the T texels that can hold them,
// aligned with two static select stages as load_block does (a component picked by a computed
// index costs lavapipe per-lane memory traffic), then funnel-shifted when b is not word-aligned.
// The last texel is read only when the bytes reach into it (the tensor may end its view).
#define WBYTES_N(NAME, N, T)                                                                     \
  void NAME(uint b, out uint u[N]) {                                                           \
    uint w0 = b >> 2, t0 = w0 >> 2, o = w0 & 3u, s = (b & 3u) * 8u;                             \
    uint W_[4 * T];                                                                            \
    [[unroll]] for (uint t = 0u; t < T; ++t) {                                                 \
      uvec4 x = uvec4(0u);                                                                     \
      if (t + 1u < T || ((b + 4u * N - 1u) >> 4) >= t0 + t) x = texelFetch(W, int(t0 + t));   \
      W_[4u * t] = x.x, W_[4u * t + 1u] = x.y, W_[4u * t + 2u] = x.z, W_[4u * t + 3u] = x.w; \
    }                                                                                          \
    uint A_[4 * T - 2];                                                                        \
    [[unroll]] for (uint i = 0u; i < 4u * T - 2u; ++i) A_[i] = (o & 2u) != 0u ? W_[i + 2u] : W_[i]; \
    uint B_[N + 1];                                                                            \
    [[unroll]] for (uint i = 0u; i <= N; ++i) B_[i] = (o & 1u) != 0u ? A_[i + 1u] : A_[i];     \
    [[unroll]] for (uint i = 0u; i < N; ++i) u[i] = s == 0u ? B_[i] : (B_[i] >> s) | (B_[i + 1u] << (32u - s)); \
  }
WBYTES_N(wbytes16, 4u, 2u)  // 16 bytes from an even offset lie in at most 2 texels
WBYTES_N(wbytes32, 8u, 3u)  // 32 bytes: at most 3
// Bytes 4i..4i+3 of a packed field: (byte >> sh) & mask for each.
uvec4 field4(uint u, uint sh, uint mask) { return (uvec4(u) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & mask; }
// Bit `bit` of bytes 4i..4i+3 (the high-bit planes of q5 and q3).
uvec4 bit4(uint u, uint bit) { return field4(u, bit, 1u); }

#if defined(WT_IQ4_NL) || defined(WT_IQ4_XS)
const float IQ4[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0,
                                69.0, 89.0, 113.0);  // kvalues_iq4nl
vec4 iq4(uvec4 n) { return vec4(IQ4[n.x], IQ4[n.y], IQ4[n.z], IQ4[n.w]); }
#endif

#if defined(WT_Q4_1)
const uint BLOCK_BYTES = 20u;
#elif defined(WT_Q5_0)
const uint BLOCK_BYTES = 22u;
#elif defined(WT_Q5_1)
const uint BLOCK_BYTES = 24u;
#elif defined(WT_IQ4_NL)
const uint BLOCK_BYTES = 18u;
#elif defined(WT_Q2_K)
const uint BLOCK_BYTES = 84u;
#elif defined(WT_Q3_K)
const uint BLOCK_BYTES = 110u;
#elif defined(WT_Q4_K)
const uint BLOCK_BYTES = 144u;
#elif defined(WT_Q5_K)
const uint BLOCK_BYTES = 176u;
#elif defined(WT_Q6_K)
const uint BLOCK_BYTES = 210u;
#else  // WT_IQ4_XS
const uint BLOCK_BYTES = 136u;
#endif

#if defined(WT_Q4_K) || defined(WT_Q5_K)
// Group j's 6-bit scale (x) and min (y) from the 12 packed bytes at b (ggml's get_scale_min_k4).
uvec2 scale_min_k4(uint b, uint j) {
  if (j < 4u) return uvec2(wbyte(b + j) & 63u, wbyte(b + j + 4u) & 63u);
  uint s = wbyte(b + j + 4u);
  return uvec2((s & 0xfu) | ((wbyte(b + j - 4u) >> 6) << 4), (s >> 4) | ((wbyte(b + j) >> 6) << 4));
}
#endif

// The 32 values of 32-value group c of the row at byte rb: v[i] holds elements 4i..4i+3 as
// integers; element e's value is dl[e / 16]·v + off[e / 16].
void load_split(uint rb, uint c, out vec4 v[8], out vec2 dl, out vec2 off) {
  off = vec2(0.0);
#if defined(WT_Q4_1) || defined(WT_Q5_0) || defined(WT_Q5_1) || defined(WT_IQ4_NL)
  uint b = rb + c * BLOCK_BYTES;
  float d = whalf(b);
  dl = vec2(d);
#if defined(WT_Q4_1)
  off = vec2(whalf(b + 2u));
  uint qs = b + 4u;
#elif defined(WT_Q5_0)
  uint qh = wbytes(b + 2u);
  uint qs = b + 6u;
#elif defined(WT_Q5_1)
  off = vec2(whalf(b + 2u));
  uint qh = wbytes(b + 4u);
  uint qs = b + 8u;
#else  // WT_IQ4_NL
  uint qs = b + 2u;
#endif
  // Byte j holds element j (low nibble) and j + 16 (high nibble): v[i] and v[i + 4].
  uint qw[4];
  wbytes16(qs, qw);
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint u = qw[i];
    uvec4 lo = field4(u, 0u, 0xfu), hi = field4(u, 4u, 0xfu);
#if defined(WT_Q5_0) || defined(WT_Q5_1)
    lo |= ((uvec4(qh) >> (uvec4(0u, 1u, 2u, 3u) + 4u * i)) & 1u) << 4;
    hi |= ((uvec4(qh) >> (uvec4(16u, 17u, 18u, 19u) + 4u * i)) & 1u) << 4;
#endif
#if defined(WT_Q5_0)
    v[i] = vec4(ivec4(lo) - 16);
    v[i + 4u] = vec4(ivec4(hi) - 16);
#elif defined(WT_IQ4_NL)
    v[i] = iq4(lo);
    v[i + 4u] = iq4(hi);
#else
    v[i] = vec4(lo);
    v[i + 4u] = vec4(hi);
#endif
  }
#else  // 256-value super-blocks: group j of the block at sb
  uint sb = rb + (c >> 3) * BLOCK_BYTES, j = c & 7u;
#if defined(WT_Q4_K) || defined(WT_Q5_K)
  float d = whalf(sb), dmin = whalf(sb + 2u);
  uvec2 sm = scale_min_k4(sb + 4u, j);
  dl = vec2(d * float(sm.x));
  off = vec2(-(dmin * float(sm.y)));
#if defined(WT_Q4_K)
  uint qs = sb + 16u + 32u * (j >> 1);  // a pair of groups shares 32 bytes: low, then high nibbles
#else
  uint qs = sb + 48u + 32u * (j >> 1), qh = sb + 16u;  // high bit j of byte l
#endif
  uint qw[8];
  wbytes32(qs, qw);
#if defined(WT_Q5_K)
  uint hw[8];
  wbytes32(qh, hw);
#endif
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uvec4 q = field4(qw[i], 4u * (j & 1u), 0xfu);
#if defined(WT_Q5_K)
    q |= bit4(hw[i], j) << 4;
#endif
    v[i] = vec4(q);
  }
#elif defined(WT_IQ4_XS)
  float d = whalf(sb);
  uint ls = ((wbyte(sb + 4u + (j >> 1)) >> (4u * (j & 1u))) & 0xfu) | (((wbytes(sb + 2u) >> (2u * j)) & 3u) << 4);
  dl = vec2(d * float(int(ls) - 32));
  uint qw[4];
  wbytes16(sb + 8u + 16u * j, qw);
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint u = qw[i];
    v[i] = iq4(field4(u, 0u, 0xfu));
    v[i + 4u] = iq4(field4(u, 4u, 0xfu));
  }
#else  // q2_K, q3_K, q6_K: two 128-value halves h of four 32-value groups k, one scale per 16 values
  uint h = j >> 2, k = j & 3u;
#if defined(WT_Q6_K)
  float d = whalf(sb + 208u);
  dl = d * vec2(float(wsbyte(sb + 192u + 8u * h + 2u * k)), float(wsbyte(sb + 193u + 8u * h + 2u * k)));
  uint lw[8], hw[8];
  wbytes32(sb + 64u * h + 32u * (k & 1u), lw);
  wbytes32(sb + 128u + 32u * h, hw);
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uvec4 q = field4(lw[i], 4u * (k >> 1), 0xfu) | (field4(hw[i], 2u * k, 3u) << 4);
    v[i] = vec4(ivec4(q) - 32);
  }
#elif defined(WT_Q2_K)
  float d = whalf(sb + 80u), dmin = whalf(sb + 82u);
  uint s0 = wbyte(sb + 8u * h + 2u * k), s1 = wbyte(sb + 8u * h + 2u * k + 1u);
  dl = vec2(d * float(s0 & 0xfu), d * float(s1 & 0xfu));
  off = -vec2(dmin * float(s0 >> 4), dmin * float(s1 >> 4));
  uint qw[8];
  wbytes32(sb + 16u + 32u * h, qw);
  [[unroll]] for (uint i = 0u; i < 8u; ++i) v[i] = vec4(field4(qw[i], 2u * k, 3u));
#else  // WT_Q3_K: scale s has the nibble of byte s % 8 (low for s < 8) under 2 bits of byte 8 + s % 4
  float d = whalf(sb + 108u);
  uint sc = sb + 96u, s0 = 8u * h + 2u * k, s1 = s0 + 1u;
  uint l0 = (wbyte(sc + (s0 & 7u)) >> (4u * (s0 >> 3))) & 0xfu, l1 = (wbyte(sc + (s1 & 7u)) >> (4u * (s1 >> 3))) & 0xfu;
  uint h0 = (wbyte(sc + 8u + (s0 & 3u)) >> (2u * (s0 >> 2))) & 3u, h1 = (wbyte(sc + 8u + (s1 & 3u)) >> (2u * (s1 >> 2))) & 3u;
  dl = d * vec2(float(int(l0 | (h0 << 4)) - 32), float(int(l1 | (h1 << 4)) - 32));
  uint qw[8], hw[8];  // the high bits: bit 4h + k of hmask byte l (set: no −4)
  wbytes32(sb + 32u + 32u * h, qw);
  wbytes32(sb, hw);
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uvec4 q = field4(qw[i], 2u * k, 3u), hb = bit4(hw[i], 4u * h + k);
    v[i] = vec4(ivec4(q) - 4 + 4 * ivec4(hb));
  }
#endif
#endif
#endif
}
#endif

#endif
