// One RoPE rotation of the pair (x0, x1) by angle `ang`, shared by rope.comp and norm.comp (RoPE
// fused behind a norm) so that both give the same bits.
#ifndef KILN_ROPE_PAIR_GLSL
#define KILN_ROPE_PAIR_GLSL
// `precise`: no driver may contract these into FMAs differently in the two shaders.
vec2 rope_pair(float x0, float x1, float ang) {
  float c = cos(ang), s = sin(ang);
  precise float a = x0 * c - x1 * s, b = x0 * s + x1 * c;
  return vec2(a, b);
}
#endif
