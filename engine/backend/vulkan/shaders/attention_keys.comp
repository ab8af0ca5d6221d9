#version 450
// Paged attention for a ragged batch, the default kernel on every device (KernelPolicy::
// attention_split_keys; attention_dims.comp is the alternative whose lanes keep only a few
// registers each): one subgroup per (token, QG query heads of one KV head). The lanes split the token's keys: lane l takes keys lo + l, lo + l + SG, ... and runs its own
// online softmax over them with whole K and V rows (no cross-lane reduction per key); at the end
// the lanes' partial results are merged (max, rescale, subgroupAdd). Which lane gets which key
// depends only on the token's own window [lo, pos], so a sequence's result is the same alone or in
// any batch (batch invariant).
//
// attention_dims.comp splits each key's dims over the lanes and reduced q·k with subgroupAdd once
// per key: a 4096-key f16 decode (Hq 16, Hkv 8, D 128) took 3.0-3.3 ms on lavapipe, ~585 cycles
// per key and workgroup, and was neither memory bound (keys re-read from cache: same time) nor
// bound by the subgroupAdd (removed: same time) but by the serial chain per key.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KDT = 0;  // cache dtypes: 0 f32, 1 f16, 2 bf16, 3 kv_q8, 4 kv_q4
layout(constant_id = 2) const uint VDT = 0;
// VEC: Dk, Dv multiples of 8, 16-byte aligned cache rows and q: an 8-dim group is read as 1
// (16-bit) or 2 (f32) texels and q 4 dims per texel; otherwise element by element (dims past D
// read as 0). kv_q8 / kv_q4 rows (D % 8 == 0, 4-byte aligned) are always read by 8-dim groups
// (kv_load8: two words of int8 or one of nibbles, and the group's scale).
layout(constant_id = 3) const bool VEC = false;
// 8-dim groups of a K row (ceil(Dk / 8)) and of a V row: every lane holds q and its accumulators
// for all of them, so the loops over dims unroll (lavapipe keeps arrays indexed by a loop over a
// push constant in per-lane memory).
layout(constant_id = 4) const uint GK = 16;
layout(constant_id = 7) const uint GV = 16;
// PF (lavapipe): each pass also touches the rows PF passes ahead. The lanes' keys are 2 KB apart
// (cells interleave the KV heads) and a gather trains no hardware prefetcher, so without it a
// 4096-key f16 decode stalled on memory: 2.3-2.8 ms, 1.3-1.7 ms with every key hot in cache, 1.7-1.9
// ms with PF 1-4 (2 here). 0 on GPUs.
layout(constant_id = 8) const uint PF = 0;
// Keys per lane and pass (KU): one online-softmax update and one rescale of the accumulators for
// all of them.
layout(constant_id = 9) const uint KU = 1;
// Query tokens per workgroup (TQ, prefill): each key's K/V rows are fetched once for the TQ
// tokens' QG heads. A tile whose tokens are in different sequences runs one round per token.
layout(constant_id = 10) const uint TQ = 1;
// kv_q8 K / V rows start 8-byte aligned (kv_values8 reads a group in one fetch).
layout(constant_id = 11) const bool KA8 = false;
layout(constant_id = 12) const bool VA8 = false;
// Bytes of a K / V row (the prefetch reads a second texel 128 bytes in when the row is longer;
// for the kv formats the values' bytes, without the scales).
const uint KROW = GK * (KDT == 0u ? 32u : KDT == 3u ? 8u : KDT == 4u ? 4u : 16u);
const uint VROW = GV * (VDT == 0u ? 32u : VDT == 3u ? 8u : VDT == 4u ? 4u : 16u);
// Head dims as the loads see them: for the kv formats D % 8 == 0, so D is 8·GK / 8·GV, a constant:
// the group size, the scales' place and the row size fold, and the 8-dim groups sharing a scale
// read it once (a 4096-key decode at D 128 on lavapipe: kv_q8 0.76x f16's rate with D from the
// push constants).
#define DK_LOAD (KDT >= 3u ? 8u * GK : pc.Dk)
#define DV_LOAD (VDT >= 3u ? 8u * GV : pc.Dv)
// Query heads per workgroup (GQA: heads that share a KV head), so each key's K and V rows are
// fetched once for all of them. Every head's arithmetic is the same as alone.
layout(constant_id = 5) const uint QG = 1;
// A logit softcap (pc.cap > 0). A specialization constant: behind a push-constant test llvmpipe
// evaluates the tanh for every score anyway (masked), softcap or not.
layout(constant_id = 6) const bool CAP = false;

