#version 450
// Gated delta rule, chunked (WY) form, pass 1 of 2 (docs/vulkan.md; the CPU reference is
// cpu/delta_net.cpp `chunked`, the maths qwen3_5.md §2.6). For one chunk of C tokens of one
// sequence and one value head it computes what does not depend on the carried state:
//   γ_i  = Σ_{j<=i} g_j                                  (log decay within the chunk)
//   A_ij = β_i (k_i·k_j) e^{γ_i-γ_j} for j < i,  T = (I + A)^-1
//   U = T (β v),  W = T (β e^γ k)                        (the chunk's values are then U - W S)
//   P_ij = (q_i·k_j) e^{γ_i-γ_j} for j <= i             (attention within the chunk)
// into scratch rows. Chunks are independent, so one dispatch runs a whole group of them; pass 2
// (gated_delta_chunk.comp) walks each sequence's chunks in order with its state.
// The chunks of the sequences with q_len >= min_len (aligned to absolute positions:
// delta_chunks.glsl), numbered in sequence order, are the batch's chunk slots; a dispatch runs slots [w0, w0 + groups) (workgroup x: slot - w0, y: value head),
// slot w's token i in scratch row (w - w0)·C + i (the host bounds a group by the scratch it holds).
#include "delta_chunks.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint C = 64;  // chunk length, 1 .. 64 (one lane per chunk token)
// VEC: q and k read as RGBA32F texels (Dk % 4 == 0, 16-byte aligned; offsets in texels).
layout(constant_id = 1) const bool VEC = false;

layout(set = 0, binding = 0) uniform samplerBuffer Qt;
layout(set = 0, binding = 1) uniform samplerBuffer Kt;
layout(std430, set = 0, binding = 2) readonly buffer Vb { float v[]; };
layout(std430, set = 0, binding = 3) readonly buffer Gb { float g[]; };
layout(std430, set = 0, binding = 4) readonly buffer Bb { float beta[]; };
layout(std430, set = 0, binding = 5) readonly buffer Seqs { int seqs[]; };
// Scratch, [rows, Hv, ...] with rows = groups·C:
layout(std430, set = 0, binding = 6) writeonly buffer GamOut { float gam_out[]; };  // [rows, Hv]
layout(std430, set = 0, binding = 7) writeonly buffer POut { float p_out[]; };      // [rows, Hv, C], j <= i
layout(std430, set = 0, binding = 8) writeonly buffer UOut { float u_out[]; };      // [rows, Hv, Dv]
layout(std430, set = 0, binding = 9) writeonly buffer WOut { float w_out[]; };      // [rows, Hv, Dk]
layout(push_constant) uniform PC {
  uint S, Hk, Hv, Dk, Dv;
  uint q_off, k_off, v_off, g_off, b_off, seqs_off;
  uint min_len;  // sequences shorter than this run the recurrent kernel instead
  uint w0;       // the group's first chunk slot
} pc;

shared float M[C * C];  // A, then T (row-major, C columns)
shared float gs[C], bs[C];

