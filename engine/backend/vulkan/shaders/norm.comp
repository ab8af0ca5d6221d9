#version 450
// Row norms, one subgroup per row (lane l sums elements l, l+SG, ... then subgroupAdd: the order
// depends on D and the subgroup size only, so rows are batch invariant).
// MODE: 0 RMS x̂·w, 1 RMS x̂·(1+w), 2 RMS x̂, 3 RMS (x̂·w)·silu(z), 4 L2 x/√(Σx²+eps).
// PRE_ADD (MODE 0-2): the row is x + z (an ADD fused in front: the residual stream), written to
// `sum` and read back from it, so the sum's bits are the ADD kernel's (a lone f32 add).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const bool PRE_ADD = false;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, set = 0, binding = 2) readonly buffer Z { float z[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 4) buffer Sum { float sum[]; };
layout(push_constant) uniform PC {
  uint rows, D;
  uint x_off, w_off, z_off, o_off;
  float eps;
  uint sum_off;
} pc;

void main() {
  const uint SG = gl_WorkGroupSize.x;
  uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= pc.rows) return;
  uint lane = gl_LocalInvocationID.x;
  uint base = row * pc.D;
  float s = 0.0;
  for (uint d = lane; d < pc.D; d += SG) {
    float v = x[pc.x_off + base + d];
    if (PRE_ADD) {
      v = v + z[pc.z_off + base + d];
      sum[pc.sum_off + base + d] = v;
    }
    s = fma(v, v, s);
  }
  float tot = subgroupAdd(s);
  float inv = MODE == 4u ? 1.0 / sqrt(tot + pc.eps) : 1.0 / sqrt(tot / float(pc.D) + pc.eps);
  for (uint d = lane; d < pc.D; d += SG) {
    float v = (PRE_ADD ? sum[pc.sum_off + base + d] : x[pc.x_off + base + d]) * inv;
    if (MODE == 0u) v *= w[pc.w_off + d];
    else if (MODE == 1u) v *= 1.0 + w[pc.w_off + d];
    else if (MODE == 3u) {
      float zv = z[pc.z_off + base + d];
      v = (v * w[pc.w_off + d]) * (zv / (1.0 + exp(-zv)));
    }
    o[pc.o_off + base + d] = v;
  }
}
