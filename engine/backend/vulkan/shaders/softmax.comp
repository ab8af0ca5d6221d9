#version 450
// Softmax over the last dim of x·scale, max-subtracted; one subgroup per row (fixed order).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Out { float o[]; };
layout(push_constant) uniform PC {
  uint rows, D;
  uint x_off, o_off;
  float scale;
} pc;

void main() {
  const uint SG = gl_WorkGroupSize.x;
  uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= pc.rows) return;
  uint lane = gl_LocalInvocationID.x;
  uint xb = pc.x_off + row * pc.D, ob = pc.o_off + row * pc.D;
  float m = -1.0 / 0.0;
  for (uint d = lane; d < pc.D; d += SG) m = max(m, x[xb + d] * pc.scale);
  m = subgroupMax(m);
  float s = 0.0;
  for (uint d = lane; d < pc.D; d += SG) {
    float e = exp(x[xb + d] * pc.scale - m);
    o[ob + d] = e;
    s += e;
  }
  float inv = 1.0 / subgroupAdd(s);
  for (uint d = lane; d < pc.D; d += SG) o[ob + d] *= inv;
}
