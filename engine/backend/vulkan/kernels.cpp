#include "backend/vulkan/kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace kiln::vk {

KernelPolicy choose_policy(const DeviceInfo& d) {
  KernelPolicy p;
  p.subgroup = d.subgroup_size;
  p.row_local_size = d.subgroup_size;
  p.cpu_device = d.is_lavapipe;
  p.loop_budget = d.is_lavapipe ? 60000 : 0;                              // below gallivm's 65535 (kernels.hpp)
  if (const char* b = std::getenv("KILN_VULKAN_LOOP_BUDGET"); b && *b) {  // tests: split sooner
    const uint32_t v = static_cast<uint32_t>(std::clamp(std::atol(b), 256L, 60000L));
    p.loop_budget = p.loop_budget ? std::min(p.loop_budget, v) : v;
  }
  p.texel_weights = true;  // see kernels.hpp: fastest on lavapipe, good on GPUs
  p.texel_reach = d.max_texel_elements * 16;
  if (const char* r = std::getenv("KILN_VULKAN_TEXEL_REACH"); r && *r)
    p.texel_reach = std::min<uint64_t>(p.texel_reach, std::max<uint64_t>(std::strtoull(r, nullptr, 10), 1024));
  auto knob = [](const char* name, int hi) -> uint32_t {
    const char* t = std::getenv(name);
    return t && *t ? static_cast<uint32_t>(std::clamp(std::atoi(t), 1, hi)) : 0u;
  };
  p.knob_matmul_tm = knob("KILN_VULKAN_MATMUL_TM", 16), p.knob_matmul_tn = knob("KILN_VULKAN_MATMUL_TN", 16);
  p.knob_gemv_tm = knob("KILN_VULKAN_GEMV_TM", 16), p.knob_gemv_tn = knob("KILN_VULKAN_GEMV_TN", 16);
  p.knob_gemv_stride = knob("KILN_VULKAN_GEMV_STRIDE", 64);
  p.storage_reach = d.max_storage_range;
  // Attention kernel (kernels.hpp): lanes over keys everywhere (measured faster on lavapipe and on
  // an H100); lanes over dims only when asked for.
  p.attention_split_keys = true;
  if (const char* a = std::getenv("KILN_VULKAN_ATTENTION"); a && *a)
    p.attention_split_keys = std::string_view(a) == "keys";
  p.attention_keys_per_lane = d.is_lavapipe ? 2 : 1;
  p.attention_query_tile = d.is_lavapipe ? 4 : 1;
  if (uint32_t v = knob("KILN_VULKAN_ATTENTION_KU", 4)) p.attention_keys_per_lane = v;
  if (uint32_t v = knob("KILN_VULKAN_ATTENTION_TQ", 4)) p.attention_query_tile = v;
  // GATED_DELTA form and column tile (kernels.hpp).
  p.delta_chunked = !d.is_lavapipe;
  p.delta_chunk_cols = 8;
  if (const char* m = std::getenv("KILN_VULKAN_DELTA"); m && *m) p.delta_chunked = std::string_view(m) == "chunked";
  if (uint32_t v = knob("KILN_VULKAN_DELTA_TB", 64); v && 64 % v == 0) p.delta_chunk_cols = v;
  p.delta_group_slots = knob("KILN_VULKAN_DELTA_GROUP", 65535);
  if (const char* r = std::getenv("KILN_VULKAN_STORAGE_REACH"); r && *r)
    p.storage_reach = std::min<uint64_t>(p.storage_reach, std::max<uint64_t>(std::strtoull(r, nullptr, 10), 4096));
  return p;
}

uint32_t attention_max_seqs(uint32_t budget) {
  return budget ? std::min<uint32_t>(4096, budget / 2) : UINT32_MAX;
}

uint32_t attention_max_keys(const KernelPolicy& p, int64_t bs) {
  if (!p.loop_budget) return 0;
  const int64_t its = static_cast<int64_t>(p.loop_budget) - attention_max_seqs(p.loop_budget) - 16;
  if (p.attention_split_keys) {  // one pass per lanes x keys_per_lane keys plus the exit pass, per round
    const int64_t rounds = std::max<uint32_t>(p.attention_query_tile, 1);
    return static_cast<uint32_t>(
        std::clamp<int64_t>((its / rounds - 2) * p.row_local_size * p.attention_keys_per_lane, 1, UINT32_MAX));
  }
  // attention_dims.comp: a block of bs keys costs ceil(bs/4) + 2 passes.
  const int64_t per_block = (bs + 3) / 4 + 2;
  return static_cast<uint32_t>(std::max<int64_t>((its - 2 * per_block) * bs / per_block, 1));
}

uint32_t attention_max_groups(const KernelPolicy& p) {
  return p.attention_split_keys ? 64 : 8 * p.row_local_size;
}

