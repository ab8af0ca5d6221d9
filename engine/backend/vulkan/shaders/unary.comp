#version 450
// Elementwise f32 ops selected by the OP specialization constant (values = kiln_op).
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 11;

layout(std430, set = 0, binding = 0) readonly buffer In { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform PC {
  uint n;
  uint x_off;
  uint y_off;
  float scale;
  float bias;
  float cap;
} pc;

#include "unary_op.glsl"

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.n) return;
  float r = unary_op(OP, x[pc.x_off + i], pc.scale, pc.bias, pc.cap);
  y[pc.y_off + i] = r;
}
