#version 450
// Gated delta rule, recurrent form, for both decode and prefill: one invocation per (sequence,
// value head, NC value columns) holding the state columns S[:, dv] (Dk values each) in registers:
//   S <- e^g S;  u = S^T k;  S <- S + k (beta (v - u))^T;  o = S^T q.
// Columns are independent, so this is exact to the recurrence. Sequences with q_len >= chunk_min
// run the chunked form instead (gated_delta_prep.comp, gated_delta_chunk.comp), all but their
// one-token chunks, which this kernel runs in a dispatch before the chunked passes (a first chunk)
// and one after them (a last chunk): a one-token chunk is a step of the recurrence. One dispatch runs each
// sequence's tokens [t_begin, t_begin + t_count): the host splits long prefills into rounds that
// carry the state through `st`, because llvmpipe ends loops after 65535 iterations per invocation
// (KernelPolicy::loop_budget).
// bench_ops "GATED_DELTA (Qwen3.5 layer)", 32 value heads of 128, per layer on lavapipe: q/k
// through texel views instead of SSBOs took a decode token 2.38 -> 1.90 ms and a 256-token
// prefill 348 -> 211 ms; DK as a specialization constant then 1.90 -> 1.48 ms and 211 -> 64 ms;
// VEC (4 dims per fetch) 1.48 -> 1.19 ms and 64 -> 37.5 ms; NC = 4 columns per invocation and
// STV 1.19 -> 0.79 ms and 37.6 -> 21.5 ms.
// Workgroups of one head (uniform q/k addresses) made no difference there.
#extension GL_EXT_control_flow_attributes : enable
#include "delta_chunks.glsl"
layout(local_size_x = 64) in;
// DK: the key head dim as a specialization constant (0: read pc.Dk). With it the loops over the
// state column unroll and col[] is indexed statically, so lavapipe keeps it in registers and
// stack slots instead of a per-lane gather/scatter array.
layout(constant_id = 0) const uint DK = 0;
// VEC: q and k read as RGBA32F texels, 4 keys dims per fetch (DK % 4 == 0, 16-byte aligned; the
// q/k offsets are then in texels). The arithmetic is the scalar path's, in the same order.
layout(constant_id = 1) const bool VEC = false;
// NC: value columns per invocation (Dv % NC == 0; 1 when DK is 0), so each q/k texel fetched per
// token serves NC columns. Every column's arithmetic is the NC = 1 sequence: the result does not
// depend on NC.
layout(constant_id = 2) const uint NC = 1;
// STV (NC = 4, state 16-byte aligned): the state is read through St, an RGBA32F view of `st`, one
// texel per key dim for the invocation's 4 columns (the SSBO reads are a loop over the lanes). It
// is still written through the SSBO; each invocation reads its own columns before writing them.
layout(constant_id = 3) const bool STV = false;
layout(set = 0, binding = 8) uniform samplerBuffer St;  // unused (a dummy view) unless STV
layout(std430, set = 0, binding = 9) buffer Err { uint err[]; };  // err[4]: a slot outside the state
const uint MAXDK = 256u;

// q and k through R32F texel views: lavapipe runs an SSBO load as a loop over the lanes, a texel
// fetch as one gather.
layout(set = 0, binding = 0) uniform samplerBuffer Qt;
layout(set = 0, binding = 1) uniform samplerBuffer Kt;
layout(std430, set = 0, binding = 2) readonly buffer Vb { float v[]; };
layout(std430, set = 0, binding = 3) readonly buffer Gb { float g[]; };
layout(std430, set = 0, binding = 4) readonly buffer Bb { float beta[]; };
layout(std430, set = 0, binding = 5) buffer State { float st[]; };
layout(std430, set = 0, binding = 6) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Out { float o[]; };
layout(push_constant) uniform PC {
  uint S, Hk, Hv, Dk, Dv;
  uint q_off, k_off, v_off, g_off, b_off, st_off, seqs_off, o_off;
  uint t_begin, t_count;
  // Slots [slot_lo, slot_hi) only, `st` bound from slot_lo (a state beyond one storage binding runs
  // in windows of slots); the St view starts at the whole state, stv_off elements in.
  uint slot_lo, slot_hi, stv_off;
  uint n_slots;  // slots in the whole state
  uint chunk_min;  // sequences with q_len >= chunk_min run the chunked form instead, but for ...
  uint lone;       // ... their one-token chunks (delta_chunks.glsl): 0 the first, 1 the last
  uint C;          // the chunk length
} pc;

