#version 450
// Paged attention for a ragged batch: one subgroup per (token, query head). Keys are visited in
// position order with an online softmax; q·k is split over lanes by dimension and combined with
// subgroupAdd, so a sequence's result depends only on its own kv_len (batch invariant).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // cache dtypes: 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint VDT = 0;
// Each lane owns groups of 8 dimensions (g = lane, lane+SG, ...). VEC: Dk, Dv multiples of 8 and
// 16-byte aligned cache rows, a group read as 1 (16-bit) or 2 (f32) texels; otherwise element by
// element (dims past D read as 0). The old element-strided scalar path kept q and the output in
// two dynamically indexed 64-float arrays and came out non-finite for every lane slot past the
// first on lavapipe at D 260, kv 8192 (KILN_BACKEND_OPS_LONG=1); it is gone.
layout(constant_id = 3) const bool VEC = false;
const uint MAXG = 8u;  // groups of 8 dims per lane: Dk, Dv <= 64 * subgroup size

layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer Kc;
layout(set = 0, binding = 2) uniform usamplerBuffer Vc;
layout(std430, set = 0, binding = 3) readonly buffer Bt { int bt[]; };
layout(std430, set = 0, binding = 4) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 6) buffer Err { uint err[]; };  // err[3]: more keys than max_keys
#include "kvload.glsl"

layout(push_constant) uniform PC {
  uint N, Hq, Dk, Dv;
  uint BS, Hkv, S, MB;
  uint q_off, k_off, v_off, bt_off, seqs_off, o_off;  // elements (k/v: of the cache dtype)
  float scale, cap;
  int window;
  uint max_keys;  // keys one invocation can visit within the loop budget (0: any)
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

// Dims 8g..8g+7 of a cache row starting at element `row` (D dims; VEC: D % 8 == 0, aligned).
void group8(usamplerBuffer buf, uint dt, uint row, uint g, uint D, out vec4 lo, out vec4 hi) {
  if (VEC) {
    load8(buf, dt, row + 8u * g, lo, hi);
    return;
  }
  float e[8];
  [[unroll]] for (uint j = 0u; j < 8u; ++j) {
    float v = load_elem(buf, dt, row + min(8u * g + j, D - 1u));
    e[j] = 8u * g + j < D ? v : 0.0;
  }
  lo = vec4(e[0], e[1], e[2], e[3]);
  hi = vec4(e[4], e[5], e[6], e[7]);
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
  uint hk = h / (pc.Hq / pc.Hkv);
  uint gk = (pc.Dk + 7u) / 8u, gv = (pc.Dv + 7u) / 8u;
  uint nk = (gk + SG - 1u) / SG, nv = (gv + SG - 1u) / SG;
  vec4 qa[MAXG], qb[MAXG];
  uint qbase = pc.q_off + (t * pc.Hq + h) * pc.Dk;
  [[unroll]] for (uint i = 0u; i < MAXG; ++i) {
    uint g = lane + i * SG;
    if (i < nk && g < gk) {
      float e[8];
      [[unroll]] for (uint j = 0u; j < 8u; ++j) e[j] = VEC || 8u * g + j < pc.Dk ? q[qbase + 8u * g + j] : 0.0;
      qa[i] = vec4(e[0], e[1], e[2], e[3]);
      qb[i] = vec4(e[4], e[5], e[6], e[7]);
    } else {
      qa[i] = vec4(0.0);
      qb[i] = vec4(0.0);
    }
  }
  vec4 aa[MAXG], ab[MAXG];
  [[unroll]] for (uint i = 0u; i < MAXG; ++i) {
    aa[i] = vec4(0.0);
    ab[i] = vec4(0.0);
  }
  float m = -1.0 / 0.0, l = 0.0;
  int lo = pc.window > 0 ? max(0, pos - pc.window + 1) : 0;
  if (pc.max_keys != 0u && uint(pos - lo + 1) > pc.max_keys && lane == 0u) err[3] = 1u;
  // Four keys per iteration and the group loops unrolled: llvmpipe ends a shader's loops after
  // 65535 iterations per invocation (KernelPolicy::loop_budget), so this reaches 4 x 65535 keys.
  for (int j0 = lo; j0 <= pos; j0 += 4) {
    [[unroll]] for (int u = 0; u < 4; ++u) {
      int j = j0 + u;
      if (j > pos) break;
      uint cell = uint(bt[pc.bt_off + uint(seq) * pc.MB + uint(j) / pc.BS]) * pc.BS + uint(j) % pc.BS;
      uint kb = pc.k_off + (cell * pc.Hkv + hk) * pc.Dk;
      float part = 0.0;
      [[unroll]] for (uint i = 0u; i < MAXG; ++i) {
        uint g = lane + i * SG;
        if (i < nk && g < gk) {
          vec4 k0, k1;
          group8(Kc, KDT, kb, g, pc.Dk, k0, k1);
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
      [[unroll]] for (uint i = 0u; i < MAXG; ++i) {
        uint g = lane + i * SG;
        if (i < nv && g < gv) {
          vec4 v0, v1;
          group8(Vc, VDT, vb, g, pc.Dv, v0, v1);
          aa[i] = fma(vec4(p), v0, aa[i] * corr);
          ab[i] = fma(vec4(p), v1, ab[i] * corr);
        }
      }
      m = mn;
    }
  }
  float inv = 1.0 / l;
  [[unroll]] for (uint i = 0u; i < MAXG; ++i) {
    uint g = lane + i * SG;
    if (i < nv && g < gv) {
      vec4 a = aa[i] * inv, b = ab[i] * inv;
      float e[8] = float[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
      [[unroll]] for (uint j = 0u; j < 8u; ++j)
        if (VEC || 8u * g + j < pc.Dv) o[ob + 8u * g + j] = e[j];
    }
  }
}

