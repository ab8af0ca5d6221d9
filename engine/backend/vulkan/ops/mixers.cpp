// Sequence mixers over the ragged batch: paged ATTENTION, CONV1D_CAUSAL and GATED_DELTA (state
// updated in place), plus the MoE routing ops.
#include <algorithm>
#include <cmath>
#include <functional>

#include "backend/ops.hpp"
#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"

namespace kiln::vk {

namespace {

// The attention kernels' cache dtype codes (KDT / VDT): 0 f32, 1 f16, 2 bf16, 3 kv_q8, 4 kv_q4.
uint32_t dt_code(DType t) {
  return t == DType::f32 ? 0u : t == DType::f16 ? 1u : t == DType::bf16 ? 2u : t == DType::kv_q8 ? 3u : 4u;
}

uint32_t row_groups(const OpEnv& e, uint64_t rows, uint32_t& gy) {
  uint64_t maxx = e.dev.context().info().max_groups[0];
  uint32_t gx = static_cast<uint32_t>(std::min<uint64_t>(rows, maxx));
  gy = static_cast<uint32_t>((rows + gx - 1) / gx);
  return gx;
}

/** Tokens of each sequence one dispatch of a state-carrying kernel (conv1d, gated_delta) runs:
 *  all N without a loop budget, else as many as fit in it when an invocation loops `per_token`
 *  times per token plus `fixed` for loading and storing its state. Rounds count from the batch's N
 *  tokens (the longest sequence is only known on the device), so a large decode batch may add
 *  rounds with nothing to do. */
int64_t tokens_per_round(const OpEnv& e, int64_t N, int64_t per_token, int64_t fixed) {
  const uint32_t budget = e.dev.policy().loop_budget;
  if (!budget) return std::max<int64_t>(N, 1);
  return std::max<int64_t>((static_cast<int64_t>(budget) - fixed - 16) / per_token, 1);
}

/** A GATED_DELTA state [slots, Hv, Dk, Dv] in windows of whole slots that one storage binding
 *  reaches (all of them when they fit; lavapipe: 128 MiB, 64 slots of a Qwen3.5 layer's 2 MiB):
 *  one dispatch per window, each running only the sequences whose slot it holds. */
struct StateWindows {
  backend::TensorRef st;
  int64_t slots, slot_bytes, win;
  /** Slots [s0, s0 + win) as a tensor of their own. */
  backend::TensorRef at(int64_t s0) const {
    backend::TensorRef w = st;
    w.offset = st.offset + static_cast<size_t>(s0 * slot_bytes);
    w.desc = backend::TensorDesc(DType::f32, {std::min(win, slots - s0), st.desc.ne[1], st.desc.ne[2], st.desc.ne[3]});
    return w;
  }
  uint32_t end(int64_t s0) const { return u32(std::min(s0 + win, slots)); }
};

StateWindows state_windows(const OpEnv& e, const backend::TensorRef& st) {
  StateWindows w{st, st.desc.ne[0], st.desc.ne[1] * st.desc.ne[2] * st.desc.ne[3] * 4, st.desc.ne[0]};
  if (w.slots <= 0) e.fail("the state has no slots");
  const uint64_t reach = e.dev.policy().storage_reach;
  if (st.offset % 256 + static_cast<uint64_t>(w.slots * w.slot_bytes) > reach) {
    w.win = static_cast<int64_t>((reach - 256) / static_cast<uint64_t>(w.slot_bytes));
    if (w.win < 1)
      e.fail(
          fmt::format("one state slot of {} bytes exceeds the storage-buffer reach ({} bytes)", w.slot_bytes, reach));
  }
  return w;
}

/** Chunks of at most 64 tokens (one lane each in pass 1); a longer chunk asked for runs as 64,
 *  which changes only the rounding (both forms compute the same recurrence). */
uint32_t delta_chunk_len(const backend::Node& n) {
  return static_cast<uint32_t>(std::clamp<int64_t>(n.params.chunk > 0 ? n.params.chunk : 64, 1, 64));
}

/** The chunked (WY) form of GATED_DELTA for the sequences with q_len >= min_len: pass 1
 *  (gated_delta_prep.comp) fills per-chunk scratch for a group of chunk slots, then pass 2
 *  (gated_delta_chunk.comp) walks each sequence's chunks of the group with its state, in rounds
 *  of slots under a loop budget and in windows of state slots beyond a storage binding; groups
 *  follow each other in slot order, so every sequence's chunks run in order. False, with nothing
 *  recorded, where the op's shapes do not fit the kernels on this device (head dims, shared
 *  memory, the scratch of one chunk, the loop budget): the caller then runs the recurrent kernel,
 *  which computes the same recurrence. The choice depends on shapes and the device only, never on
 *  the batch (its tokens, sequences or the memory free), so a sequence's bits do not either. */
bool record_delta_chunked(const OpEnv& e, uint32_t min_len, const std::function<void(uint32_t lone)>& recurrent) {
  const backend::Node& n = e.node;
  const backend::TensorRef &q = n.src[0], &k = n.src[1], &v = n.src[2], &g = n.src[3], &beta = n.src[4], &st = n.src[5],
                           &seqs = n.src[6];
  const int64_t N = q.desc.ne[0], Hk = q.desc.ne[1], Dk = q.desc.ne[2], Hv = v.desc.ne[1], Dv = v.desc.ne[2];
  const int64_t S = seqs.desc.ne[0];
  const KernelPolicy& pol = e.dev.policy();
  const DeviceInfo& di = e.dev.context().info();
  const int64_t C = delta_chunk_len(n);
  if (C == 1) return false;  // every chunk a single token: the recurrent kernel runs them all
  const int64_t TB = std::min<int64_t>(pol.delta_chunk_cols, std::bit_ceil(static_cast<uint64_t>(Dv)));
  const int64_t RS = 64 / TB, tiles = (Dv + TB - 1) / TB;
  if (Dk > 256 || Dv <= 0 || Hv <= 0) return false;
  if (static_cast<uint64_t>(C * C + 2 * C) * 4 > di.max_shared_bytes ||
      static_cast<uint64_t>(Dk * TB + C * TB + 2 * C) * 4 > di.max_shared_bytes || Hv > di.max_groups[1] ||
      Hv * tiles > di.max_groups[0])
    return false;
  const bool vec = Dk % 4 == 0 && q.offset % 16 == 0 && k.offset % 16 == 0;
  const int64_t kd = Dk;  // the scalar path's passes (VEC takes fewer): the choice must not depend on alignment
  // Loop passes (llvmpipe counts every loop's back-edges and exits across the invocation). Both
  // passes scan the sequences before them; like attention, a batch may hold attention_max_seqs of
  // them (a fixed reserve, so the shape check does not depend on the batch). Pass 1: γ, the A/P
  // dot products, T and U/W columns. Pass 2: loading and storing the state slice, then per chunk
  // its tokens' V' / O rows and its key dims' update.
  const int64_t seq_reserve = pol.loop_budget ? attention_max_seqs(pol.loop_budget) : 0;
  const int64_t half = C * C / 2 + 4 * C + 4;
  const int64_t prep = seq_reserve + 2 + (C + 1) + ((C * C + 63) / 64 + 1) * (kd + 2) + half + (C + 1) +
                       ((Dv + Dk + 63) / 64 + 1) * half + 16;
  const int64_t rows = (C + RS - 1) / RS + 1, dims = (Dk + RS - 1) / RS + 1;
  const int64_t per_chunk = rows * (kd + C + 4) + dims * (C + 2) + 8, fixed = seq_reserve + 2 * dims + 16;
  int64_t per_round = INT64_MAX;
  if (pol.loop_budget) {
    if (prep > pol.loop_budget || fixed + per_chunk > pol.loop_budget) return false;
    per_round = (pol.loop_budget - fixed) / per_chunk;
    if (S > seq_reserve)
      e.fail(
          fmt::format("{} sequences in one batch; this device's chunked delta rule takes at most {}: split the batch",
                      S, seq_reserve));
  }
  // Scratch per chunk slot (C rows): γ [Hv], P [Hv, C], U [Hv, Dv], W [Hv, Dk] floats a row, each
  // part one binding (storage in pass 1, texel in pass 2) within both reaches. A group holds as
  // many slots as fit those and 256 MiB in all (a Qwen3.5 layer: 2.6 MB a slot, 102 slots).
  const uint64_t reach = std::min<uint64_t>(pol.storage_reach, pol.texel_reach / 4) - 256;
  const uint64_t slot_rows = static_cast<uint64_t>(C * Hv) * 4;
  const uint64_t part[4] = {slot_rows, slot_rows * C, slot_rows * Dv, slot_rows * Dk};
  const uint64_t per_slot = (part[0] + part[1] + part[2] + part[3]);
  const uint64_t largest = std::max({part[1], part[2], part[3]});
  if (largest > reach) return false;
  if (S > di.max_groups[1])
    e.fail(fmt::format("{} sequences in one batch exceed the device's {} workgroups in y: split the batch", S,
                       di.max_groups[1]));
  // Σ over the chunked sequences of their chunks, aligned to absolute positions (delta_chunks.glsl):
  // a sequence of q_len tokens starting `lead` < C tokens into a chunk has ceil((lead + q_len) / C)
  // <= floor((q_len + 2C - 2) / C) of them, and at most N / min_len sequences run chunked (AUTO's
  // decode tokens do not).
  const int64_t chunked_seqs = std::min<int64_t>(S, N / std::max<uint32_t>(min_len, 1));
  const int64_t max_slots = (N + chunked_seqs * (2 * C - 2)) / C;
  int64_t G = std::min<int64_t>({static_cast<int64_t>(reach / largest),
                                 std::max<int64_t>(static_cast<int64_t>((256ull << 20) / per_slot), 1),
                                 static_cast<int64_t>(di.max_groups[0]), max_slots,
                                 pol.delta_group_slots ? static_cast<int64_t>(pol.delta_group_slots) : INT64_MAX});
  // Short of memory, smaller groups (more dispatches, the same bits); not even one chunk's scratch
  // is an error, not a switch to the other form (which would change the bits with the memory free).
  uint64_t at[4], total = 0;
  const Allocation* scratch = nullptr;
  while (!scratch) {
    total = 0;
    for (int i = 0; i < 4; ++i) {
      at[i] = total;
      total += (part[i] * static_cast<uint64_t>(G) + 255) / 256 * 256;
    }
    try {
      scratch = &e.temps.scratch(total);
    } catch (const HostError& ex) {
      if (G == 1)
        e.fail(fmt::format("no memory for the chunked delta rule's scratch ({} bytes for one chunk): {}", total,
                           ex.what()));
      G = (G + 1) / 2;
    }
  }
  auto scratch_arg = [&](int i, bool write, VkFormat f) {
    const uint64_t bytes = part[i] * static_cast<uint64_t>(G);
    return Arg{scratch, write ? VK_FORMAT_UNDEFINED : f, write, at[i], bytes, at[i]};
  };
  const VkFormat qkf = vec ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32_SFLOAT;
  const uint32_t qke = vec ? 16 : 4;
  const Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 32};  // idempotent flag: no hazard
  const Pipeline& prep_p = e.pipeline("gated_delta_prep",
                                      {Bind::texel, Bind::texel, Bind::storage, Bind::storage, Bind::storage,
                                       Bind::storage, Bind::storage, Bind::storage, Bind::storage, Bind::storage},
                                      {u32(C), vec ? 1u : 0u});
  std::vector<Bind> binds(10, Bind::storage);
  for (int i = 0; i < 6; ++i) binds[static_cast<size_t>(i)] = Bind::texel;
  const Pipeline& p = e.pipeline("gated_delta_chunk", binds, {u32(C), u32(Dk), u32(TB), vec ? 1u : 0u});
  const StateWindows sw = state_windows(e, st);
  recurrent(0);  // the sequences' one-token first chunks (and AUTO's recurrent sequences)
  for (int64_t w0 = 0; w0 < max_slots; w0 += G) {
    const int64_t w1 = std::min(max_slots, w0 + G);
    e.dispatch(prep_p,
               {e.tex(q, qkf), e.tex(k, qkf), e.ssbo(v), e.ssbo(g), e.ssbo(beta), e.ssbo(seqs),
                scratch_arg(0, true, {}), scratch_arg(1, true, {}), scratch_arg(2, true, {}), scratch_arg(3, true, {})},
               {u32(S), u32(Hk), u32(Hv), u32(Dk), u32(Dv), e.off(q, qke), e.off(k, qke), e.off(v, 4), e.off(g, 4),
                e.off(beta, 4), e.off(seqs, 4), min_len, u32(w0)},
               u32(w1 - w0), u32(Hv));
    for (int64_t lo = w0; lo < w1; lo += std::min(per_round, w1 - lo))
      for (int64_t s0 = 0; s0 < sw.slots; s0 += sw.win) {
        const backend::TensorRef w = sw.at(s0);
        e.dispatch(p,
                   {e.tex(q, qkf), e.tex(k, qkf), scratch_arg(0, false, VK_FORMAT_R32_SFLOAT),
                    scratch_arg(1, false, VK_FORMAT_R32_SFLOAT), scratch_arg(2, false, VK_FORMAT_R32_SFLOAT),
                    scratch_arg(3, false, qkf), e.ssbo(w, true), e.ssbo(seqs), e.ssbo(n.dst, true), flags},
                   {u32(S), u32(Hk), u32(Hv), u32(Dv), e.off(q, qke), e.off(k, qke), e.off(w, 4), e.off(seqs, 4),
                    e.off(n.dst, 4), min_len, u32(w0), u32(lo), u32(lo + std::min(w1 - lo, per_round)), u32(s0),
                    sw.end(s0), u32(sw.slots)},
                   u32(Hv * tiles), u32(S));
      }
  }
  recurrent(1);  // the sequences' one-token last chunks
  return true;
}

}  // namespace

