#version 450
// Causal depthwise conv1d with carried state: one invocation per (sequence, channel), tokens in
// order, the last K-1 inputs kept in registers and written back to the state slot at the end.
// One dispatch runs each sequence's tokens [t_begin, t_begin + t_count): the host splits long
// prefills into rounds (llvmpipe ends loops after 65535 iterations per invocation:
// KernelPolicy::loop_budget).
layout(local_size_x = 64) in;
const uint MAXK = 16u;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
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
  uint km1 = pc.K - 1u;
  uint sb = pc.st_off + slot * km1 * pc.C;
  float win[MAXK];
  for (uint j = 0u; j < km1; ++j) win[j] = st[sb + j * pc.C + c];
  float wc[MAXK];
  for (uint j = 0u; j < pc.K; ++j) wc[j] = w[pc.w_off + c * pc.K + j];
  for (uint t = t_lo; t < t_hi; ++t) {
    uint row = q_start + t;
    win[km1] = x[pc.x_off + row * pc.C + c];
    float acc = 0.0;
    for (uint j = 0u; j < pc.K; ++j) acc += wc[j] * win[j];
    y[pc.y_off + row * pc.C + c] = acc;
    for (uint j = 0u; j < km1; ++j) win[j] = win[j + 1u];
  }
  for (uint j = 0u; j < km1; ++j) st[sb + j * pc.C + c] = win[j];
}
