#version 450
#extension GL_EXT_control_flow_attributes : enable
// out[n, :] = dequant(table[ids[n], :]) for every weight dtype (one WT_* define per variant).
// One invocation per output element; rows of quantized tables are whole blocks. The formats
// loaded by load_split (wload.glsl): one invocation per 32-value group, which writes its 32
// values, each as its format's definition computes it (scale·q + offset, rounded after each step).
layout(local_size_x = 64) in;
#define WLOAD_BINDING 0
#include "wload.glsl"
layout(std430, set = 0, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 3) buffer Err { uint bad_id; };

layout(push_constant) uniform PC {
  uint N;      // rows out
  uint D;      // elements per row
  uint R;      // rows in the table
  uint w_off;  // elements (f32/f16/bf16) or bytes (quantized)
  uint w_row;  // bytes per row (quantized)
  uint ids_off;
  uint o_off;
  uint r0, rb;  // this dispatch's table rows [r0, r0 + rb) (tables beyond one texel binding's reach)
} pc;

#if defined(WT_SPLIT)
void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  uint G = pc.D / 32u;  // groups per row
  if (i >= pc.N * G) return;
  uint n = i / G, c = i % G, o0 = pc.o_off + n * pc.D + c * 32u;
  int id = ids[pc.ids_off + n];
  if (id < 0 || uint(id) >= pc.R) {
    bad_id = 1u;
    [[unroll]] for (uint e = 0u; e < 32u; ++e) o[o0 + e] = 0.0;
    return;
  }
  if (uint(id) < pc.r0 || uint(id) >= pc.r0 + pc.rb) return;  // another block's dispatch
  vec4 v[8];
  vec2 dl, off;
  load_split(pc.w_off + uint(id - int(pc.r0)) * pc.w_row, c, v, dl, off);
  [[unroll]] for (uint s = 0u; s < 8u; ++s) {
    float d = s < 4u ? dl.x : dl.y;
    [[unroll]] for (uint k = 0u; k < 4u; ++k) {
      precise float y = d * v[s][k];  // no fused multiply-add: the definition rounds the product
#if defined(WT_OFFSET)
      y = y + (s < 4u ? off.x : off.y);  // only where the format has one: -0 + 0 would be +0
#endif
      o[o0 + 4u * s + k] = y;
    }
  }
}
#else
void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.N * pc.D) return;
  uint n = i / pc.D, e = i % pc.D;
  int id = ids[pc.ids_off + n];
  if (id < 0 || uint(id) >= pc.R) {
    bad_id = 1u;
    o[pc.o_off + i] = 0.0;
    return;
  }
  if (uint(id) < pc.r0 || uint(id) >= pc.r0 + pc.rb) return;  // another block's dispatch
  id -= int(pc.r0);
#if defined(WT_QUANT)
  uint b = pc.w_off + uint(id) * pc.w_row + (e / 32u) * BLOCK_BYTES;
  uint j = e % 32u;
  float d = block_scale(b);
  uint q = b + 2u;
#if defined(WT_Q8_0)
  uint byte_at = q + j;
  uint word = wword(byte_at >> 2);
  int v = int(word << (24u - 8u * (byte_at & 3u))) >> 24;
  o[pc.o_off + i] = float(v) * d;
#else
  uint byte_at = q + (j % 16u);
  uint bytev = (wword(byte_at >> 2) >> (8u * (byte_at & 3u))) & 0xffu;
  uint nib = j < 16u ? (bytev & 0xfu) : (bytev >> 4);
  o[pc.o_off + i] = float(int(nib) - 8) * d;
#endif
#else
  o[pc.o_off + i] = w_scalar(pc.w_off + uint(id) * pc.D + e);
#endif
}
#endif
