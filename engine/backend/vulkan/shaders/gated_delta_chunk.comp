#version 450
// Gated delta rule, chunked (WY) form, pass 2 of 2: one workgroup per (sequence, value head, TB
// value columns) holds that slice of the state, S[:, b0 .. b0 + TB), in shared memory and walks the
// sequence's chunks in order, with pass 1's γ, P, U and W (gated_delta_prep.comp):
//   V' = U - W S                                          (the chunk's corrected values)
//   O_i = e^{γ_i} S^T q_i + Σ_{j<=i} P_ij V'_j
//   S <- e^{γ_last} S + Σ_j (k_j e^{γ_last-γ_j}) V'_j^T
// Within a chunk every token's row is independent given S, so the lanes split tokens x columns
// (and key dims x columns for the state update) instead of walking tokens one at a time as the
// recurrent kernel does. A dispatch runs the chunks whose slots (gated_delta_prep.comp) lie in
// [w_lo, w_hi), each sequence's in order, for the sequences with q_len >= min_len; their scratch
// rows count from slot w0 (the group pass 1 filled). The host splits a batch's slots into groups
// (the scratch they fill) and rounds (llvmpipe's loop limit); the state carries through `st`.
// Workgroup (x: value head x column tile, y: sequence).
#extension GL_EXT_control_flow_attributes : enable
#include "delta_chunks.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint C = 64;    // chunk length, 1 .. 64
layout(constant_id = 1) const uint DK = 128;  // key head dim (<= 256): the state tile's rows
layout(constant_id = 2) const uint TB = 16;   // value columns per workgroup, a divisor of 64
// VEC: q and k read as RGBA32F texels (DK % 4 == 0, 16-byte aligned; offsets in texels).
layout(constant_id = 3) const bool VEC = false;
const uint RS = 64u / TB;  // lanes per column: rows (tokens, key dims) are split RS ways

layout(set = 0, binding = 0) uniform samplerBuffer Qt;
layout(set = 0, binding = 1) uniform samplerBuffer Kt;
layout(set = 0, binding = 2) uniform samplerBuffer Gam;  // scratch [rows, Hv]
layout(set = 0, binding = 3) uniform samplerBuffer Pm;   // [rows, Hv, C]
layout(set = 0, binding = 4) uniform samplerBuffer Um;   // [rows, Hv, Dv]
layout(set = 0, binding = 5) uniform samplerBuffer Wm;   // [rows, Hv, DK] (RGBA32F when VEC)
layout(std430, set = 0, binding = 6) buffer State { float st[]; };
layout(std430, set = 0, binding = 7) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 8) writeonly buffer Out { float o[]; };
layout(std430, set = 0, binding = 9) buffer Err { uint err[]; };  // err[4]: a slot outside the state
layout(push_constant) uniform PC {
  uint S, Hk, Hv, Dv;
  uint q_off, k_off, st_off, seqs_off, o_off;
  uint min_len, w0, w_lo, w_hi;
  // Slots [slot_lo, slot_hi) only, `st` bound from slot_lo (a state beyond one storage binding runs
  // in windows of slots, as in gated_delta.comp).
  uint slot_lo, slot_hi, n_slots;
} pc;

shared float Ss[DK * TB];  // the state slice, [key dim][column]
shared float Vs[C * TB];   // V' of the chunk, [token][column]
shared float gm[C], ek[C]; // γ_i and e^{γ_last - γ_i}

