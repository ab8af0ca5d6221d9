#version 450
// Causal depthwise conv1d with carried state: one invocation per (sequence, CH channels), tokens in
// order, the last K-1 inputs kept in registers and written back to the state slot at the end. A
// sequence at its first step (kv_len == q_len) starts from zeros, not from its reused slot.
// One dispatch runs each sequence's tokens [t_begin, t_begin + t_count): the host splits long
// prefills into rounds (llvmpipe ends loops after 65535 iterations per invocation:
// KernelPolicy::loop_budget).
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;
const uint MAXK = 16u;
// KS: the kernel size as a specialization constant (0: pc.K), so the window and weight loops
// unroll and win[]/wc[] stay in registers (indexed by a loop over a push constant, lavapipe keeps
// them in per-lane memory). x and w are read through texel views (an SSBO load is a per-lane loop
// on lavapipe). Qwen3.5-sized layer (8192 channels, K 4), bench_ops: decode token 378 -> 154-171
// µs, 256-token prefill 14.4 -> 4.0-4.1 ms.
layout(constant_id = 0) const uint KS = 0;
// CH: channels per invocation, 1 or 4 (C % 4 == 0, x / y / state 16-byte aligned: x read and y
// written 4 channels per texel / vec4, the state read through Sv). Each channel's arithmetic is
// the same either way.
layout(constant_id = 1) const uint CH = 1;

layout(set = 0, binding = 0) uniform samplerBuffer X;
layout(set = 0, binding = 1) uniform samplerBuffer Wt;  // R32F
layout(set = 0, binding = 5) uniform samplerBuffer Sv;  // RGBA32F view of st (CH = 4), else a dummy
layout(std430, set = 0, binding = 2) buffer State { float st[]; };
layout(std430, set = 0, binding = 3) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { float y[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out4 { vec4 y4[]; };
layout(std430, set = 0, binding = 6) buffer Err { uint err[]; };  // err[4]: a slot outside the state
layout(push_constant) uniform PC {
  uint S, C, K;
  uint x_off, w_off, st_off, seqs_off, y_off;
  uint t_begin, t_count;
  uint n_slots;  // slots in the state
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  uint groups = pc.C / CH;
  if (i >= pc.S * groups) return;
  uint s = i / groups, c0 = (i % groups) * CH;
  uint q_start = uint(seqs[pc.seqs_off + s * 4u]), q_len = uint(seqs[pc.seqs_off + s * 4u + 1u]);
  uint kv_len = uint(seqs[pc.seqs_off + s * 4u + 2u]), slot = uint(seqs[pc.seqs_off + s * 4u + 3u]);
  if (slot >= pc.n_slots) {  // (negative ids too): reported, the sequence skipped
    err[4] = 1u;
    return;
  }
  uint t_lo = pc.t_begin, t_hi = min(q_len, pc.t_begin + pc.t_count);
  if (t_lo >= t_hi) return;  // none of this sequence's tokens in this round: state untouched
  const uint K = KS != 0u ? KS : pc.K;
  const uint WK = KS != 0u ? KS : MAXK;  // win[] / wc[] stride between channels
  uint km1 = K - 1u;
  uint sb = pc.st_off + slot * km1 * pc.C + c0;
  float win[CH * WK];
  float wc[CH * WK];
  if (t_lo == 0u && kv_len == q_len) {  // first step: zeros, whatever the reused slot holds
    [[unroll]] for (uint j = 0u; j < CH * WK; ++j) win[j] = 0.0;
  } else if (CH == 4u) {
    [[unroll]] for (uint j = 0u; j < km1; ++j) {
      vec4 sv = texelFetch(Sv, int((sb + j * pc.C) >> 2));
      [[unroll]] for (uint c = 0u; c < CH; ++c) win[c * WK + j] = sv[c];
    }
  } else {
    [[unroll]] for (uint j = 0u; j < km1; ++j) win[j] = st[sb + j * pc.C];
  }
  [[unroll]] for (uint c = 0u; c < CH; ++c)
    [[unroll]] for (uint j = 0u; j < K; ++j) wc[c * WK + j] = texelFetch(Wt, int(pc.w_off + (c0 + c) * K + j)).x;
  for (uint t = t_lo; t < t_hi; ++t) {
    uint row = q_start + t;
    if (CH == 4u) {
      vec4 xv = texelFetch(X, int((pc.x_off + row * pc.C + c0) >> 2));
      [[unroll]] for (uint c = 0u; c < CH; ++c) win[c * WK + km1] = xv[c];
    } else {
      win[km1] = texelFetch(X, int(pc.x_off + row * pc.C + c0)).x;
    }
    float acc[4];  // CH <= 4
    [[unroll]] for (uint c = 0u; c < CH; ++c) {
      acc[c] = 0.0;
      [[unroll]] for (uint j = 0u; j < K; ++j) acc[c] += wc[c * WK + j] * win[c * WK + j];
      [[unroll]] for (uint j = 0u; j < km1; ++j) win[c * WK + j] = win[c * WK + j + 1u];
    }
    uint yb = pc.y_off + row * pc.C + c0;
    if (CH == 4u) y4[yb >> 2] = vec4(acc[0], acc[1], acc[2], acc[3]);
    else y[yb] = acc[0];
  }
  [[unroll]] for (uint c = 0u; c < CH; ++c)
    [[unroll]] for (uint j = 0u; j < km1; ++j) st[sb + j * pc.C + c] = win[c * WK + j];
}
