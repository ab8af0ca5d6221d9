// Kernel selection per device: the ONE place that decides how kernels read their operands and how
// matmul work is tiled, from the device's capabilities (docs/vulkan.md §3). Ops ask, never guess.
#pragma once

#include <cstdint>

#include "backend/tensor.hpp"
#include "backend/vulkan/context.hpp"

namespace kiln::vk {

struct MatmulPlan {
  uint32_t local_size = 8;  ///< = subgroup size: one subgroup per workgroup, no shared memory
  uint32_t tm = 1;          ///< activation rows per workgroup
  uint32_t tn = 8;          ///< weight rows per workgroup
  bool aligned = false;     ///< vec4 / 8-half texel reads (K % 8 == 0 and 16-byte aligned operands)
  /** Weight rows of one tile are this far apart (consecutive workgroups take the rows in
   *  between). See KernelPolicy::matmul: it keeps short rows in separate prefetch streams. */
  uint32_t row_stride = 1;
};

struct KernelPolicy {
  /** Weights and activations of matmul/get_rows are read through uniform texel buffers. On
   *  lavapipe SSBO loads are a per-lane scalar loop (10-30x slower, vulkan-lavapipe.md §7); on
   *  GPUs texel reads go through the texture cache and are fine too, so this is currently true on
   *  every device. An SSBO/cooperative-matrix path for GPUs would be chosen here. */
  bool texel_weights = true;
  uint32_t subgroup = 8;
  uint32_t row_local_size = 8;  ///< per-row kernels (norms, softmax, attention): one subgroup
  /** Bytes one texel binding can reach (maxTexelBufferElements x 16-byte texels). Weights beyond
   *  it are processed in row blocks. KILN_VULKAN_TEXEL_REACH lowers it (tests of the split). */
  uint64_t texel_reach = 0;
  /** Bytes one storage binding reaches (maxStorageBufferRange: 128 MiB on lavapipe). SET_ROWS
   *  writes a larger destination (a big KV cache) in windows. KILN_VULKAN_STORAGE_REACH lowers it
   *  for tests. */
  uint64_t storage_reach = 0;
  /** Benchmark tuning knobs, read once from the environment (0: unset): KILN_VULKAN_MATMUL_TM /
   *  _TN for 8+ rows, KILN_VULKAN_GEMV_TM / _TN / _STRIDE below. */
  uint32_t knob_matmul_tm = 0, knob_matmul_tn = 0, knob_gemv_tm = 0, knob_gemv_tn = 0, knob_gemv_stride = 0;

  /** R activation rows, K reduction length; operands' 16-byte alignment as computed by the op. */
  MatmulPlan matmul(DType w, int64_t R, int64_t M, int64_t K, bool operands_aligned, bool moe) const;
  /** lavapipe (a CPU): per-workgroup costs matter, occupancy does not. */
  bool cpu_device = false;
  /** Loop iterations one invocation may run (0: no limit). llvmpipe ends every loop of a shader
   *  once 65535 back-edges have been taken in one call, counted across all its loops
   *  (LP_MAX_TGSI_LOOP_ITERATIONS in gallivm) and silently: kernels whose loops grow with the
   *  data (GATED_DELTA's tokens, attention's keys, softmax rows) split or unroll their work to stay
   *  under this budget. */
  uint32_t loop_budget = 0;
  /** Attention kernel. true (every device): attention_keys.comp, the lanes split the keys and each
   *  holds whole q / output rows (Dk + Dv floats per head). f16 decode, 16 query / 8 KV heads of
   *  128, against attention_dims.comp (the lanes split each key's dims, a few registers each):
   *  lavapipe kv 4096 3.0-3.3 -> 1.6-1.8 ms; H100 kv 64 / 512 / 4096 172 / 1242 / 1819 -> 41 / 92 /
   *  505 µs (the dims kernel has one subgroup per token and KV head walking every key in turn).
   *  false: attention_dims.comp, kept for devices where the keys kernel's per-lane rows would not
   *  fit; KILN_VULKAN_ATTENTION=keys|dims overrides it (ctest runs the harness with dims too). */
  bool attention_split_keys = false;
  /** attention_keys.comp keys per lane and pass (KU): one softmax update and one rescale of the
   *  accumulators for all of them. 2 on lavapipe: 4096 keys 1.83-1.94 -> 1.64-1.76 ms. */
  uint32_t attention_keys_per_lane = 1;
  /** attention_keys.comp query tokens per workgroup in prefill batches, at most (TQ): their query
   *  heads share each key's fetches. A tile across a sequence boundary runs one round per token,
   *  so the key limit is divided by it. */
  uint32_t attention_query_tile = 1;
  /** GATED_DELTA form. true (GPUs): sequences of more than one token (AUTO) or all of them
   *  (CHUNKED) run the chunked (WY) form, gated_delta_prep.comp + gated_delta_chunk.comp, the rest
   *  the recurrent kernel, as the CPU reference chooses. The recurrent kernel walks a prefill's
   *  tokens one after another with Hv x Dv invocations (4096 for a Qwen3.5 layer): that keeps a
   *  CPU's lanes busy but leaves a GPU nearly idle (2.45 ms per layer and 256 tokens on an H100);
   *  the chunked form splits each chunk's tokens over a workgroup's lanes through shared memory.
   *  Not yet measured on a GPU. false (lavapipe): every mode runs the recurrent kernel. There
   *  shared-memory loads at lane-varying addresses are a loop over the lanes, and a Qwen3.5 layer's
   *  256-token prefill takes 880-920 ms chunked against 20-23 ms recurrent.
   *  KILN_VULKAN_DELTA=chunked|recurrent overrides it (ctest runs the chunked kernels on lavapipe
   *  that way). */
  bool delta_chunked = false;
  /** gated_delta_chunk.comp value columns per workgroup (TB, a divisor of 64; 64 / TB lanes split a
   *  column's rows): 8, more workgroups and a short serial path per chunk (a guess until a GPU
   *  measures it; KILN_VULKAN_DELTA_TB sets it). The state slice takes Dk·TB floats of shared
   *  memory, so TB 64 at Dk 128 would not fit lavapipe's 32 KiB. */
  uint32_t delta_chunk_cols = 8;
  /** Chunk slots one group of the chunked form's scratch holds at most (0: as many as fit 256 MiB
   *  and a binding). KILN_VULKAN_DELTA_GROUP lowers it (tests of the group split). */
  uint32_t delta_group_slots = 0;
};

KernelPolicy choose_policy(const DeviceInfo& d);

/** Sequences an attention dispatch may hold under a loop budget: its sequence lookup loop is
 *  reserved that many iterations (4096, or half a small test budget), so the key limit depends on
 *  the device alone, not on the batch. */
uint32_t attention_max_seqs(uint32_t budget);

/** Keys one attention workgroup can visit within the policy's loop budget (0: no limit), with
 *  cache blocks of `bs` keys. attention_keys.comp: one pass per subgroup x keys-per-lane keys plus
 *  the exit pass, whatever the block size. attention_dims.comp: ceil(bs/4) + 2 passes per block
 *  (gallivm counts the exit pass too). Both after the sequence lookup and a margin. */
uint32_t attention_max_keys(const KernelPolicy& p, int64_t bs);

/** 8-dim groups a head dim may have: 64 (D 512) for attention_keys.comp, whose lanes hold whole
 *  rows; 8 per lane for attention_dims.comp. */
uint32_t attention_max_groups(const KernelPolicy& p);

}  // namespace kiln::vk
