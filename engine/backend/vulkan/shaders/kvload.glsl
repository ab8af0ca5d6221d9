// Element reads of f32 / f16 / bf16 tensors through an RGBA32UI texel view (16-byte texels: 2 GiB reach) (dtype in a spec constant
// or uniform: 0 f32, 1 f16, 2 bf16); `e` counts elements of that dtype from the view start. Then
// the KV formats' 8-value reads.
#ifndef KILN_KVLOAD_GLSL
#define KILN_KVLOAD_GLSL
float load_elem(usamplerBuffer buf, uint dt, uint e) {
  if (dt == 0u) return uintBitsToFloat(texelFetch(buf, int(e >> 2))[e & 3u]);
  uint wi = e >> 1;
  uint word = texelFetch(buf, int(wi >> 2))[wi & 3u];
  uint h = (e & 1u) != 0u ? (word >> 16) : (word & 0xffffu);
  return dt == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}

// kiln's KV-cache formats (dtype 3 kv_q8, 4 kv_q4; docs/backend.md "Quantized KV cache"), read
// through the same RGBA32UI view and addressed in bytes: a row of D values (D % 8 == 0) holds the
// values (a byte or a nibble each), then D / G f16 scales, G = min(32, largest power of two
// dividing D); rows are row_bytes apart (a multiple of 4, not of 16, so reads are of 32-bit words).
// G >= 8 and 8 | G, so dims 8g..8g+7 share one scale. Values are q·scale exactly as the CPU
// reference dequantizes them (8-bit × 11-bit products are exact in f32).
uint kv_word(usamplerBuffer buf, uint byte_at) {  // the 32-bit word at a 4-aligned byte offset
  return texelFetch(buf, int(byte_at >> 4))[(byte_at >> 2) & 3u];
}

uint kv_group_of(uint D) { return 1u << min(5, findLSB(D)); }

uint kv_row_bytes(uint dt, uint D) {
  return ((dt == 3u ? D : D / 2u) + 2u * (D / kv_group_of(D)) + 3u) & ~3u;
}

// The scale of dims 8g..8g+7 of the row starting at byte `row`.
float kv_scale(usamplerBuffer buf, uint dt, uint row, uint g, uint D) {
  uint sb = row + (dt == 3u ? D : D / 2u) + 2u * (8u * g / kv_group_of(D));  // the scale's byte
  uint sw = kv_word(buf, sb & ~3u);
  return unpackHalf2x16((sb & 2u) != 0u ? sw >> 16 : sw).x;
}

// Dims 8g..8g+7 of the row starting at byte `row`, times their scale `s` (kv_scale). `a8`: rows
// start 8-byte aligned (an 8-aligned row size at an 8-aligned offset: D 96, 128, 256, 512), so q8's
// 8 bytes are two words of one texel: one fetch. It must be a constant at the call site (a spec
// constant): llvmpipe runs both sides of a branch that varies across lanes, three fetches.
void kv_values8(usamplerBuffer buf, uint dt, uint row, uint g, float s, bool a8, out vec4 lo, out vec4 hi) {
  if (dt == 3u) {
    uint at = row + 8u * g;
    int a, b;
    if (a8) {
      uvec4 t = texelFetch(buf, int(at >> 4));
      bool hi_half = (at & 8u) != 0u;
      a = int(hi_half ? t.z : t.x), b = int(hi_half ? t.w : t.y);
    } else {
      a = int(kv_word(buf, at)), b = int(kv_word(buf, at + 4u));
    }
    lo = vec4(bitfieldExtract(a, 0, 8), bitfieldExtract(a, 8, 8), bitfieldExtract(a, 16, 8), a >> 24) * s;
    hi = vec4(bitfieldExtract(b, 0, 8), bitfieldExtract(b, 8, 8), bitfieldExtract(b, 16, 8), b >> 24) * s;
    return;
  }
  uint w = kv_word(buf, row + 4u * g);  // element 8g+j in nibble j (even elements low)
  lo = (vec4(w & 15u, (w >> 4) & 15u, (w >> 8) & 15u, (w >> 12) & 15u) - 8.0) * s;
  hi = (vec4((w >> 16) & 15u, (w >> 20) & 15u, (w >> 24) & 15u, w >> 28) - 8.0) * s;
}

// Dims 8g..8g+7 of the row starting at byte `row`, with their scale.
void kv_load8(usamplerBuffer buf, uint dt, uint row, uint g, uint D, out vec4 lo, out vec4 hi) {
  kv_values8(buf, dt, row, g, kv_scale(buf, dt, row, g, D), false, lo, hi);
}

// Where row `r` of a cache starts, from `off` (the view's first element or, for kv dtypes, byte):
// in elements of f32 / f16 / bf16, in bytes for the kv dtypes.
uint cache_row(uint dt, uint off, uint r, uint D) {
  return off + r * (dt >= 3u ? kv_row_bytes(dt, D) : D);
}
#endif