float qk_dot(uint ba, uint bb, bool q_first, out float kk) {
  // Returns (q_a·k_b) when q_first and sets kk = k_a·k_b: one pass over k_b serves both.
  float qk = 0.0;
  kk = 0.0;
  if (VEC) {  // the scalar path's order, one dim at a time (the bits must not depend on alignment)
    for (uint d = 0u; d < pc.Dk / 4u; ++d) {
      vec4 kb = texelFetch(Kt, int(pc.k_off + bb + d)), ka = texelFetch(Kt, int(pc.k_off + ba + d));
      vec4 qa = q_first ? texelFetch(Qt, int(pc.q_off + ba + d)) : vec4(0.0);
      kk += ka.x * kb.x;
      qk += qa.x * kb.x;
      kk += ka.y * kb.y;
      qk += qa.y * kb.y;
      kk += ka.z * kb.z;
      qk += qa.z * kb.z;
      kk += ka.w * kb.w;
      qk += qa.w * kb.w;
    }
  } else {
    for (uint d = 0u; d < pc.Dk; ++d) {
      float kb = texelFetch(Kt, int(pc.k_off + bb + d)).x;
      kk += texelFetch(Kt, int(pc.k_off + ba + d)).x * kb;
      if (q_first) qk += texelFetch(Qt, int(pc.q_off + ba + d)).x * kb;
    }
  }
  return qk;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.y;
  // The chunk: the w-th of those of the sequences this pass runs (uniform in the workgroup).
  uint w = pc.w0 + gl_WorkGroupID.x, t0 = 0u, n = 0u;
  bool found = false;
  for (uint s = 0u; s < pc.S; ++s) {
    int l = seqs[pc.seqs_off + s * 4u + 1u], kv = seqs[pc.seqs_off + s * 4u + 2u];
    if (l < int(pc.min_len) || l <= 0) continue;
    uint nc = delta_chunks(kv, l, C);
    if (w < nc) {
      uvec2 span = delta_chunk_span(kv, l, C, w);
      t0 = uint(seqs[pc.seqs_off + s * 4u]) + span.x;
      n = span.y - span.x;
      found = true;
      break;
    }
    w -= nc;
  }
  if (!found || n == 1u) return;  // a one-token chunk runs in the recurrent kernel (delta_chunks.glsl)
  // The chunk's tokens are t0 .. t0 + n - 1 (n < C for a chunk cut by the sequence's ends).
  const uint r0 = gl_WorkGroupID.x * C;                     // their scratch rows: r0 .. r0 + n - 1
  const uint hk = h / (pc.Hv / pc.Hk);
  const uint kstride = VEC ? pc.Dk / 4u : pc.Dk;             // q/k row in texels
  if (tid < n) {
    gs[tid] = g[pc.g_off + (t0 + tid) * pc.Hv + h];
    bs[tid] = beta[pc.b_off + (t0 + tid) * pc.Hv + h];
  }
  barrier();
  // γ: each lane sums its own prefix in the reference's order (a running sum from token 0).
  float gam = 0.0;
  if (tid < n)
    for (uint j = 0u; j <= tid; ++j) gam += gs[j];
  barrier();
  if (tid < n) {
    gs[tid] = gam;
    gam_out[(r0 + tid) * pc.Hv + h] = gam;
  }
  barrier();
  // A (strictly lower) into M, P (lower with the diagonal) into scratch.
  for (uint e = tid; e < n * n; e += 64u) {
    uint i = e / n, j = e % n;
    if (j > i) continue;
    float kk;
    float qk = qk_dot((t0 + i) * pc.Hk * kstride + hk * kstride, (t0 + j) * pc.Hk * kstride + hk * kstride, true, kk);
    float d = exp(gs[i] - gs[j]);
    if (j < i) M[i * C + j] = bs[i] * kk * d;
    p_out[((r0 + i) * pc.Hv + h) * C + j] = qk * d;
  }
  barrier();
  // T = (I + A)^-1 by forward substitution, lane c holding column c: T_ic = -Σ_{c<=j<i} A_ij T_jc.
  // A lane reads only its own column, so the rows need no barriers.
  // The loops run from j = 0 (tc[j] is 0 above the diagonal) so every lane reads the same M
  // element and tc index at once: uniform addresses (llvmpipe turns a lane-varying shared or
  // local-array address into a loop over the lanes).
  float tc[C];
  for (uint i = 0u; i < n; ++i) {
    float acc = 0.0;
    for (uint j = 0u; j < i; ++j) acc += M[i * C + j] * tc[j];
    tc[i] = i < tid ? 0.0 : i == tid ? 1.0 : -acc;
  }
  barrier();  // every lane has read A
  if (tid < n)
    for (uint i = 0u; i < n; ++i) M[i * C + tid] = tc[i];
  barrier();
  // U = T (β v) for the Dv value columns, W = T (β e^γ k) for the Dk key columns: a lane per
  // column, the column's right-hand side staged in registers.
  for (uint col = tid; col < pc.Dv + pc.Dk; col += 64u) {
    const bool is_u = col < pc.Dv;
    const uint cc = is_u ? col : col - pc.Dv;
    float x[C];
    for (uint j = 0u; j < n; ++j) {
      if (is_u) {
        x[j] = bs[j] * v[pc.v_off + ((t0 + j) * pc.Hv + h) * pc.Dv + cc];
      } else {
        uint kb = (t0 + j) * pc.Hk * kstride + hk * kstride;
        float kv = VEC ? texelFetch(Kt, int(pc.k_off + kb + cc / 4u))[cc % 4u] : texelFetch(Kt, int(pc.k_off + kb + cc)).x;
        x[j] = (bs[j] * exp(gs[j])) * kv;
      }
    }
    for (uint i = 0u; i < n; ++i) {
      float acc = 0.0;
      for (uint j = 0u; j <= i; ++j) acc += M[i * C + j] * x[j];
      if (is_u) u_out[((r0 + i) * pc.Hv + h) * pc.Dv + cc] = acc;
      else w_out[((r0 + i) * pc.Hv + h) * pc.Dk + cc] = acc;
    }
  }
}
