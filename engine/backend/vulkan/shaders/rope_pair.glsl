// One RoPE rotation of the pair (x0, x1) by angle `ang`, shared by rope.comp and norm.comp (RoPE
// fused behind a norm) so that both give the same bits.
#ifndef KILN_ROPE_PAIR_GLSL
#define KILN_ROPE_PAIR_GLSL
vec2 rope_pair(float x0, float x1, float ang) {
  float c = cos(ang), s = sin(ang);
  return vec2(x0 * c - x1 * s, x0 * s + x1 * c);
}
#endif
