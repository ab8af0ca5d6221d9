// Element reads of f32 / f16 / bf16 tensors through an RGBA32UI texel view (16-byte texels: 2 GiB reach) (dtype in a spec constant
// or uniform: 0 f32, 1 f16, 2 bf16); `e` counts elements of that dtype from the view start.
#ifndef KILN_KVLOAD_GLSL
#define KILN_KVLOAD_GLSL
float load_elem(usamplerBuffer buf, uint dt, uint e) {
  if (dt == 0u) return uintBitsToFloat(texelFetch(buf, int(e >> 2))[e & 3u]);
  uint wi = e >> 1;
  uint word = texelFetch(buf, int(wi >> 2))[wi & 3u];
  uint h = (e & 1u) != 0u ? (word >> 16) : (word & 0xffffu);
  return dt == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}
// Two f16 in one word -> f32 with integer ops (magnitude << 13, times 2^112; exponent 31 is
// inf/NaN): faster than unpackHalf2x16 on lavapipe.
float kv_f16(uint h) {
  uint m = h & 0x7fffu;
  float f = m >= 0x7c00u ? uintBitsToFloat(0x7f800000u | ((m & 0x3ffu) << 13))
                         : uintBitsToFloat(m << 13) * uintBitsToFloat(0x77800000u);
  return (h & 0x8000u) != 0u ? -f : f;
}
vec2 kv_f16x2(uint w) { return vec2(kv_f16(w & 0xffffu), kv_f16(w >> 16)); }
#endif
