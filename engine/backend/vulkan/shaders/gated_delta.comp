#version 450
// Gated delta rule, recurrent form, for both decode and prefill: one invocation per (sequence,
// value head, value column dv) holding the state column S[:, dv] (Dk values) in registers:
//   S <- e^g S;  u = S^T k;  S <- S + k (beta (v - u))^T;  o = S^T q.
// Columns are independent, so this is exact to the recurrence; the chunked (WY) form is not
// implemented on Vulkan (CHUNKED runs this kernel; docs/vulkan.md). One dispatch runs each
// sequence's tokens [t_begin, t_begin + t_count): the host splits long prefills into rounds that
// carry the state through `st`, because llvmpipe ends loops after 65535 iterations per invocation
// (KernelPolicy::loop_budget).
// bench_ops "GATED_DELTA (Qwen3.5 layer)", 32 value heads of 128, per layer on lavapipe: q/k
// through texel views instead of SSBOs took a decode token 2.38 -> 1.90 ms and a 256-token
// prefill 348 -> 211 ms; DK as a specialization constant then 1.90 -> 1.48 ms and 211 -> 64 ms;
// VEC (4 dims per fetch) 1.48 -> 1.19 ms and 64 -> 37.5 ms.
// Workgroups of one head (uniform q/k addresses) made no difference there.
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;
// DK: the key head dim as a specialization constant (0: read pc.Dk). With it the loops over the
// state column unroll and col[] is indexed statically, so lavapipe keeps it in registers and
// stack slots instead of a per-lane gather/scatter array.
layout(constant_id = 0) const uint DK = 0;
// VEC: q and k read as RGBA32F texels, 4 keys dims per fetch (DK % 4 == 0, 16-byte aligned; the
// q/k offsets are then in texels). The arithmetic is the scalar path's, in the same order.
layout(constant_id = 1) const bool VEC = false;
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
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.S * pc.Hv * pc.Dv) return;
  uint dv = i % pc.Dv, t0 = i / pc.Dv;
  uint h = t0 % pc.Hv, s = t0 / pc.Hv;
  uint hk = h / (pc.Hv / pc.Hk);
  uint q_start = uint(seqs[pc.seqs_off + s * 4u]), q_len = uint(seqs[pc.seqs_off + s * 4u + 1u]);
  uint slot = uint(seqs[pc.seqs_off + s * 4u + 3u]);
  uint t_lo = pc.t_begin, t_hi = min(q_len, pc.t_begin + pc.t_count);
  if (t_lo >= t_hi) return;  // this round has none of the sequence's tokens: state untouched
  uint sb = pc.st_off + (slot * pc.Hv + h) * pc.Dk * pc.Dv + dv;
  const uint Dk = DK != 0u ? DK : pc.Dk;
  float col[DK != 0u ? DK : MAXDK];
  [[unroll]] for (uint d = 0u; d < Dk; ++d) col[d] = st[sb + d * pc.Dv];
  for (uint t = t_lo; t < t_hi; ++t) {
    uint n = q_start + t;
    float decay = exp(g[pc.g_off + n * pc.Hv + h]);
    float u = 0.0;
    float delta, out_v = 0.0;
    if (VEC) {
      uint kb = pc.k_off + (n * pc.Hk + hk) * (Dk / 4u), qb = pc.q_off + (n * pc.Hk + hk) * (Dk / 4u);
      [[unroll]] for (uint d4 = 0u; d4 < Dk / 4u; ++d4) {
        vec4 kk = texelFetch(Kt, int(kb + d4));
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
          col[4u * d4 + j] *= decay;
          u += col[4u * d4 + j] * kk[j];
        }
      }
      delta = beta[pc.b_off + n * pc.Hv + h] * (v[pc.v_off + (n * pc.Hv + h) * pc.Dv + dv] - u);
      [[unroll]] for (uint d4 = 0u; d4 < Dk / 4u; ++d4) {
        vec4 kk = texelFetch(Kt, int(kb + d4)), qq = texelFetch(Qt, int(qb + d4));
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
          col[4u * d4 + j] += kk[j] * delta;
          out_v += col[4u * d4 + j] * qq[j];
        }
      }
    } else {
      uint kb = pc.k_off + (n * pc.Hk + hk) * Dk, qb = pc.q_off + (n * pc.Hk + hk) * Dk;
      [[unroll]] for (uint d = 0u; d < Dk; ++d) {
        col[d] *= decay;
        u += col[d] * texelFetch(Kt, int(kb + d)).x;
      }
      delta = beta[pc.b_off + n * pc.Hv + h] * (v[pc.v_off + (n * pc.Hv + h) * pc.Dv + dv] - u);
      [[unroll]] for (uint d = 0u; d < Dk; ++d) {
        col[d] += texelFetch(Kt, int(kb + d)).x * delta;
        out_v += col[d] * texelFetch(Qt, int(qb + d)).x;
      }
    }
    o[pc.o_off + (n * pc.Hv + h) * pc.Dv + dv] = out_v;
  }
  [[unroll]] for (uint d = 0u; d < Dk; ++d) st[sb + d * pc.Dv] = col[d];
}