void record_attention(const OpEnv& e) {
  const backend::Node& n = e.node;
  const backend::TensorRef &q = n.src[0], &kc = n.src[1], &vc = n.src[2], &bt = n.src[3], &seqs = n.src[4];
  if (q.desc.ndim != 3 || kc.desc.ndim != 4 || vc.desc.ndim != 4 || bt.desc.ndim != 2)
    e.fail("expected q [N, Hq, Dk], caches [B, BS, Hkv, D], block_table [S, MB]");
  const int64_t N = q.desc.ne[0], Hq = q.desc.ne[1], Dk = q.desc.ne[2];
  const int64_t BS = kc.desc.ne[1], Hkv = kc.desc.ne[2], Dv = vc.desc.ne[3];
  if (kc.desc.ne[3] != Dk || Hkv == 0 || Hq % Hkv) e.fail("cache shapes do not match q");
  if (Dk <= 0 || Dv <= 0 || BS <= 0) e.fail("head dims and the cache block size must be positive");
  const int64_t S = seqs.desc.ne[0], MB = bt.desc.ne[1];
  if (!N || !Hq) return;
  const KernelPolicy& pol = e.dev.policy();
  const uint32_t ls = pol.row_local_size;
  const uint32_t gk = static_cast<uint32_t>((Dk + 7) / 8), gv = static_cast<uint32_t>((Dv + 7) / 8);
  const uint32_t max_gk = attention_max_groups(pol);
  if (gk > max_gk || gv > max_gk)
    e.fail(fmt::format("head dims {}/{} above {}: no attention kernel for them on this device", Dk, Dv, 8 * max_gk));
  // Past the keys one invocation can visit within the loop budget the kernel reports (flags[3]).
  if (static_cast<uint64_t>(S) > attention_max_seqs(pol.loop_budget))
    e.fail(fmt::format("{} sequences in one batch; this device's attention takes at most {}: split the batch", S,
                       attention_max_seqs(pol.loop_budget)));
  const uint32_t max_keys = attention_max_keys(pol, BS);
  const float scale = n.params.scale != 0.0f ? n.params.scale : 1.0f / std::sqrt(static_cast<float>(Dk));
  // Cache offsets in elements of their dtype; kv_q8 / kv_q4 rows are addressed in bytes.
  const auto elem = [](DType t) -> uint32_t { return t == DType::f32 ? 4 : is_kv_quantized(t) ? 1 : 2; };
  const uint32_t ke = elem(kc.desc.dtype), ve = elem(vc.desc.dtype);
  for (const backend::TensorRef* c : {&kc, &vc})
    if (is_kv_quantized(c->desc.dtype) && (!kv_group(c->desc.last()) || c->offset % 4))
      e.fail(fmt::format("{} cache rows of {} values at offset {} (multiples of 8 and of 4 bytes needed)",
                         dtype_name(c->desc.dtype), c->desc.last(), c->offset));
  // A kv cache's rows need no 16-byte alignment for the 8-dim reads (VEC; they are read by words).
  const auto aligned = [](const backend::TensorRef& c) { return is_kv_quantized(c.desc.dtype) || c.offset % 16 == 0; };
  // kv_q8 rows at 8-byte boundaries (their size and the view offset): one texel fetch per 8 values.
  const auto aligned8 = [&](const backend::TensorRef& c) -> uint32_t {
    const bool rows8 = row_bytes(c.desc.dtype, c.desc.last()) % 8 == 0 && e.off(c, 1) % 8 == 0;
    return c.desc.dtype == DType::kv_q8 && rows8 ? 1u : 0u;
  };
  const uint32_t cap = n.params.cap > 0.0f ? 1u : 0u;
  const std::vector<uint32_t> push = {u32(N),
                                      u32(Hq),
                                      u32(Dk),
                                      u32(Dv),
                                      u32(BS),
                                      u32(Hkv),
                                      u32(S),
                                      u32(MB),
                                      e.off(q, 4),
                                      e.off(kc, ke),
                                      e.off(vc, ve),
                                      e.off(bt, 4),
                                      e.off(seqs, 4),
                                      e.off(n.dst, 4),
                                      fbits(scale),
                                      fbits(n.params.cap),
                                      static_cast<uint32_t>(n.params.window),
                                      max_keys};
  // Query heads per workgroup (QG): the heads of one KV head, at most 4, fewer when `fits` says the
  // per-lane arrays would grow too large.
  auto heads_per_group = [&](auto fits) {
    for (uint32_t c : {4u, 2u})
      if ((Hq / Hkv) % c == 0 && fits(c)) return c;
    return 1u;
  };

  if (pol.attention_split_keys) {
    // attention_keys.comp: lanes split the keys, each holding whole 8-dim groups of q and of its
    // outputs (GK / GV); q and cache rows 16-byte aligned read a group per texel (VEC).
    const bool vec = Dk % 8 == 0 && Dv % 8 == 0 && aligned(kc) && aligned(vc) && q.offset % 16 == 0;
    const uint32_t qg = heads_per_group([&](uint32_t c) { return c * (gk + gv) <= 128; });
    // Query tokens per workgroup (TQ) when some sequence has several (prefill): the tile's query
    // heads (TQ x QG) share each key's fetches, within the same 128 groups per lane.
    uint32_t tq = 1;
    if (N > S)
      for (uint32_t c : {4u, 2u})
        if (c <= pol.attention_query_tile && c * qg * (gk + gv) <= 128) {
          tq = c;
          break;
        }
    const Pipeline& p =
        e.pipeline("attention_keys",
                   {Bind::texel, Bind::texel, Bind::texel, Bind::texel, Bind::storage, Bind::storage, Bind::storage},
                   {ls, dt_code(kc.desc.dtype), dt_code(vc.desc.dtype), vec ? 1u : 0u, gk, qg, cap, gv,
                    pol.cpu_device ? 2u : 0u, pol.attention_keys_per_lane, tq, aligned8(kc), aligned8(vc)});
    // err[3]: an idempotent flag, err[7]: a sink nobody reads; no hazard either way.
    const Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 32};
    uint32_t gy = 1, gx = row_groups(e, static_cast<uint64_t>((N + tq - 1) / tq * (Hq / qg)), gy);
    e.dispatch(p,
               {e.tex(q, vec ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32_SFLOAT),
                e.tex(kc, VK_FORMAT_R32G32B32A32_UINT), e.tex(vc, VK_FORMAT_R32G32B32A32_UINT),
                e.tex(bt, VK_FORMAT_R32_UINT), e.ssbo(seqs), e.ssbo(n.dst, true), flags},
               push, gx, gy);
    return;
  }
  // attention_dims.comp: lanes split each key's dims, NG groups of 8 per lane.
  const bool vec = Dk % 8 == 0 && Dv % 8 == 0 && aligned(kc) && aligned(vc);
  const auto per_lane = [&](uint32_t g) { return (g + ls - 1) / ls; };
  const uint32_t groups = std::max<uint32_t>({per_lane(gk), per_lane(gv), 1u});
  // Fewer heads when the lane arrays (4 vec4 per head and group) would pass 16.
  const uint32_t qg = heads_per_group([&](uint32_t c) { return c * groups <= 4; });
  const Pipeline& p =
      e.pipeline("attention_dims",
                 {Bind::storage, Bind::texel, Bind::texel, Bind::storage, Bind::storage, Bind::storage, Bind::storage},
                 {ls, dt_code(kc.desc.dtype), dt_code(vc.desc.dtype), vec ? 1u : 0u, groups, qg, cap});
  const Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 16};  // idempotent flag: no hazard
  uint32_t gy = 1, gx = row_groups(e, static_cast<uint64_t>(N * Hq / qg), gy);
  e.dispatch(p,
             {e.ssbo(q), e.tex(kc, VK_FORMAT_R32G32B32A32_UINT), e.tex(vc, VK_FORMAT_R32G32B32A32_UINT), e.ssbo(bt),
              e.ssbo(seqs), e.ssbo(n.dst, true), flags},
             push, gx, gy);
}

