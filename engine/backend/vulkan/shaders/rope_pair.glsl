// One RoPE rotation of the pair (x0, x1) by angle `ang`, shared by rope.comp and norm.comp (RoPE
// fused behind a norm) so that both give the same bits.
#ifndef KILN_ROPE_PAIR_GLSL
#define KILN_ROPE_PAIR_GLSL
// `precise`: no driver may contract these into FMAs differently in the two shaders.
// GLSL's sin/cos promise no precision, and NVIDIA's lose it as |ang| grows (RoPE angles reach
// position x 1 rad): on an H100 the rotated rows were off by an NMSE of 2-5e-6 against the CPU
// reference. The angle is reduced to [-pi, pi] first, 2pi split in three parts (Cody-Waite: k·C1
// is exact for |k| < 2^16, angles up to ~400000 rad), so every device evaluates near zero.
float rope_reduce(float ang) {
  precise float k = round(ang * 0.15915494309189535);
  precise float r = fma(-k, 6.28125, ang);
  r = fma(-k, 0.0019353071693331003, r);
  precise float r3 = fma(-k, 1.0253376273028358e-11, r);
  return r3;
}
vec2 rope_pair(float x0, float x1, float ang) {
  float r = rope_reduce(ang);
  float c = cos(r), s = sin(r);
  precise float a = x0 * c - x1 * s, b = x0 * s + x1 * c;
  return vec2(a, b);
}
#endif