MatmulPlan KernelPolicy::matmul(DType w, int64_t R, [[maybe_unused]] int64_t M, int64_t K,
                                bool operands_aligned, bool moe) const {
  MatmulPlan m;
  m.local_size = subgroup;
  m.aligned = operands_aligned && K % 8 == 0;
  m.tn = 4;
  // Decode-sized batches (1-7 rows: concurrent decodes): one tile holds every row, so weights are
  // streamed once per step, not once per row (tile). Larger batches: 8-row tiles. The tile never changes a row's
  // reduction order (matmul.comp), so this choice keeps batch invariance. Prefill tiles measured on lavapipe (GEMM
  // 128x4096x4096, noisy shared VM): f32 8x4 1156 ms, 8x8 924-1068, 16x8 474-973, 16x16 856; q8_0 4x4 947, 8x4 784, 8x8
  // 520, 16x8 513. Bigger tiles cut texel fetches per FMA until registers spill; 16x8 costs ~7 s of cold lavapipe JIT
  // per variant against ~3.5 s for 8x8, for a gain lost in the noise, so 8x8.
  if (moe || R < 8) {
    m.tm = 1;
    // GEMV 4096x4096 f32: TN 8 7.4-20 ms vs TN 4 8.3-24 ms (noisy, same runs). f16 (whose
    // widening is the costliest): TN 12 2.38-2.42 ms vs TN 8 2.56-2.57 (3 alternating runs each),
    // 151936x1024 24.1 vs 25.5 ms. bf16 on the decode shapes of a 0.6B model, 64 GEMVs in one
    // graph, three alternating runs: TN 16 4096x1024 0.48-0.50 ms vs TN 8 0.57-0.58, 8192x1024
    // 0.95-1.01 vs 1.09-1.10, 1024x2048 0.29 vs 0.31-0.32; q8_0 0.61-0.62 vs 0.68-0.70 on 4096x1024.
    // f16 went 12 -> 16 once matmul.comp's redo stopped unrolling over the tile (fewer live
    // registers): best of two alternating runs, TN 12 / 16, 4096x1024 0.64-0.72 / 0.60-0.63 ms,
    // 6144x1024 0.97-0.98 / 0.88-0.96, 1024x2048 0.39-0.41 / 0.34-0.36, 151936x1024 19.3-19.5
    // both; before that change TN 16 spilled (16384x1024: 3.66 vs 2.60 ms).
    m.tn = moe ? 4 : w == DType::f32 ? 8 : 16;
    // GPUs: 8-row tiles. H100 GEMV 4096x4096 (32 per graph), TN 1 / 2 / 4 / 8 / 16 µs: f16 40.7 /
    // 28.8 / 26.1 / 24.8 / 25.2, q8_0 106.7 / 60.1 / 36.1 / 28.3 / 31.8. The tile does not change a
    // row's arithmetic (lane order is fixed by K and the subgroup size), so rows stay invariant.
    if (!moe && !cpu_device) m.tn = 8;
    // 2-7 rows: one TM = R tile (TN 8: 16 spilled); each new R is a pipeline variant (its cold
    // lavapipe JIT is paid the first time a batch of that size runs). GEMV 4096x1024, three alternating runs, best
    // ms, R tiles of one row / TM = R with TN 4 / TN 8: bf16 R=2 0.86-1.54 / 0.88-0.95 / 0.69-0.75,
    // R=3 1.20-1.35 / 1.02-1.14 / 0.83-0.91; f16 R=2 1.20-1.30 / 1.07-1.31 / 0.87-0.90, R=3
    // 1.75-1.81 / 1.30-1.37 / 1.04-1.09; q8_0 R=2 1.09-1.16 / 0.94-1.08 / 0.79-0.86, R=3
    // 1.52-1.54 / 1.13-1.21 / 0.92-0.97 (R=1: bf16 0.54, f16 0.70, q8_0 0.61). 5-7 rows, bf16,
    // TM 4 (two row tiles) / TM = R TN 8 / TM = R TN 4: R=5 1.87-1.92 / 1.17-1.22 / 1.50-1.52,
    // R=6 1.85-1.91 / 1.23-1.38 / 1.69-1.80, R=7 1.66-1.91 / 1.48-1.51 / 1.91-2.04.
    if (!moe && R > 1) {
      m.tm = static_cast<uint32_t>(R);
      m.tn = 8;
    }
  } else {
    m.tm = 8;
    m.tn = 8;
  }
  // Tuning knobs (benchmarks only; parsed once in choose_policy).
  if (!moe && R >= 8) {
    if (knob_matmul_tm) m.tm = knob_matmul_tm;
    if (knob_matmul_tn) m.tn = knob_matmul_tn;
  }
  if (!moe && R < 8) {
    if (knob_gemv_tn) m.tn = knob_gemv_tn;
    if (knob_gemv_tm) m.tm = static_cast<uint32_t>(std::min<int64_t>(knob_gemv_tm, std::max<int64_t>(R, 1)));
  }
  if (cpu_device && !moe && R < 8) {
    // Rows shorter than four pages: a CPU's L2 stream prefetcher follows one forward stream per
    // 4 KiB page, so a tile of adjacent short rows (several streams per page) runs without
    // prefetch. Rows `row_stride` apart put each stream of a tile in its own pages, and the
    // next workgroup (on the same thread, or the other) continues them. GEMV 151936x1024 f16:
    // 42.6 -> 25-27 ms; 16384x1024: 4.3-6.0 -> 3.1-3.3 ms; 4096x4096 (8 KiB rows): 2.98 -> 2.78 ms median.
    const uint64_t row = std::max<uint64_t>(row_bytes(w, K), 1);
    m.row_stride = static_cast<uint32_t>(std::clamp<uint64_t>((16384 + row - 1) / row, 1, 16));
    if (knob_gemv_stride) m.row_stride = knob_gemv_stride;
  }
  return m;
}

}  // namespace kiln::vk