void main() {
  const uint tid = gl_LocalInvocationID.x, s = gl_WorkGroupID.y;
  const uint tiles = (pc.Dv + TB - 1u) / TB;
  const uint h = gl_WorkGroupID.x / tiles, b0 = (gl_WorkGroupID.x % tiles) * TB;
  const int l = seqs[pc.seqs_off + s * 4u + 1u], kv = seqs[pc.seqs_off + s * 4u + 2u];
  if (l < int(pc.min_len) || l <= 0) return;  // the recurrent kernel's sequence (or none)
  const uint first = uint(seqs[pc.seqs_off + s * 4u]);
  const uint slot = uint(seqs[pc.seqs_off + s * 4u + 3u]);
  if (slot >= pc.n_slots) {  // (negative ids too): reported, the sequence skipped
    if (tid == 0u) err[4] = 1u;
    return;
  }
  if (slot < pc.slot_lo || slot >= pc.slot_hi) return;  // another window's sequence
  // The sequence's first chunk slot: the chunks of the chunked sequences before it.
  uint base = 0u;
  for (uint p = 0u; p < s; ++p) {
    int lp = seqs[pc.seqs_off + p * 4u + 1u];
    if (lp >= int(pc.min_len) && lp > 0) base += delta_chunks(seqs[pc.seqs_off + p * 4u + 2u], lp, C);
  }
  const uint nc = delta_chunks(kv, l, C);
  const uint lo = max(pc.w_lo, base), hi = min(pc.w_hi, base + nc);
  if (lo >= hi) return;  // none of the sequence's chunks in this dispatch: state untouched
  // One-token chunks (the first, the last) run in the recurrent kernel, before and after this pass.
  const uint c_lo = lo - base + (lo == base && delta_first_lone(kv, l, C) ? 1u : 0u);
  const uint c_hi = hi - base - (hi == base + nc && nc >= 2u && delta_last_lone(kv, l, C) ? 1u : 0u);
  if (c_lo >= c_hi) return;
  const uint hk = h / (pc.Hv / pc.Hk);
  const uint kstride = VEC ? DK / 4u : DK;  // q/k row in texels
  const uint b = tid % TB, r0 = tid / TB;
  const bool col_ok = b0 + b < pc.Dv;
  const uint sb = pc.st_off + ((slot - pc.slot_lo) * pc.Hv + h) * DK * pc.Dv + b0 + b;
  // A sequence at its first step (kv_len == q_len) starts from zeros: its slot may hold the state
  // of the slot's previous sequence.
  const bool fresh = c_lo == 0u && kv == l;
  for (uint a = r0; a < DK; a += RS) Ss[a * TB + b] = col_ok && !fresh ? st[sb + a * pc.Dv] : 0.0;
  barrier();
  for (uint c = c_lo; c < c_hi; ++c) {
    const uvec2 span = delta_chunk_span(kv, l, C, c);
    const uint n = span.y - span.x, t0 = first + span.x;      // the chunk's tokens in the batch
    const uint sr = (base + c - pc.w0) * C;                   // and its scratch rows
    if (tid < n) {
      float gi = texelFetch(Gam, int((sr + tid) * pc.Hv + h)).x;
      gm[tid] = gi;
      ek[tid] = exp(texelFetch(Gam, int((sr + n - 1u) * pc.Hv + h)).x - gi);
    }
    barrier();
    // V'_i and the state's share of O_i for tokens i = r0, r0 + RS, ... (one column each).
    float ob[C / RS + 1u];
    [[unroll]] for (uint m = 0u; m * RS < C; ++m) {
      const uint i = r0 + m * RS;
      ob[m] = 0.0;
      if (i < n) {
        const uint row = (sr + i) * pc.Hv + h;  // scratch row of token i
        const uint qb = pc.q_off + ((t0 + i) * pc.Hk + hk) * kstride;
        float ws = 0.0, qs = 0.0;
        if (VEC) {  // the scalar path's order, one dim at a time (the bits must not depend on alignment)
          for (uint a4 = 0u; a4 < DK / 4u; ++a4) {
            vec4 wv = texelFetch(Wm, int(row * (DK / 4u) + a4)), qv = texelFetch(Qt, int(qb + a4));
            float s0 = Ss[(4u * a4) * TB + b], s1 = Ss[(4u * a4 + 1u) * TB + b], s2 = Ss[(4u * a4 + 2u) * TB + b],
                  s3 = Ss[(4u * a4 + 3u) * TB + b];
            ws += wv.x * s0;
            qs += qv.x * s0;
            ws += wv.y * s1;
            qs += qv.y * s1;
            ws += wv.z * s2;
            qs += qv.z * s2;
            ws += wv.w * s3;
            qs += qv.w * s3;
          }
        } else {
          for (uint a = 0u; a < DK; ++a) {
            float sa = Ss[a * TB + b];
            ws += texelFetch(Wm, int(row * DK + a)).x * sa;
            qs += texelFetch(Qt, int(qb + a)).x * sa;
          }
        }
        Vs[i * TB + b] = (col_ok ? texelFetch(Um, int(row * pc.Dv + b0 + b)).x : 0.0) - ws;
        ob[m] = exp(gm[i]) * qs;
      }
    }
    barrier();
    // O_i = state share + Σ_{j<=i} P_ij V'_j.
    [[unroll]] for (uint m = 0u; m * RS < C; ++m) {
      const uint i = r0 + m * RS;
      if (i < n && col_ok) {
        const uint row = (sr + i) * pc.Hv + h;
        float acc = ob[m];
        for (uint j = 0u; j <= i; ++j) acc += texelFetch(Pm, int(row * C + j)).x * Vs[j * TB + b];
        o[pc.o_off + ((t0 + i) * pc.Hv + h) * pc.Dv + b0 + b] = acc;
      }
    }
    // S <- e^{γ_last} S + Σ_j (k_j e^{γ_last - γ_j}) V'_j, each lane its own key dims of its column
    // (the other lanes' reads of Ss ended at the barrier above).
    const float el = exp(gm[n - 1u]);
    for (uint a = r0; a < DK; a += RS) {
      float acc = Ss[a * TB + b] * el;
      for (uint j = 0u; j < n; ++j) {
        const uint kb = pc.k_off + ((t0 + j) * pc.Hk + hk) * kstride;
        float ka = VEC ? texelFetch(Kt, int(kb + a / 4u))[a % 4u] : texelFetch(Kt, int(kb + a)).x;
        acc += (ka * ek[j]) * Vs[j * TB + b];
      }
      Ss[a * TB + b] = acc;
    }
    barrier();
  }
  if (col_ok)
    for (uint a = r0; a < DK; a += RS) st[sb + a * pc.Dv] = Ss[a * TB + b];
}