void record_recurrent(const OpEnv& e) {
  const backend::Node& n = e.node;
  // Rows outside every sequence produce 0: clear the result first (the kernels write the rest).
  e.rec.fill_zero(e.alloc(n.dst), n.dst.offset, n.dst.desc.bytes());
  // err[4]: a sequence's slot outside the state (idempotent flag: no hazard).
  const Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 32};
  if (n.op == KILN_OP_CONV1D_CAUSAL) {
    const backend::TensorRef &x = n.src[0], &w = n.src[1], &st = n.src[2], &seqs = n.src[3];
    if (x.desc.ndim != 2 || w.desc.ndim != 2 || st.desc.ndim != 3)
      e.fail("expected x [N, C], w [C, K], state [slots, K-1, C]");
    const int64_t C = x.desc.ne[1], K = w.desc.ne[1], S = seqs.desc.ne[0];
    if (w.desc.ne[0] != C || st.desc.ne[1] != K - 1 || st.desc.ne[2] != C) e.fail("w / state do not match x");
    if (!S || !C) return;
    if (st.desc.ne[0] <= 0) e.fail("the state has no slots");
    // KS specialized (kernel sizes up to 16, vulkan_supports): unrolled window loops (conv1d.comp).
    // Four channels per invocation (conv1d.comp CH) when rows and the state are 16-byte aligned:
    // x, y and the state move 4 channels per texel / vec4. Qwen3.5-sized layer on lavapipe: decode
    // 162-177 -> 117-151 µs, 256-token prefill 4.0-4.2 -> 3.0-3.2 ms.
    const bool ch4 = K <= 16 && C % 4 == 0 && x.offset % 16 == 0 && n.dst.offset % 16 == 0 && st.offset % 16 == 0;
    const Pipeline& p = e.pipeline(
        "conv1d", {Bind::texel, Bind::texel, Bind::storage, Bind::storage, Bind::storage, Bind::texel, Bind::storage},
        {u32(K), ch4 ? 4u : 1u});
    // Rounds of tokens (the state carries over through `st`). With KS specialized the window loops
    // unroll, so an invocation takes one loop pass per token (2 counted, and a margin); were they
    // left as loops, the harness's 9000-token prefill would come out wrong.
    const int64_t N = x.desc.ne[0], per = tokens_per_round(e, N, 2, 16);
    for (int64_t t0 = 0; t0 < std::max<int64_t>(N, 1); t0 += per)
      e.dispatch_items(p,
                       {e.tex(x, ch4 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32_SFLOAT),
                        e.tex(w, VK_FORMAT_R32_SFLOAT), e.ssbo(st, true), e.ssbo(seqs), e.ssbo(n.dst, true),
                        ch4 ? e.tex(st, VK_FORMAT_R32G32B32A32_SFLOAT) : e.tex(w, VK_FORMAT_R32_SFLOAT), flags},
                       {u32(S), u32(C), u32(K), e.off(x, 4), e.off(w, 4), e.off(st, 4), e.off(seqs, 4), e.off(n.dst, 4),
                        u32(t0), u32(per), u32(st.desc.ne[0])},
                       static_cast<uint64_t>(S * C / (ch4 ? 4 : 1)));
    return;
  }
  const backend::TensorRef &q = n.src[0], &k = n.src[1], &v = n.src[2], &g = n.src[3], &beta = n.src[4], &st = n.src[5],
                           &seqs = n.src[6];
  if (q.desc.ndim != 3 || v.desc.ndim != 3 || st.desc.ndim != 4)
    e.fail("expected q/k [N, Hk, Dk], v [N, Hv, Dv], state [slots, Hv, Dk, Dv]");
  const int64_t Hk = q.desc.ne[1], Dk = q.desc.ne[2], Hv = v.desc.ne[1], Dv = v.desc.ne[2], S = seqs.desc.ne[0];
  if (Hk == 0 || Hv % Hk || st.desc.ne[1] != Hv || st.desc.ne[2] != Dk || st.desc.ne[3] != Dv)
    e.fail("state / head shapes do not match");
  if (!S) return;
  // The form per sequence, from its own length only (so a sequence's result never depends on the
  // batch): q_len >= chunk_min runs chunked, the rest recurrent.
  // Where the device's policy keeps the recurrent kernel (KernelPolicy::delta_chunked false, or
  // KILN_VULKAN_DELTA=recurrent), CHUNKED runs it too: both forms compute the same recurrence, to
  // fp32 rounding.
  // A batch of one token per sequence (N == S: q_len >= 1 each) has nothing for AUTO's chunked
  // form, so decode steps record one dispatch, not four (the recurrent kernel before and after the
  // two chunked passes, for one-token chunks).
  const int mode = n.params.mode;
  const bool chunked = e.dev.policy().delta_chunked;
  const int64_t N = q.desc.ne[0];
  uint32_t chunk_min = !chunked                           ? UINT32_MAX
                       : mode == KILN_DELTA_CHUNKED       ? 1u
                       : mode == KILN_DELTA_AUTO && N > S ? 2u
                                                          : UINT32_MAX;
  std::vector<Bind> binds(10, Bind::storage);
  binds[0] = binds[1] = binds[8] = Bind::texel;
  // DK specialized (Dk <= 256): unrolled state loops (gated_delta.comp).
  const bool vec = Dk % 4 == 0 && q.offset % 16 == 0 && k.offset % 16 == 0;
  const uint32_t dk_spec = Dk <= 256 ? static_cast<uint32_t>(Dk) : 0;
  // Value columns per invocation (gated_delta.comp NC): each q/k texel serves 4 columns. Qwen3.5
  // layer (32 heads, Dk = Dv = 128) on lavapipe, 1 / 2 / 4 / 8 columns: 256-token prefill
  // 37.6 / 25.5 / 23.1 / 26.2 ms. With 4, the state is read 4 columns per RGBA32F texel (STV):
  // decode 1.05 -> 0.79 ms. (Storing it through a storage texel view instead of the SSBO was
  // slower: 1.03 -> 1.33-1.41 ms.)
  // Measured on lavapipe only: GPUs keep one column (128 state floats per thread, not 512).
  const uint32_t cols = !dk_spec || !e.dev.policy().cpu_device ? 1 : Dv % 4 == 0 ? 4 : Dv % 2 == 0 ? 2 : 1;
  const bool stv = cols == 4 && st.offset % 16 == 0 && st.desc.bytes() + 256 <= e.dev.policy().texel_reach;
  const Pipeline& p = e.pipeline("gated_delta", binds, {dk_spec, vec ? 1u : 0u, cols, stv ? 1u : 0u});
  const VkFormat qkf = vec ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32_SFLOAT;
  const uint32_t qke = vec ? 16 : 4;
  // Rounds of tokens (the state carries over through `st`). With DK specialized the state loops
  // unroll and an invocation takes one loop pass per token (2 counted, and a margin): a 2K-token
  // prefill is one dispatch, not 9 that each reload the state. Were they left as loops, the
  // harness's 300-token prefill at Dk 128 would come out wrong. Dk > 256 loops 2·Dk + 2 per token.
  const int64_t per = dk_spec ? tokens_per_round(e, N, 2, 16) : tokens_per_round(e, N, 2 * Dk + 2, 2 * Dk);
  const StateWindows sw = state_windows(e, st);
  const Arg stv_arg = stv ? e.tex(st, VK_FORMAT_R32G32B32A32_SFLOAT) : e.tex(g, VK_FORMAT_R32_SFLOAT);
  const uint32_t C = delta_chunk_len(n);
  // The recurrent kernel's dispatches: the sequences shorter than chunk_min, and (lone 0 / 1) the
  // chunked sequences' one-token first / last chunks (delta_chunks.glsl).
  auto recurrent = [&](uint32_t min_len, uint32_t lone) {
    for (int64_t t0 = 0; t0 < std::max<int64_t>(N, 1); t0 += per)
      for (int64_t s0 = 0; s0 < sw.slots; s0 += sw.win) {
        const backend::TensorRef w = sw.at(s0);
        e.dispatch_items(p,
                         {e.tex(q, qkf), e.tex(k, qkf), e.ssbo(v), e.ssbo(g), e.ssbo(beta), e.ssbo(w, true),
                          e.ssbo(seqs), e.ssbo(n.dst, true), stv_arg, flags},
                         {u32(S),
                          u32(Hk),
                          u32(Hv),
                          u32(Dk),
                          u32(Dv),
                          e.off(q, qke),
                          e.off(k, qke),
                          e.off(v, 4),
                          e.off(g, 4),
                          e.off(beta, 4),
                          e.off(w, 4),
                          e.off(seqs, 4),
                          e.off(n.dst, 4),
                          u32(t0),
                          u32(per),
                          u32(s0),
                          sw.end(s0),
                          stv ? e.off(st, 4) : 0u,
                          u32(sw.slots),
                          min_len,
                          lone,
                          C},
                         static_cast<uint64_t>(S * Hv * Dv / cols));
      }
  };
  if (chunk_min != UINT32_MAX && record_delta_chunked(e, chunk_min, [&](uint32_t lone) { recurrent(chunk_min, lone); }))
    return;
  recurrent(UINT32_MAX, 0);
}

