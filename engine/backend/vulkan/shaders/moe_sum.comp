#version 450
// out[n, m] = sum_j w[n, j] * y[n, j, m], j ascending. One invocation per output element.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform PC {
  uint N, K, M;
  uint y_off, w_off, o_off;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.N * pc.M) return;
  uint n = i / pc.M, m = i % pc.M;
  float acc = 0.0;
  for (uint j = 0u; j < pc.K; ++j) acc += w[pc.w_off + n * pc.K + j] * y[pc.y_off + (n * pc.K + j) * pc.M + m];
  o[pc.o_off + i] = acc;
}
