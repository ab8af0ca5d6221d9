#version 450
// Paged attention for a ragged batch, the alternative to attention_keys.comp (KernelPolicy::
// attention_split_keys false, KILN_VULKAN_ATTENTION=dims; slower on lavapipe and on an H100, kept
// for devices where the keys kernel's per-lane rows would not fit): one subgroup per (token, QG
// query heads of one KV head).
// Keys are visited in position order with an online softmax updated once per four keys; q·k is
// split over lanes by dimension groups and combined with subgroupAdd, so a sequence's result
// depends only on its own keys (batch invariant).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // cache dtypes: 0 f32, 1 f16, 2 bf16, 3 kv_q8, 4 kv_q4
layout(constant_id = 2) const uint VDT = 0;
// Each lane owns groups of 8 dimensions (g = lane, lane+SG, ...). VEC: Dk, Dv multiples of 8 and
// 16-byte aligned cache rows, a group read as 1 (16-bit) or 2 (f32) texels; otherwise element by
// element (dims past D read as 0). The old element-strided scalar path ran a loop per dimension
// group and came out non-finite on lavapipe at D 260, kv 8192 (KILN_BACKEND_OPS_LONG=1): llvmpipe's
// 65535 loop iterations per invocation (KernelPolicy::loop_budget); it is gone. kv_q8 / kv_q4 rows
// (D % 8 == 0, 4-byte aligned) are always read by groups (kv_load8), VEC or not.
layout(constant_id = 3) const bool VEC = false;
// Groups of 8 dims per lane, max over Dk and Dv (<= 8: Dk, Dv <= 64 * subgroup size), set by the
// host so the per-lane arrays are exactly as big as needed: sized for the worst case (8), q, the
// accumulators and their spills made a 4096-key decode 1.8x slower on lavapipe.
layout(constant_id = 4) const uint NG = 8;
// Query heads per workgroup (GQA: heads that share a KV head), so each key's K and V groups are
// fetched once for all of them: the fetches of the head-interleaved cache rows were most of a long
// decode's time. Every head's arithmetic is the same as alone.
layout(constant_id = 5) const uint QG = 1;
// A logit softcap (pc.cap > 0). A specialization constant: behind a push-constant test llvmpipe
// evaluated the tanh for every score anyway (masked), softcap or not.
layout(constant_id = 6) const bool CAP = false;

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
  uint q_off, k_off, v_off, bt_off, seqs_off, o_off;  // elements (k/v: of the cache dtype, bytes for kv)
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
  // unpackHalf2x16 here: matmul.comp's integer widening measured no faster in this kernel, whose
  // time is cache-miss latency (its earlier wrong results on long decodes were the loop limit).
  lo = vec4(unpackHalf2x16(t.x), unpackHalf2x16(t.y));
  hi = vec4(unpackHalf2x16(t.z), unpackHalf2x16(t.w));
}

