// The elementwise f32 ops of unary.comp, shared with binary.comp (a unary op fused in front of a
// binary one): one expression per op, so fused and unfused results are the same bits.
#ifndef KILN_UNARY_OP_GLSL
#define KILN_UNARY_OP_GLSL

const uint SCALE = 10u, SILU = 11u, GELU_TANH = 12u, SIGMOID = 13u, SOFTPLUS = 14u, SOFTCAP = 15u, EXP = 16u;

float unary_op(uint op, float v, float scale, float bias, float cap) {
  if (op == SCALE) return v * scale + bias;
  if (op == SILU) return v / (1.0 + exp(-v));
  if (op == GELU_TANH) return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  if (op == SIGMOID) return 1.0 / (1.0 + exp(-v));
  if (op == SOFTPLUS) return v > 20.0 ? v : log(1.0 + exp(v));
  if (op == SOFTCAP) return cap * tanh(v / cap);
  return exp(v);
}

#endif
