#version 450
// Paged attention for a ragged batch: one subgroup per (token, query head). Keys are visited in
// position order with an online softmax; q·k is split over lanes by dimension and combined with
// subgroupAdd, so a sequence's result depends only on its own kv_len (batch invariant).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // cache dtypes: 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint VDT = 0;
// VEC: Dk, Dv multiples of 8 and 16-byte aligned cache rows: each lane owns whole groups of 8
// dimensions (g = lane, lane+SG, ...) read as 1 (16-bit) or 2 (f32) texels, instead of one texel
// fetch per element.
layout(constant_id = 3) const bool VEC = false;
const uint MAXG = 8u;  // groups of 8 dims per lane (64 dims, as MAXPER)
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

// 8 elements of a cache at element index e (e % 8 == 0 for 16-bit, % 4 for f32).
void load8(usamplerBuffer buf, uint dt, uint e, out vec4 lo, out vec4 hi) {
  if (dt == 0u) {
    lo = uintBitsToFloat(texelFetch(buf, int(e >> 2)));
    hi = uintBitsToFloat(texelFetch(buf, int((e >> 2) + 1u)));
    return;
  }
  uvec4 t = texelFetch(buf, int(e >> 3));
  if (dt == 2u) {
    lo = uintBitsToFloat(uvec4(t.x << 16, t.x & 0xffff0000u, t.y << 16, t.y & 0xffff0000u));
    hi = uintBitsToFloat(uvec4(t.z << 16, t.z & 0xffff0000u, t.w << 16, t.w & 0xffff0000u));
    return;
  }
  // unpackHalf2x16 here: the integer widening used in matmul.comp gave wrong results in this
  // kernel on lavapipe 22.3 for long f16 decodes (KILN_BACKEND_OPS_LONG=1, kv 8192, D 256).
  lo = vec4(unpackHalf2x16(t.x), unpackHalf2x16(t.y));
  hi = vec4(unpackHalf2x16(t.z), unpackHalf2x16(t.w));
}

void main_vec(uint t, uint h, uint lane, uint ob, int seq, int pos) {
  const uint SG = gl_WorkGroupSize.x;
  uint hk = h / (pc.Hq / pc.Hkv);
  uint gk = pc.Dk / 8u, gv = pc.Dv / 8u;
  uint nk = (gk + SG - 1u) / SG, nv = (gv + SG - 1u) / SG;
  vec4 qa[MAXG], qb[MAXG];
  uint qbase = pc.q_off + (t * pc.Hq + h) * pc.Dk;
  for (uint i = 0u; i < nk; ++i) {
    uint g = lane + i * SG;
    if (g < gk) {
      uint d = qbase + 8u * g;
      qa[i] = vec4(q[d], q[d + 1u], q[d + 2u], q[d + 3u]);
      qb[i] = vec4(q[d + 4u], q[d + 5u], q[d + 6u], q[d + 7u]);
    } else {
      qa[i] = vec4(0.0);
      qb[i] = vec4(0.0);
    }
  }
  vec4 aa[MAXG], ab[MAXG];
  for (uint i = 0u; i < nv; ++i) {
    aa[i] = vec4(0.0);
    ab[i] = vec4(0.0);
  }
  float m = -1.0 / 0.0, l = 0.0;
  int lo = pc.window > 0 ? max(0, pos - pc.window + 1) : 0;
  for (int j = lo; j <= pos; ++j) {
    uint cell = uint(bt[pc.bt_off + uint(seq) * pc.MB + uint(j) / pc.BS]) * pc.BS + uint(j) % pc.BS;
    uint kb = pc.k_off + (cell * pc.Hkv + hk) * pc.Dk;
    float part = 0.0;
    for (uint i = 0u; i < nk; ++i) {
      uint g = lane + i * SG;
      if (g < gk) {
        vec4 k0, k1;
        load8(Kc, KDT, kb + 8u * g, k0, k1);
        part = fma(qa[i].x, k0.x, part);
        part = fma(qa[i].y, k0.y, part);
        part = fma(qa[i].z, k0.z, part);
        part = fma(qa[i].w, k0.w, part);
        part = fma(qb[i].x, k1.x, part);
        part = fma(qb[i].y, k1.y, part);
        part = fma(qb[i].z, k1.z, part);
        part = fma(qb[i].w, k1.w, part);
      }
    }
    float s = subgroupAdd(part) * pc.scale;
    if (pc.cap > 0.0) s = pc.cap * tanh(s / pc.cap);
    float mn = max(m, s);
    float corr = exp(m - mn), p = exp(s - mn);
    l = l * corr + p;
    uint vb = pc.v_off + (cell * pc.Hkv + hk) * pc.Dv;
    for (uint i = 0u; i < nv; ++i) {
      uint g = lane + i * SG;
      if (g < gv) {
        vec4 v0, v1;
        load8(Vc, VDT, vb + 8u * g, v0, v1);
        aa[i] = fma(vec4(p), v0, aa[i] * corr);
        ab[i] = fma(vec4(p), v1, ab[i] * corr);
      }
    }
    m = mn;
  }
  float inv = 1.0 / l;
  for (uint i = 0u; i < nv; ++i) {
    uint g = lane + i * SG;
    if (g < gv) {
      uint d = ob + 8u * g;
      vec4 a = aa[i] * inv, b = ab[i] * inv;
      o[d] = a.x, o[d + 1u] = a.y, o[d + 2u] = a.z, o[d + 3u] = a.w;
      o[d + 4u] = b.x, o[d + 5u] = b.y, o[d + 6u] = b.z, o[d + 7u] = b.w;
    }
  }
}

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
  if (VEC) {
    main_vec(t, h, lane, ob, seq, pos);
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
