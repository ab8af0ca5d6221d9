#version 450
// MoE routing weights per token: softmax over all E logits, gather the chosen ids, optionally
// renormalize, optionally multiply by a per-expert scale (Gemma 4). One invocation per row.
layout(local_size_x = 64) in;
layout(constant_id = 0) const bool HAS_SCALE = false;
layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 2) readonly buffer Sc { float sc[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float o[]; };
layout(push_constant) uniform PC {
  uint N, E, K, renorm;
  uint l_off, i_off, s_off, o_off;
} pc;

void main() {
  uint n = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (n >= pc.N) return;
  uint lb = pc.l_off + n * pc.E;
  float m = -1.0 / 0.0;
  for (uint e = 0u; e < pc.E; ++e) m = max(m, logits[lb + e]);
  float s = 0.0;
  for (uint e = 0u; e < pc.E; ++e) s += exp(logits[lb + e] - m);
  float w[64];
  float tot = 0.0;
  for (uint j = 0u; j < pc.K; ++j) {
    w[j] = exp(logits[lb + uint(ids[pc.i_off + n * pc.K + j])] - m) / s;
    tot += w[j];
  }
  for (uint j = 0u; j < pc.K; ++j) {
    float r = pc.renorm != 0u ? w[j] / tot : w[j];
    if (HAS_SCALE) r *= sc[pc.s_off + uint(ids[pc.i_off + n * pc.K + j])];
    o[pc.o_off + n * pc.K + j] = r;
  }
}
