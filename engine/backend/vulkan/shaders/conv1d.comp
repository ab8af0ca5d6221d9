#version 450
// Causal depthwise conv1d with carried state: one invocation per (sequence, channel), tokens in
// order, the last K-1 inputs kept in registers and written back to the state slot at the end.
// One dispatch runs each sequence's tokens [t_begin, t_begin + t_count): the host splits long
// prefills into rounds (llvmpipe ends loops after 65535 iterations per invocation:
// KernelPolicy::loop_budget).
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;
const uint MAXK = 16u;
// KS: the kernel size as a specialization constant (0: pc.K), so the window and weight loops
// unroll and win[]/wc[] stay in registers (indexed by a loop over a push constant, lavapipe keeps
// them in per-lane memory). x is read through an R32F texel view (an SSBO load is a per-lane loop
// on lavapipe). Qwen3.5-sized layer (8192 channels, K 4), bench_ops: decode token 378 -> 154-171
// µs, 256-token prefill 14.4 -> 4.0-4.1 ms.
layout(constant_id = 0) const uint KS = 0;

layout(set = 0, binding = 0) uniform samplerBuffer X;
layout(std430, set = 0, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, set = 0, binding = 2) buffer State { float st[]; };
layout(std430, set = 0, binding = 3) readonly buffer Seqs { int seqs[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { float y[]; };
layout(push_constant) uniform PC {
  uint S, C, K;
  uint x_off, w_off, st_off, seqs_off, y_off;
  uint t_begin, t_count;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.S * pc.C) return;
  uint s = i / pc.C, c = i % pc.C;
  uint q_start = uint(seqs[pc.seqs_off + s * 4u]), q_len = uint(seqs[pc.seqs_off + s * 4u + 1u]);
  uint slot = uint(seqs[pc.seqs_off + s * 4u + 3u]);
  uint t_lo = pc.t_begin, t_hi = min(q_len, pc.t_begin + pc.t_count);
  if (t_lo >= t_hi) return;  // none of this sequence's tokens in this round: state untouched
  const uint K = KS != 0u ? KS : pc.K;
  uint km1 = K - 1u;
  uint sb = pc.st_off + slot * km1 * pc.C;
  float win[KS != 0u ? KS : MAXK];
  [[unroll]] for (uint j = 0u; j < km1; ++j) win[j] = st[sb + j * pc.C + c];
  float wc[KS != 0u ? KS : MAXK];
  [[unroll]] for (uint j = 0u; j < K; ++j) wc[j] = w[pc.w_off + c * K + j];
  for (uint t = t_lo; t < t_hi; ++t) {
    uint row = q_start + t;
    win[km1] = texelFetch(X, int(pc.x_off + row * pc.C + c)).x;
    float acc = 0.0;
    [[unroll]] for (uint j = 0u; j < K; ++j) acc += wc[j] * win[j];
    y[pc.y_off + row * pc.C + c] = acc;
    [[unroll]] for (uint j = 0u; j < km1; ++j) win[j] = win[j + 1u];
  }
  [[unroll]] for (uint j = 0u; j < km1; ++j) st[sb + j * pc.C + c] = win[j];
}
