#version 450
// RoPE over x [N, H, D] with per-token positions; one invocation per rotated pair.
// NEOX pairs (i, i + n_dims/2), NORMAL pairs (2i, 2i+1); inv_freq_i = theta^(-2i/n_dims) and the
// angle pos·inv_freq in fp32 (as HF); pairs i >= n_freq keep angle 0; dims >= n_dims are copied.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint MODE = 0;  // 0 NEOX, 1 NORMAL
#include "rope_pair.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float o[]; };
// inv_freq_i computed on the host exactly as the CPU reference does (1 / theta^(2i/n_dims) in double,
// rounded to fp32): a 1-ulp difference here is a visible angle error at long positions.
layout(std430, set = 0, binding = 3) readonly buffer Freq { float inv_freq[]; };
layout(push_constant) uniform PC {
  uint N, H, D;
  uint n_dims, n_freq;
  uint x_off, pos_off, o_off;
  float theta;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  uint per_head = pc.D - pc.n_dims / 2u;  // n_dims/2 pairs + (D - n_dims) copies
  if (i >= pc.N * pc.H * per_head) return;
  uint j = i % per_head, nh = i / per_head;
  uint n = nh / pc.H;
  uint base = nh * pc.D;
  uint npairs = pc.n_dims / 2u;
  if (j >= npairs) {
    uint d = pc.n_dims + (j - npairs);
    o[pc.o_off + base + d] = x[pc.x_off + base + d];
    return;
  }
  uint a = MODE == 0u ? j : 2u * j;
  uint b = MODE == 0u ? j + npairs : 2u * j + 1u;
  float x0 = x[pc.x_off + base + a], x1 = x[pc.x_off + base + b];
  float ang = j < pc.n_freq ? float(pos[pc.pos_off + n]) * inv_freq[j] : 0.0;
  vec2 r = rope_pair(x0, x1, ang);
  o[pc.o_off + base + a] = r.x;
  o[pc.o_off + base + b] = r.y;
}