// Dims 8g..8g+7 of a cache row starting at element `row` (D dims; VEC: D % 8 == 0, aligned; kv
// dtypes: byte `row`, D % 8 == 0).
void group8(usamplerBuffer buf, uint dt, uint row, uint g, uint D, out vec4 lo, out vec4 hi) {
  if (dt >= 3u) {
    kv_load8(buf, dt, row, g, D, lo, hi);
    return;
  }
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
  uint groups_per_token = pc.Hq / QG;
  uint item = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (item >= pc.N * groups_per_token) return;
  uint t = item / groups_per_token, h0 = (item % groups_per_token) * QG;  // heads h0 .. h0+QG-1
  uint lane = gl_LocalInvocationID.x;
  uint ob0 = pc.o_off + (t * pc.Hq + h0) * pc.Dv;

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
    for (uint d = lane; d < QG * pc.Dv; d += SG) o[ob0 + d] = 0.0;
    return;
  }
  uint hk = h0 / (pc.Hq / pc.Hkv);
  uint gk = (pc.Dk + 7u) / 8u, gv = (pc.Dv + 7u) / 8u;
  uint nk = (gk + SG - 1u) / SG, nv = (gv + SG - 1u) / SG;
  vec4 qa[QG * NG], qb[QG * NG];  // [head][group]
  [[unroll]] for (uint h = 0u; h < QG; ++h) {
    uint qbase = pc.q_off + (t * pc.Hq + h0 + h) * pc.Dk;
    [[unroll]] for (uint i = 0u; i < NG; ++i) {
      uint g = lane + i * SG;
      if (i < nk && g < gk) {
        float e[8];
        [[unroll]] for (uint j = 0u; j < 8u; ++j) e[j] = VEC || 8u * g + j < pc.Dk ? q[qbase + 8u * g + j] : 0.0;
        qa[h * NG + i] = vec4(e[0], e[1], e[2], e[3]);
        qb[h * NG + i] = vec4(e[4], e[5], e[6], e[7]);
      } else {
        qa[h * NG + i] = vec4(0.0);
        qb[h * NG + i] = vec4(0.0);
      }
    }
  }
  vec4 aa[QG * NG], ab[QG * NG];
  float m[QG], l[QG];
  [[unroll]] for (uint i = 0u; i < QG * NG; ++i) {
    aa[i] = vec4(0.0);
    ab[i] = vec4(0.0);
  }
  [[unroll]] for (uint h = 0u; h < QG; ++h) m[h] = -1.0 / 0.0, l[h] = 0.0;
  int lo = pc.window > 0 ? max(0, pos - pc.window + 1) : 0;
  if (pc.max_keys != 0u && pos - lo + 1 > int(pc.max_keys) && lane == 0u) err[3] = 1u;
  // Keys block by block (one block-table read per block, no per-key division) and four at a
  // time: their q·k are four independent chains, then one online-softmax update for the four
  // (max over them, one rescale of the accumulators, the weighted values added in key order).
  // Key by key, the update was latency bound. The grouping starts at each block's first visited
  // key, so it depends on the sequence alone. Loops stay under llvmpipe's 65535 iterations per
  // invocation (KernelPolicy::loop_budget; the host's max_keys keeps to it).
  int b_lo = lo / int(pc.BS), b_hi = pos / int(pc.BS);
  // Elements (kv dtypes: bytes) between consecutive cells.
  uint kstep = cache_row(KDT, 0u, pc.Hkv, pc.Dk), vstep = cache_row(VDT, 0u, pc.Hkv, pc.Dv);
  for (int b = b_lo; b <= b_hi; ++b) {
    uint cell0 = uint(bt[pc.bt_off + uint(seq) * pc.MB + uint(b)]) * pc.BS;
    int j_lo = max(lo, b * int(pc.BS)), j_hi = min(pos, b * int(pc.BS) + int(pc.BS) - 1);
    uint kb0 = cache_row(KDT, pc.k_off, cell0 * pc.Hkv + hk, pc.Dk);
    uint vb0 = cache_row(VDT, pc.v_off, cell0 * pc.Hkv + hk, pc.Dv);
    for (int j0 = j_lo; j0 <= j_hi; j0 += 4) {
      int cnt = min(4, j_hi - j0 + 1);
      uint r0 = uint(j0 - b * int(pc.BS));  // the first key's cell within the block
      float sc[QG * 4];                      // [head][key]
      [[unroll]] for (uint i = 0u; i < QG * 4u; ++i) sc[i] = 0.0;
      uint r_last = r0 + uint(cnt - 1);
      [[unroll]] for (int u = 0; u < 4; ++u) {
        {  // past the last key, re-read it (its score is not used): straight-line loads
          uint kb = kb0 + min(r0 + uint(u), r_last) * kstep;
          [[unroll]] for (uint i = 0u; i < NG; ++i) {
            uint g = lane + i * SG;
            if (i < nk && g < gk) {
              vec4 k0, k1;
              group8(Kc, KDT, kb, g, pc.Dk, k0, k1);
              [[unroll]] for (uint h = 0u; h < QG; ++h) {
                float part = sc[h * 4u + uint(u)];
                vec4 a = qa[h * NG + i], c = qb[h * NG + i];
                part = fma(a.x, k0.x, part);
                part = fma(a.y, k0.y, part);
                part = fma(a.z, k0.z, part);
                part = fma(a.w, k0.w, part);
                part = fma(c.x, k1.x, part);
                part = fma(c.y, k1.y, part);
                part = fma(c.z, k1.z, part);
                part = fma(c.w, k1.w, part);
                sc[h * 4u + uint(u)] = part;
              }
            }
          }
        }
      }
      float p[QG * 4], corr[QG];
      [[unroll]] for (uint h = 0u; h < QG; ++h) {
        float mn = m[h];
        [[unroll]] for (int u = 0; u < 4; ++u) {
          float s = subgroupAdd(sc[h * 4u + uint(u)]) * pc.scale;
          if (CAP) s = pc.cap * tanh(s / pc.cap);
          sc[h * 4u + uint(u)] = s;
          if (u < cnt) mn = max(mn, s);
        }
        corr[h] = exp(m[h] - mn);
        [[unroll]] for (int u = 0; u < 4; ++u) p[h * 4u + uint(u)] = u < cnt ? exp(sc[h * 4u + uint(u)] - mn) : 0.0;
        l[h] = l[h] * corr[h] + ((p[h * 4u] + p[h * 4u + 1u]) + (p[h * 4u + 2u] + p[h * 4u + 3u]));
        m[h] = mn;
      }
      [[unroll]] for (uint i = 0u; i < NG; ++i) {
        uint g = lane + i * SG;
        if (i < nv && g < gv) {
          vec4 a[QG], c[QG];
          [[unroll]] for (uint h = 0u; h < QG; ++h) {
            a[h] = aa[h * NG + i] * corr[h];
            c[h] = ab[h * NG + i] * corr[h];
          }
          [[unroll]] for (int u = 0; u < 4; ++u) {
            vec4 v0, v1;
            group8(Vc, VDT, vb0 + min(r0 + uint(u), r_last) * vstep, g, pc.Dv, v0, v1);
            [[unroll]] for (uint h = 0u; h < QG; ++h) {
              vec4 na = fma(vec4(p[h * 4u + uint(u)]), v0, a[h]), nc = fma(vec4(p[h * 4u + uint(u)]), v1, c[h]);
              a[h] = u < cnt ? na : a[h];
              c[h] = u < cnt ? nc : c[h];
            }
          }
          [[unroll]] for (uint h = 0u; h < QG; ++h) {
            aa[h * NG + i] = a[h];
            ab[h * NG + i] = c[h];
          }
        }
      }
    }
  }
  [[unroll]] for (uint h = 0u; h < QG; ++h) {
    float inv = 1.0 / l[h];
    uint ob = ob0 + h * pc.Dv;
    [[unroll]] for (uint i = 0u; i < NG; ++i) {
      uint g = lane + i * SG;
      if (i < nv && g < gv) {
        vec4 a = aa[h * NG + i] * inv, b = ab[h * NG + i] * inv;
        float e[8] = float[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
        [[unroll]] for (uint j = 0u; j < 8u; ++j)
          if (VEC || 8u * g + j < pc.Dv) o[ob + 8u * g + j] = e[j];
      }
    }
  }
}
