#version 450
// out = a (op) b with numpy broadcasting of b onto a (4-D, b's strides 0 where broadcast).
// PRE != 0: a unary op fused in front (a = PRE(a), also written to `u`): SiLU/GELU gates (GLU).
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 8;  // 8 ADD, 9 MUL
layout(constant_id = 1) const uint PRE = 0;  // 0, or the kiln_op of a unary op applied to a first
layout(constant_id = 2) const uint BMODE = 2;  // 0: b is shaped like a; 1: b is one row [ne3]; 2: general
#include "unary_op.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 3) writeonly buffer U { float u[]; };
layout(push_constant) uniform PC {
  uint n;
  uint a_off, b_off, o_off;
  uint ne1, ne2, ne3;          // a's dims 1..3 (dim 0 outermost)
  uint bs0, bs1, bs2, bs3;     // b's element strides per a-dim (0: broadcast)
  uint u_off;                  // PRE: the unary op's output and parameters
  float scale, bias, cap;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.n) return;
  // The general index needs divisions by push constants, which lavapipe runs per lane as scalar
  // divides (~15 ns an element): the model's operands are same-shaped or one broadcast row, so
  // those skip it. The mode is a specialization constant: as a push constant, llvmpipe ran the
  // untaken branch masked (a 3072-wide MUL took 80 us either way, 40 us now).
  uint bi = i;
  if (BMODE == 1u) {
    bi = i % pc.ne3;
  } else if (BMODE == 2u) {
    uint i3 = i % pc.ne3, t = i / pc.ne3;
    uint i2 = t % pc.ne2;
    t /= pc.ne2;
    uint i1 = t % pc.ne1, i0 = t / pc.ne1;
    bi = i0 * pc.bs0 + i1 * pc.bs1 + i2 * pc.bs2 + i3 * pc.bs3;
  }
  float bv = b[pc.b_off + bi];
  float av = a[pc.a_off + i];
  if (PRE != 0u) {
    av = unary_op(PRE, av, pc.scale, pc.bias, pc.cap);
    u[pc.u_off + i] = av;
  }
  o[pc.o_off + i] = OP == 8u ? av + bv : av * bv;
}
