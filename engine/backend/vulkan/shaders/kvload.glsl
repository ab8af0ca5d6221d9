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
#endif
