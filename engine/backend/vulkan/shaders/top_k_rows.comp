#version 450
// Top-k over long rows (a vocabulary of logits), one workgroup per row, in the order of top_k.comp
// and the CPU reference: value descending, ties to the lower index. The k-th largest value is found
// by radix selection on order-preserving keys (four 8-bit passes, each a histogram in shared
// memory over the elements that match the digits chosen so far); then the elements above it and the
// lowest-indexed ones equal to it are gathered and ranked. Five reads of the row, no sort of it.
// VALUES: each row of the result holds the k ids, then their k values as f32 bits.
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint VALUES = 0;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Ids { int ids[]; };
layout(push_constant) uniform PC {
  uint N, E, K;
  uint x_off, o_off;
} pc;

const uint KMAX = 1024u;  // the host's limit on k for this kernel (ops/mixers.cpp)
shared uint hist[256];
shared uint s_prefix, s_take, s_above;
shared uint cand_key[KMAX];
shared uint cand_idx[KMAX];

// Larger key, larger value; -0 and +0 share a key (they compare equal); NaN ranks below -inf
// (key 0), as in the CPU reference.
uint key_of(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
  if ((u & 0x7fffffffu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

void main() {
  const uint n = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (n >= pc.N) return;  // uniform across the workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint xb = pc.x_off + n * pc.E;
  uint prefix = 0u, mask = 0u, take = pc.K;  // take: how many still to pick among the matching
  for (uint pass = 0u; pass < 4u; ++pass) {
    const uint shift = 24u - 8u * pass;
    hist[tid] = 0u;
    barrier();
    for (uint e = tid; e < pc.E; e += 256u) {
      const uint k = key_of(x[xb + e]);
      if ((k & mask) == prefix) atomicAdd(hist[(k >> shift) & 255u], 1u);
    }
    barrier();
    if (tid == 0u) {
      uint above = 0u, d = 255u;
      for (uint i = 0u; i < 256u; ++i) {
        d = 255u - i;
        if (above + hist[d] >= take) break;
        above += hist[d];
      }
      s_prefix = prefix | (d << shift);
      s_take = take - above;
    }
    barrier();
    prefix = s_prefix;
    take = s_take;
    mask |= 255u << shift;
    barrier();  // hist is cleared next pass only after every invocation has read the shared picks
  }
  // prefix is the k-th largest key; `take` elements equal to it belong, the lowest-indexed ones.
  const uint n_above = pc.K - take;
  if (tid == 0u) s_above = 0u;
  barrier();
  for (uint e = tid; e < pc.E; e += 256u) {
    const uint k = key_of(x[xb + e]);
    if (k > prefix) {
      const uint slot = atomicAdd(s_above, 1u);
      cand_key[slot] = k;
      cand_idx[slot] = e;
    }
  }
  // Ties in index order: each invocation counts the equal elements of its own contiguous span, a
  // prefix sum over the spans gives each its first rank.
  const uint span = (pc.E + 255u) / 256u;
  const uint lo = min(tid * span, pc.E), hi = min(lo + span, pc.E);
  uint eq = 0u;
  for (uint e = lo; e < hi; ++e) eq += key_of(x[xb + e]) == prefix ? 1u : 0u;
  hist[tid] = eq;
  barrier();
  if (tid == 0u) {
    uint run = 0u;
    for (uint i = 0u; i < 256u; ++i) {
      const uint c = hist[i];
      hist[i] = run;
      run += c;
    }
  }
  barrier();
  uint rank = hist[tid];
  for (uint e = lo; e < hi && rank < take; ++e)
    if (key_of(x[xb + e]) == prefix) {
      cand_key[n_above + rank] = prefix;
      cand_idx[n_above + rank] = e;
      ++rank;
    }
  barrier();
  const uint width = VALUES != 0u ? 2u * pc.K : pc.K;
  const uint ob = pc.o_off + n * width;
  for (uint i = tid; i < pc.K; i += 256u) {
    const uint ki = cand_key[i], ii = cand_idx[i];
    uint r = 0u;
    for (uint j = 0u; j < pc.K; ++j) {
      const uint kj = cand_key[j];
      r += (kj > ki || (kj == ki && cand_idx[j] < ii)) ? 1u : 0u;
    }
    ids[ob + r] = int(ii);
    if (VALUES != 0u) ids[ob + pc.K + r] = floatBitsToInt(x[xb + ii]);
  }
}
