#version 450
// Top-k ids per row, descending, ties to the lower index: k passes, each picking the best element
// strictly after the previous pick in (value desc, index asc) order. One invocation per row (short
// rows: a mixture's experts; long rows take top_k_rows.comp). VALUES: each row of the result holds
// the k ids, then their k values as f32 bits.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint VALUES = 0;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Ids { int ids[]; };
layout(push_constant) uniform PC {
  uint N, E, K;
  uint x_off, o_off;
} pc;

// Larger key, larger value; -0 and +0 share a key; NaN ranks below -inf (as top_k_rows.comp and
// the CPU reference).
uint key_of(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
  if ((u & 0x7fffffffu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

void main() {
  uint n = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (n >= pc.N) return;
  uint xb = pc.x_off + n * pc.E;
  uint pk = 0xffffffffu;  // the previous pick's key
  int pi = -1;
  bool first = true;
  for (uint j = 0u; j < pc.K; ++j) {
    uint bk = 0u;
    int bi = -1;
    for (uint e = 0u; e < pc.E; ++e) {
      uint k = key_of(x[xb + e]);
      bool after = first || k < pk || (k == pk && int(e) > pi);
      if (after && (bi < 0 || k > bk)) {
        bk = k;
        bi = int(e);
      }
    }
    const uint width = VALUES != 0u ? 2u * pc.K : pc.K;
    ids[pc.o_off + n * width + j] = bi;
    if (VALUES != 0u) ids[pc.o_off + n * width + pc.K + j] = floatBitsToInt(x[xb + uint(bi)]);
    pk = bk;
    pi = bi;
    first = false;
  }
}
