#version 450
// Row norms, one subgroup per row (lane l sums elements l, l+SG, ... then subgroupAdd: the order
// depends on D and the subgroup size only, so rows are batch invariant).
// MODE: 0 RMS x̂·w, 1 RMS x̂·(1+w), 2 RMS x̂, 3 RMS (x̂·w)·silu(z), 4 L2 x/√(Σx²+eps).
// PRE_ADD (MODE 0-2): the row is x + z (an ADD fused in front: the residual stream), written to
// `sum` and read back from it, so the sum's bits are the ADD kernel's (a lone f32 add).
// ROPE (MODE 0-2, 1 NEOX / 2 NORMAL): a RoPE of the normalized row fused behind (Qwen3's per-head
// q/k norms): the row is one head of token row / H; the norm's output is still written, and the
// rotation is rope.comp's (rope_pair.glsl), so both outputs are bitwise the unfused ones.
// PAIR (with ROPE): a second norm + RoPE of the same shape, parameters and positions (Qwen3's q
// and k heads) in the same dispatch: rows from rows_a on are its rows, read and written at the
// *_off2 offsets of the same bindings.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const bool PRE_ADD = false;
layout(constant_id = 3) const uint ROPE = 0;
layout(constant_id = 4) const bool PAIR = false;
#include "rope_pair.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, set = 0, binding = 2) readonly buffer Z { float z[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 4) buffer Sum { float sum[]; };
layout(std430, set = 0, binding = 5) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 6) readonly buffer Freq { float inv_freq[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Rot { float r[]; };
layout(push_constant) uniform PC {
  uint rows, D;
  uint x_off, w_off, z_off, o_off;
  float eps;
  uint sum_off;
  uint H, n_dims, n_freq, pos_off, r_off;  // ROPE
  uint rows_a, H2, x_off2, w_off2, o_off2, r_off2;  // PAIR: the second norm + RoPE
} pc;

// This row's offsets (the first or, with PAIR, the second norm's).
uint x_off, w_off, o_off, r_off;

float inv_rms;  // 1/RMS of this row (1/L2 for MODE 4)

// Element d of the normalized row (base: the row's first element).
float normed(uint base, uint d) {
  float v = (PRE_ADD ? sum[pc.sum_off + base + d] : x[x_off + base + d]) * inv_rms;
  if (MODE == 0u) v *= w[w_off + d];
  else if (MODE == 1u) v *= 1.0 + w[w_off + d];
  else if (MODE == 3u) {
    float zv = z[pc.z_off + base + d];
    v = (v * w[w_off + d]) * (zv / (1.0 + exp(-zv)));
  }
  return v;
}

void main() {
  const uint SG = gl_WorkGroupSize.x;
  uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= pc.rows) return;
  uint lane = gl_LocalInvocationID.x;
  bool second = PAIR && row >= pc.rows_a;
  x_off = second ? pc.x_off2 : pc.x_off;
  w_off = second ? pc.w_off2 : pc.w_off;
  o_off = second ? pc.o_off2 : pc.o_off;
  r_off = second ? pc.r_off2 : pc.r_off;
  uint H = second ? pc.H2 : pc.H;
  if (second) row -= pc.rows_a;
  uint base = row * pc.D;
  float s = 0.0;
  for (uint d = lane; d < pc.D; d += SG) {
    float v = x[x_off + base + d];
    if (PRE_ADD) {
      v = v + z[pc.z_off + base + d];
      sum[pc.sum_off + base + d] = v;
    }
    s = fma(v, v, s);
  }
  float tot = subgroupAdd(s);
  inv_rms = MODE == 4u ? 1.0 / sqrt(tot + pc.eps) : 1.0 / sqrt(tot / float(pc.D) + pc.eps);
  if (ROPE != 0u) {
    // Elementwise from here, so lanes take rotation pairs instead of strided elements (each lane
    // reads an element before it writes it: r may be o or x itself). The pairs are not the
    // elements a lane summed above, so other lanes' reads of x must be done before these writes.
    subgroupMemoryBarrierBuffer();
    float p = float(pos[pc.pos_off + row / H]);
    uint half_ = pc.n_dims / 2u;
    for (uint j = lane; j < half_; j += SG) {
      uint a = ROPE == 1u ? j : 2u * j, b = ROPE == 1u ? j + half_ : 2u * j + 1u;
      float xa = normed(base, a), xb = normed(base, b);
      o[o_off + base + a] = xa;
      o[o_off + base + b] = xb;
      vec2 ab = rope_pair(xa, xb, j < pc.n_freq ? p * inv_freq[j] : 0.0);
      r[r_off + base + a] = ab.x;
      r[r_off + base + b] = ab.y;
    }
    for (uint d = pc.n_dims + lane; d < pc.D; d += SG) {
      float v = normed(base, d);
      o[o_off + base + d] = v;
      r[r_off + base + d] = v;
    }
    return;
  }
  for (uint d = lane; d < pc.D; d += SG) o[o_off + base + d] = normed(base, d);
}
