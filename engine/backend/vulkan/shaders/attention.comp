#version 450
// Paged attention for a ragged batch: one subgroup per (token, query head). Keys are visited in
// position order with an online softmax; q·k is split over lanes by dimension and combined with
// subgroupAdd, so a sequence's result depends only on its own kv_len (batch invariant).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // cache dtypes: 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint VDT = 0;
const uint MAXPER = 64u;  // head dims per lane: Dk, Dv <= 64 * subgroup size

layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer Kc;
layout(set = 0, binding = 2) uniform usamplerBuffer Vc;
layout(std430, set = 0, binding = 3) readonly buffer Bt { int bt[]; };
layout(std430, set = 0, binding = 4) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Out { float o[]; };
#include "kvload.glsl"

layout(push_constant) uniform PC {
  uint N, Hq, Dk, Dv;
  uint BS, Hkv, S, MB;
  uint q_off, k_off, v_off, bt_off, seqs_off, o_off;  // elements (k/v: of the cache dtype)
  float scale, cap;
  int window;
} pc;

void main() {
  const uint SG = gl_WorkGroupSize.x;
  uint item = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (item >= pc.N * pc.Hq) return;
  uint t = item / pc.Hq, h = item % pc.Hq;
  uint lane = gl_LocalInvocationID.x;
  uint ob = pc.o_off + (t * pc.Hq + h) * pc.Dv;

  int seq = -1;
  int pos = 0;
  for (uint s = 0u; s < pc.S; ++s) {
    int qs = seqs[pc.seqs_off + s * 4u], ql = seqs[pc.seqs_off + s * 4u + 1u];
    if (int(t) >= qs && int(t) < qs + ql) {
      seq = int(s);
      pos = seqs[pc.seqs_off + s * 4u + 2u] - ql + (int(t) - qs);
    }
  }
  if (seq < 0) {  // rows outside every sequence produce 0
    for (uint d = lane; d < pc.Dv; d += SG) o[ob + d] = 0.0;
    return;
  }
  uint hk = h / (pc.Hq / pc.Hkv);
  float qr[MAXPER];
  uint nk = (pc.Dk + SG - 1u) / SG, nv = (pc.Dv + SG - 1u) / SG;
  for (uint i = 0u; i < nk; ++i) {
    uint d = lane + i * SG;
    qr[i] = d < pc.Dk ? q[pc.q_off + (t * pc.Hq + h) * pc.Dk + d] : 0.0;
  }
  float acc[MAXPER];
  for (uint i = 0u; i < nv; ++i) acc[i] = 0.0;
  float m = -1.0 / 0.0, l = 0.0;
  int lo = pc.window > 0 ? max(0, pos - pc.window + 1) : 0;
  for (int j = lo; j <= pos; ++j) {
    uint cell = uint(bt[pc.bt_off + uint(seq) * pc.MB + uint(j) / pc.BS]) * pc.BS + uint(j) % pc.BS;
    uint kb = pc.k_off + (cell * pc.Hkv + hk) * pc.Dk;
    float part = 0.0;
    for (uint i = 0u; i < nk; ++i) {
      uint d = lane + i * SG;
      if (d < pc.Dk) part = fma(qr[i], load_elem(Kc, KDT, kb + d), part);
    }
    float s = subgroupAdd(part) * pc.scale;
    if (pc.cap > 0.0) s = pc.cap * tanh(s / pc.cap);
    float mn = max(m, s);
    float corr = exp(m - mn), p = exp(s - mn);
    l = l * corr + p;
    uint vb = pc.v_off + (cell * pc.Hkv + hk) * pc.Dv;
    for (uint i = 0u; i < nv; ++i) {
      uint d = lane + i * SG;
      if (d < pc.Dv) acc[i] = fma(p, load_elem(Vc, VDT, vb + d), acc[i] * corr);
    }
    m = mn;
  }
  float inv = 1.0 / l;
  for (uint i = 0u; i < nv; ++i) {
    uint d = lane + i * SG;
    if (d < pc.Dv) o[ob + d] = acc[i] * inv;
  }
}