layout(set = 0, binding = 0) uniform samplerBuffer Q;  // RGBA32F (VEC) or R32F
layout(set = 0, binding = 1) uniform usamplerBuffer Kc;
layout(set = 0, binding = 2) uniform usamplerBuffer Vc;
layout(set = 0, binding = 3) uniform usamplerBuffer Bt;  // R32UI: the block table
layout(std430, set = 0, binding = 4) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 6) buffer Err { uint err[]; };  // err[3]: more keys than max_keys; err[7]: a sink
#include "kvload.glsl"

layout(push_constant) uniform PC {
  uint N, Hq, Dk, Dv;
  uint BS, Hkv, S, MB;
  uint q_off, k_off, v_off, bt_off, seqs_off, o_off;  // elements (k/v: of the cache dtype or kv bytes; q: of its view)
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
  lo = vec4(unpackHalf2x16(t.x), unpackHalf2x16(t.y));
  hi = vec4(unpackHalf2x16(t.z), unpackHalf2x16(t.w));
}

// The RGBA32UI texel holding element e (kv dtypes: byte e) of a cache of dtype dt.
uint texel_of(uint dt, uint e) { return dt == 0u ? e >> 2 : dt >= 3u ? e >> 4 : e >> 3; }

// Dims 8g..8g+7 of a cache row starting at element `row` (D dims; VEC: D % 8 == 0, aligned; kv
// dtypes: byte `row`, D % 8 == 0, `s` the group's scale, read once per scale group by the caller).
void group8(usamplerBuffer buf, uint dt, uint row, uint g, uint D, float s, bool a8, out vec4 lo, out vec4 hi) {
  if (dt >= 3u) {
    kv_values8(buf, dt, row, g, s, a8, lo, hi);
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
  // kv dtypes: 8-dim groups per scale (constants once specialized).
  uint kspan = KDT >= 3u ? kv_group_of(DK_LOAD) / 8u : 1u, vspan = VDT >= 3u ? kv_group_of(DV_LOAD) / 8u : 1u;
  const float NEG_INF = -1.0 / 0.0;
  uint groups_per_token = pc.Hq / QG;
  uint item = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  uint tiles = (pc.N + TQ - 1u) / TQ;
  if (item >= tiles * groups_per_token) return;
  uint t0 = (item / groups_per_token) * TQ, h0 = (item % groups_per_token) * QG;  // heads h0 .. h0+QG-1
  uint lane = gl_LocalInvocationID.x;
  uint hk = h0 / (pc.Hq / pc.Hkv);

  // The tile's tokens t0 .. t0+TQ-1: sequence (-1: none, or past N), position, first visible key.
  int seq[TQ], pos[TQ], lo[TQ];
  [[unroll]] for (uint q = 0u; q < TQ; ++q) seq[q] = -1, pos[q] = 0;
  for (uint s = 0u; s < pc.S; ++s) {
    int qs = seqs[pc.seqs_off + s * 4u], ql = seqs[pc.seqs_off + s * 4u + 1u];
    int kv = seqs[pc.seqs_off + s * 4u + 2u];
    [[unroll]] for (uint q = 0u; q < TQ; ++q) {
      int t = int(t0 + q);
      if (t < int(pc.N) && t >= qs && t < qs + ql) {
        seq[q] = int(s);
        pos[q] = kv - ql + (t - qs);
      }
    }
  }
  int s0 = -1;
  bool same = true;  // every token of the tile in one sequence (or none): one round for all
  [[unroll]] for (uint q = 0u; q < TQ; ++q) {
    lo[q] = pc.window > 0 ? max(0, pos[q] - pc.window + 1) : 0;
    if (seq[q] >= 0) {
      if (pc.max_keys != 0u && pos[q] - lo[q] + 1 > int(pc.max_keys) && lane == 0u) err[3] = 1u;
      same = same && (s0 < 0 || seq[q] == s0);
      s0 = s0 < 0 ? seq[q] : s0;
    } else if (t0 + q < pc.N) {  // rows outside every sequence produce 0
      uint ob = pc.o_off + ((t0 + q) * pc.Hq + h0) * pc.Dv;
      for (uint d = lane; d < QG * pc.Dv; d += SG) o[ob + d] = 0.0;
    }
  }
  if (s0 < 0) return;

  // q of each token's QG heads, the same in every lane. [token][head][group]
  vec4 qa[TQ * QG * GK], qb[TQ * QG * GK];
  [[unroll]] for (uint q = 0u; q < TQ; ++q)
    [[unroll]] for (uint h = 0u; h < QG; ++h) {
      uint qbase = pc.q_off + (min(t0 + q, pc.N - 1u) * pc.Hq + h0 + h) * pc.Dk;
      [[unroll]] for (uint g = 0u; g < GK; ++g) {
        uint i = (q * QG + h) * GK + g;
        if (VEC) {
          qa[i] = texelFetch(Q, int((qbase >> 2) + 2u * g));
          qb[i] = texelFetch(Q, int((qbase >> 2) + 2u * g + 1u));
        } else {
          float e[8];
          [[unroll]] for (uint j = 0u; j < 8u; ++j) {
            float v = texelFetch(Q, int(qbase + min(8u * g + j, pc.Dk - 1u))).x;
            e[j] = 8u * g + j < pc.Dk ? v : 0.0;
          }
          qa[i] = vec4(e[0], e[1], e[2], e[3]);
          qb[i] = vec4(e[4], e[5], e[6], e[7]);
        }
      }
    }
  vec4 aa[TQ * QG * GV], ab[TQ * QG * GV];  // this lane's unnormalized outputs [token][head][group]
  float m[TQ * QG], l[TQ * QG];              // this lane's running max and sum of exp
  [[unroll]] for (uint i = 0u; i < TQ * QG * GV; ++i) aa[i] = vec4(0.0), ab[i] = vec4(0.0);
  [[unroll]] for (uint i = 0u; i < TQ * QG; ++i) m[i] = NEG_INF, l[i] = 0.0;

  // Key j goes to lane j % SG, as key (j / SG) % KU of pass j / STEP, counted from key 0 whatever
  // the token's window: which keys share a lane and a softmax update depends on each token's own
  // [lo, pos] alone, so a token's bits are the same alone, in a tile of TQ, or in any batch.
  const uint STEP = KU * SG;
  uint pf = 0u;
  // One round for a tile in one sequence; else one round per token (rare: a tile across a
  // sequence boundary), each a pass over that token's keys only.
  uint rounds = same ? 1u : TQ;
  for (uint rd = 0u; rd < rounds; ++rd) {
    bool act[TQ];
    int rlo = 0x7fffffff, rhi = -1, rs = -1;
    [[unroll]] for (uint q = 0u; q < TQ; ++q) {
      act[q] = seq[q] >= 0 && (same || q == rd);
      if (act[q]) rlo = min(rlo, lo[q]), rhi = max(rhi, pos[q]), rs = seq[q];
    }
    if (rs < 0) continue;
    uint bt_row = pc.bt_off + uint(rs) * pc.MB;
    // The lane's keys in a pass, j = j0 + u·SG + lane for u < KU, as (block b, cell r in it),
    // advanced by STEP keys per pass without a division. Keys outside [rlo, rhi] read key rhi (their
    // weight is 0; blocks before a window may be freed): straight-line loads.
    int jstart = rlo / int(STEP) * int(STEP);
    uint b[KU], r[KU], bn[KU], rn[KU];  // this pass's keys and the keys PF passes ahead
    [[unroll]] for (uint u = 0u; u < KU; ++u) {
      uint j = uint(jstart) + u * SG + lane, jn = j + PF * STEP;
      b[u] = j / pc.BS, r[u] = j % pc.BS, bn[u] = jn / pc.BS, rn[u] = jn % pc.BS;
    }
    const uint db = STEP / pc.BS, dr = STEP % pc.BS;
    const uint b_last = uint(rhi) / pc.BS, r_last = uint(rhi) % pc.BS;
    // Loop passes: (keys + STEP - 1) / STEP + 1 per round, under llvmpipe's 65535 per invocation
    // (the host's max_keys keeps to it for TQ rounds, KernelPolicy::loop_budget).
    for (int j0 = jstart; j0 <= rhi; j0 += int(STEP)) {
      bool inr[KU];
      uint kb[KU], vb[KU];
      [[unroll]] for (uint u = 0u; u < KU; ++u) {
        int j = j0 + int(u * SG + lane);
        inr[u] = j >= rlo && j <= rhi;
        uint cell = texelFetch(Bt, int(bt_row + (inr[u] ? b[u] : b_last))).x * pc.BS + (inr[u] ? r[u] : r_last);
        kb[u] = cache_row(KDT, pc.k_off, cell * pc.Hkv + hk, DK_LOAD);
        vb[u] = cache_row(VDT, pc.v_off, cell * pc.Hkv + hk, DV_LOAD);
        if (PF != 0u) {  // prefetch: the first 256 bytes of the K and V rows PF passes ahead
          bool in_seq = j + int(PF * STEP) <= rhi;
          uint cn = texelFetch(Bt, int(bt_row + (in_seq ? bn[u] : b_last))).x * pc.BS + (in_seq ? rn[u] : r_last);
          uint kn = texel_of(KDT, cache_row(KDT, pc.k_off, cn * pc.Hkv + hk, DK_LOAD));
          uint vn = texel_of(VDT, cache_row(VDT, pc.v_off, cn * pc.Hkv + hk, DV_LOAD));
          uint w = texelFetch(Kc, int(kn)).x ^ texelFetch(Vc, int(vn)).x;
          if (VEC && KROW > 128u) w ^= texelFetch(Kc, int(kn + 8u)).x;  // VEC: KROW is the row's size
          if (VEC && VROW > 128u) w ^= texelFetch(Vc, int(vn + 8u)).x;
          pf ^= w;
        }
      }
      // q·k for every token, head and key: four partial chains each (groups g % 4), summed in a
      // fixed order.
      float part[KU * TQ * QG * 4];
      [[unroll]] for (uint i = 0u; i < KU * TQ * QG * 4u; ++i) part[i] = 0.0;
      [[unroll]] for (uint u = 0u; u < KU; ++u) {
        float ks = 0.0;  // kv dtypes: the scale of the 8-dim groups from g on (kspan of them)
        [[unroll]] for (uint g = 0u; g < GK; ++g) {
          if (KDT >= 3u && g % kspan == 0u) ks = kv_scale(Kc, KDT, kb[u], g, DK_LOAD);
          vec4 k0, k1;
          group8(Kc, KDT, kb[u], g, DK_LOAD, ks, KA8, k0, k1);
          [[unroll]] for (uint qh = 0u; qh < TQ * QG; ++qh) {
            if (!act[qh / QG]) continue;  // uniform: a round of another token's sequence
            uint pi = (u * TQ * QG + qh) * 4u + g % 4u;
            float a = part[pi];
            vec4 x = qa[qh * GK + g], y = qb[qh * GK + g];
            a = fma(x.x, k0.x, a);
            a = fma(x.y, k0.y, a);
            a = fma(x.z, k0.z, a);
            a = fma(x.w, k0.w, a);
            a = fma(y.x, k1.x, a);
            a = fma(y.y, k1.y, a);
            a = fma(y.z, k1.z, a);
            a = fma(y.w, k1.w, a);
            part[pi] = a;
          }
        }
      }
      // One online-softmax update per token and head for the pass's KU keys: the running max over
      // them, one rescale of the accumulators, their weighted values added in key order.
      float p[KU * TQ * QG], corr[TQ * QG];
      bool vis[KU * TQ];  // key u visible to token q
      [[unroll]] for (uint q = 0u; q < TQ; ++q) {
        if (!act[q]) continue;
        [[unroll]] for (uint u = 0u; u < KU; ++u) {
          int j = j0 + int(u * SG + lane);
          vis[u * TQ + q] = j >= lo[q] && j <= pos[q];
        }
        [[unroll]] for (uint h = 0u; h < QG; ++h) {
          uint qh = q * QG + h;
          float sc[KU];
          float mn = m[qh];
          [[unroll]] for (uint u = 0u; u < KU; ++u) {
            uint pi = (u * TQ * QG + qh) * 4u;
            float s = ((part[pi] + part[pi + 1u]) + (part[pi + 2u] + part[pi + 3u])) * pc.scale;
            if (CAP) s = pc.cap * tanh(s / pc.cap);
            sc[u] = vis[u * TQ + q] ? s : NEG_INF;
            mn = max(mn, sc[u]);
          }
          corr[qh] = mn == m[qh] ? 1.0 : exp(m[qh] - mn);  // no NaN from -inf - -inf
          float lsum = l[qh] * corr[qh];
          [[unroll]] for (uint u = 0u; u < KU; ++u) {
            p[u * TQ * QG + qh] = vis[u * TQ + q] ? exp(sc[u] - mn) : 0.0;
            lsum += p[u * TQ * QG + qh];
          }
          l[qh] = lsum;
          m[qh] = mn;
        }
      }
      float vs[KU];  // kv dtypes: each key's scale of the 8-dim groups from g on (vspan of them)
      [[unroll]] for (uint g = 0u; g < GV; ++g) {
        vec4 v0[KU], v1[KU];
        [[unroll]] for (uint u = 0u; u < KU; ++u) {
          if (VDT >= 3u && g % vspan == 0u) vs[u] = kv_scale(Vc, VDT, vb[u], g, DV_LOAD);
          group8(Vc, VDT, vb[u], g, DV_LOAD, VDT >= 3u ? vs[u] : 0.0, VA8, v0[u], v1[u]);
        }
        [[unroll]] for (uint qh = 0u; qh < TQ * QG; ++qh) {
          if (!act[qh / QG]) continue;
          vec4 x = aa[qh * GV + g] * corr[qh], y = ab[qh * GV + g] * corr[qh];
          [[unroll]] for (uint u = 0u; u < KU; ++u) {
            vec4 nx = fma(vec4(p[u * TQ * QG + qh]), v0[u], x), ny = fma(vec4(p[u * TQ * QG + qh]), v1[u], y);
            // In a tile, a lane's key may be another token's (later, or before this token's window):
            // its weight is 0, but 0 x inf would still make NaN; skip it, so a token's bits stay
            // those of running alone whatever the cache holds. (Alone, such lanes read the token's
            // own last key.)
            bool keep = TQ > 1u && !vis[u * TQ + qh / QG];
            x = keep ? x : nx;
            y = keep ? y : ny;
          }
          aa[qh * GV + g] = x;
          ab[qh * GV + g] = y;
        }
      }
      [[unroll]] for (uint u = 0u; u < KU; ++u) {
        b[u] += db;
        r[u] += dr;
        if (r[u] >= pc.BS) {
          r[u] -= pc.BS;
          ++b[u];
        }
        if (PF != 0u) {
          bn[u] += db;
          rn[u] += dr;
          if (rn[u] >= pc.BS) {
            rn[u] -= pc.BS;
            ++bn[u];
          }
        }
      }
    }
  }

  if (PF != 0u && lane == 0u) err[7] = pf;  // keeps the prefetch loads (err[7] is never read)
  // Merge the lanes: rescale each lane's sums to the common max, then add them up.
  [[unroll]] for (uint q = 0u; q < TQ; ++q) {
    if (seq[q] < 0) continue;
    [[unroll]] for (uint h = 0u; h < QG; ++h) {
      uint qh = q * QG + h;
      float mx = subgroupMax(m[qh]);
      float f = m[qh] == NEG_INF ? 0.0 : exp(m[qh] - mx);  // a lane without keys adds nothing
      float inv = 1.0 / subgroupAdd(l[qh] * f);
      uint ob = pc.o_off + ((t0 + q) * pc.Hq + h0 + h) * pc.Dv;
      [[unroll]] for (uint g = 0u; g < GV; ++g) {
        vec4 a = subgroupAdd(aa[qh * GV + g] * f) * inv, c = subgroupAdd(ab[qh * GV + g] * f) * inv;
        if (lane == g % SG) {
          float e[8] = float[8](a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w);
          [[unroll]] for (uint i = 0u; i < 8u; ++i)
            if (VEC || 8u * g + i < pc.Dv) o[ob + 8u * g + i] = e[i];
        }
      }
    }
  }
}