void record_moe(const OpEnv& e) {
  const backend::Node& n = e.node;
  if (n.op == KILN_OP_TOP_K) {
    const backend::TensorRef& x = n.src[0];
    const int64_t E = x.desc.last(), N = x.desc.rows(), K = n.params.k;
    if (K <= 0 || K > E) e.fail(fmt::format("k = {} outside [1, {}]", K, E));
    if (N == 0) return;
    const uint32_t values = n.params.mode == kTopKValues ? 1u : 0u;
    const std::vector<uint32_t> push{u32(N), u32(E), u32(K), e.off(x, 4), e.off(n.dst, 4)};
    if (E >= kTopKRowsFrom || K > 64) {
      // Long rows (a vocabulary): a workgroup per row, radix selection (top_k_rows.comp).
      const Pipeline& p = e.pipeline("top_k_rows", {Bind::storage, Bind::storage}, {values});
      const uint64_t maxx = e.dev.context().info().max_groups[0];
      const auto gx = static_cast<uint32_t>(std::min<uint64_t>(static_cast<uint64_t>(N), maxx));
      e.dispatch(p, {e.ssbo(x), e.ssbo(n.dst, true)}, push, gx, static_cast<uint32_t>((N + gx - 1) / gx));
      return;
    }
    // top_k.comp scans the row once per pick: k·(E+1) loop iterations (llvmpipe's limit).
    const uint32_t budget = e.dev.policy().loop_budget;
    if (budget && K * (E + 1) + 8 > budget)
      e.fail(
          fmt::format("k {} over {} values exceeds the loop iterations one kernel invocation may run on this "
                      "device ({}): use a smaller k or a GPU",
                      K, E, budget));
    const Pipeline& p = e.pipeline("top_k", {Bind::storage, Bind::storage}, {values});
    e.dispatch_items(p, {e.ssbo(x), e.ssbo(n.dst, true)}, push, static_cast<uint64_t>(N));
    return;
  }
  if (n.op == KILN_OP_MOE_WEIGHTS) {
    const backend::TensorRef &l = n.src[0], &ids = n.src[1];
    const int64_t E = l.desc.last(), N = l.desc.rows(), K = ids.desc.last();
    bool has_scale = n.n_src > 2 && n.src[2].buffer;
    const backend::TensorRef& sc = has_scale ? n.src[2] : l;
    const Pipeline& p = e.pipeline("moe_weights", std::vector<Bind>(4, Bind::storage), {has_scale ? 1u : 0u});
    e.dispatch_items(p, {e.ssbo(l), e.ssbo(ids), e.ssbo(sc), e.ssbo(n.dst, true)},
                     {u32(N), u32(E), u32(K), (static_cast<uint32_t>(n.params.mode) & KILN_MOE_RENORMALIZE) ? 1u : 0u,
                      e.off(l, 4), e.off(ids, 4), e.off(sc, 4), e.off(n.dst, 4)},
                     static_cast<uint64_t>(N));
    return;
  }
  const backend::TensorRef &y = n.src[0], &w = n.src[1];
  if (y.desc.ndim != 3) e.fail("expected y [N, k, M]");
  const int64_t N = y.desc.ne[0], K = y.desc.ne[1], M = y.desc.ne[2];
  const Pipeline& p = e.pipeline("moe_sum", {Bind::storage, Bind::storage, Bind::storage}, {});
  e.dispatch_items(p, {e.ssbo(y), e.ssbo(w), e.ssbo(n.dst, true)},
                   {u32(N), u32(K), u32(M), e.off(y, 4), e.off(w, 4), e.off(n.dst, 4)}, static_cast<uint64_t>(N * M));
}

}  // namespace kiln::vk
