// The chunked delta rule's chunks of one sequence, shared by gated_delta_prep.comp and
// gated_delta_chunk.comp: chunks are aligned to absolute positions (they end where the next
// position is a multiple of C), so a state taken at such a position and resumed later continues
// with the bits of an uninterrupted run. A sequence with q_len tokens ending at kv_len starts at
// position kv_len - q_len, `lead` tokens into its first chunk.
#ifndef KILN_DELTA_CHUNKS_GLSL
#define KILN_DELTA_CHUNKS_GLSL
uint delta_lead(int kv_len, int q_len, uint C) { return uint(kv_len - q_len) % C; }
/** Chunks of a sequence of q_len tokens ending at kv_len. */
uint delta_chunks(int kv_len, int q_len, uint C) { return (delta_lead(kv_len, q_len, C) + uint(q_len) + C - 1u) / C; }
/**
 * A one-token chunk is a step of the recurrence: the recurrent kernel (gated_delta.comp) runs it,
 * before the chunked passes for a sequence's first chunk, after them for its last, and the passes
 * skip it. So a prompt resumed one token before its end (a recurrent decode step) gives the bits
 * of the uninterrupted prefill's last chunk (the CPU reference does the same).
 */
bool delta_first_lone(int kv_len, int q_len, uint C) { return delta_lead(kv_len, q_len, C) + 1u == C || q_len == 1; }
bool delta_last_lone(int kv_len, int q_len, uint C) {
  uint end = delta_lead(kv_len, q_len, C) + uint(q_len);
  return end > C && end % C == 1u;
}
/** The sequence's tokens [lo, hi) in its chunk c. */
uvec2 delta_chunk_span(int kv_len, int q_len, uint C, uint c) {
  uint lead = delta_lead(kv_len, q_len, C);
  return uvec2(max(c * C, lead) - lead, min((c + 1u) * C - lead, uint(q_len)));
}
#endif
