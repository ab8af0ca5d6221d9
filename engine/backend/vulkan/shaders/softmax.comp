#version 450
// Softmax over the last dim of x·scale, max-subtracted; one subgroup per row (fixed order: lane l
// takes elements l, l+SG, ...). The loops take four of a lane's elements per iteration, in that
// same order: llvmpipe ends loops after 65535 iterations per invocation, and three passes over a
// 262144-wide vocabulary row are 98304 iterations one at a time (KernelPolicy::loop_budget).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
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
  for (uint d0 = lane; d0 < pc.D; d0 += 4u * SG)
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
      uint d = d0 + u * SG;
      if (d < pc.D) m = max(m, x[xb + d] * pc.scale);
    }
  m = subgroupMax(m);
  float s = 0.0;
  for (uint d0 = lane; d0 < pc.D; d0 += 4u * SG)
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
      uint d = d0 + u * SG;
      if (d < pc.D) {
        float e = exp(x[xb + d] * pc.scale - m);
        o[ob + d] = e;
        s += e;
      }
    }
  float inv = 1.0 / subgroupAdd(s);
  for (uint d0 = lane; d0 < pc.D; d0 += 4u * SG)
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
      uint d = d0 + u * SG;
      if (d < pc.D) o[ob + d] *= inv;
    }
}