void main() {
  // Columns dv0 .. dv0 + NC - 1 of one (sequence, value head): lanes of a subgroup share the head,
  // so every q/k texel fetched per token serves NC columns.
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  uint groups = pc.Dv / NC;
  if (i >= pc.S * pc.Hv * groups) return;
  uint dv0 = (i % groups) * NC, t0 = i / groups;
  uint h = t0 % pc.Hv, s = t0 / pc.Hv;
  uint hk = h / (pc.Hv / pc.Hk);
  uint q_start = uint(seqs[pc.seqs_off + s * 4u]), q_len = uint(seqs[pc.seqs_off + s * 4u + 1u]);
  uint kv_len = uint(seqs[pc.seqs_off + s * 4u + 2u]), slot = uint(seqs[pc.seqs_off + s * 4u + 3u]);
  // The sequence's tokens this kernel runs: all of a recurrent sequence's (in the first dispatch),
  // or a chunked sequence's one-token first or last chunk.
  uint a = 0u, b = q_len;
  if (q_len >= pc.chunk_min) {
    if (pc.lone == 0u && delta_first_lone(int(kv_len), int(q_len), pc.C)) b = 1u;
    else if (pc.lone == 1u && delta_last_lone(int(kv_len), int(q_len), pc.C)) a = q_len - 1u;
    else return;
  } else if (pc.lone != 0u) {
    return;
  }
  if (slot >= pc.n_slots) {  // (negative ids too): reported, the sequence skipped
    err[4] = 1u;
    return;
  }
  if (slot < pc.slot_lo || slot >= pc.slot_hi) return;  // another window's sequence
  uint t_lo = max(a, pc.t_begin), t_hi = min(b, pc.t_begin + pc.t_count);
  if (t_lo >= t_hi) return;  // this round has none of the sequence's tokens: state untouched
  uint sb = pc.st_off + ((slot - pc.slot_lo) * pc.Hv + h) * pc.Dk * pc.Dv + dv0;  // in `st`
  uint sbt = pc.stv_off + (slot * pc.Hv + h) * pc.Dk * pc.Dv + dv0;                 // in St
  const uint Dk = DK != 0u ? DK : pc.Dk;
  const uint CD = DK != 0u ? DK : MAXDK;  // col[] stride between columns
  float col[NC * CD];
  if (t_lo == 0u && kv_len == q_len) {  // first step: zeros, whatever the reused slot holds
    [[unroll]] for (uint c = 0u; c < NC; ++c)
      [[unroll]] for (uint d = 0u; d < Dk; ++d) col[c * CD + d] = 0.0;
  } else if (NC == 4u && STV) {
    [[unroll]] for (uint d = 0u; d < Dk; ++d) {
      vec4 r = texelFetch(St, int((sbt + d * pc.Dv) >> 2));
      [[unroll]] for (uint c = 0u; c < NC; ++c) col[c * CD + d] = r[c];
    }
  } else {
    [[unroll]] for (uint c = 0u; c < NC; ++c)
      [[unroll]] for (uint d = 0u; d < Dk; ++d) col[c * CD + d] = st[sb + d * pc.Dv + c];
  }
  for (uint t = t_lo; t < t_hi; ++t) {
    uint n = q_start + t;
    float decay = exp(g[pc.g_off + n * pc.Hv + h]);
    float bt = beta[pc.b_off + n * pc.Hv + h];
    uint vb = pc.v_off + (n * pc.Hv + h) * pc.Dv + dv0;
    float u[NC], delta[NC], out_v[NC];
    [[unroll]] for (uint c = 0u; c < NC; ++c) u[c] = 0.0, out_v[c] = 0.0;
    if (VEC) {
      uint kb = pc.k_off + (n * pc.Hk + hk) * (Dk / 4u), qb = pc.q_off + (n * pc.Hk + hk) * (Dk / 4u);
      [[unroll]] for (uint d4 = 0u; d4 < Dk / 4u; ++d4) {
        vec4 kk = texelFetch(Kt, int(kb + d4));
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
          [[unroll]] for (uint c = 0u; c < NC; ++c) {
            col[c * CD + 4u * d4 + j] *= decay;
            u[c] += col[c * CD + 4u * d4 + j] * kk[j];
          }
      }
      [[unroll]] for (uint c = 0u; c < NC; ++c) delta[c] = bt * (v[vb + c] - u[c]);
      [[unroll]] for (uint d4 = 0u; d4 < Dk / 4u; ++d4) {
        vec4 kk = texelFetch(Kt, int(kb + d4)), qq = texelFetch(Qt, int(qb + d4));
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
          [[unroll]] for (uint c = 0u; c < NC; ++c) {
            col[c * CD + 4u * d4 + j] += kk[j] * delta[c];
            out_v[c] += col[c * CD + 4u * d4 + j] * qq[j];
          }
      }
    } else {
      uint kb = pc.k_off + (n * pc.Hk + hk) * Dk, qb = pc.q_off + (n * pc.Hk + hk) * Dk;
      [[unroll]] for (uint d = 0u; d < Dk; ++d) {
        float kd = texelFetch(Kt, int(kb + d)).x;
        [[unroll]] for (uint c = 0u; c < NC; ++c) {
          col[c * CD + d] *= decay;
          u[c] += col[c * CD + d] * kd;
        }
      }
      [[unroll]] for (uint c = 0u; c < NC; ++c) delta[c] = bt * (v[vb + c] - u[c]);
      [[unroll]] for (uint d = 0u; d < Dk; ++d) {
        float kd = texelFetch(Kt, int(kb + d)).x, qd = texelFetch(Qt, int(qb + d)).x;
        [[unroll]] for (uint c = 0u; c < NC; ++c) {
          col[c * CD + d] += kd * delta[c];
          out_v[c] += col[c * CD + d] * qd;
        }
      }
    }
    uint ob = pc.o_off + (n * pc.Hv + h) * pc.Dv + dv0;
    [[unroll]] for (uint c = 0u; c < NC; ++c) o[ob + c] = out_v[c];
  }
  [[unroll]] for (uint c = 0u; c < NC; ++c)
    [[unroll]] for (uint d = 0u; d < Dk; ++d) st[sb + d * pc.Dv + c] = col[c * CD + d];
}
