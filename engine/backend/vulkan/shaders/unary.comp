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

const uint SCALE = 10u, SILU = 11u, GELU_TANH = 12u, SIGMOID = 13u, SOFTPLUS = 14u, SOFTCAP = 15u, EXP = 16u;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.n) return;
  float v = x[pc.x_off + i];
  float r;
  if (OP == SCALE) r = v * pc.scale + pc.bias;
  else if (OP == SILU) r = v / (1.0 + exp(-v));
  else if (OP == GELU_TANH) r = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  else if (OP == SIGMOID) r = 1.0 / (1.0 + exp(-v));
  else if (OP == SOFTPLUS) r = v > 20.0 ? v : log(1.0 + exp(v));
  else if (OP == SOFTCAP) r = pc.cap * tanh(v / pc.cap);
  else r = exp(v);
  y[pc.y_off + i] = r;
}
