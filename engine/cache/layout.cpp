#include "cache/layout.hpp"

#include <algorithm>

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace kiln::cache {

LayerSpec LayerSpec::from_c(const kiln_layer_cache_desc& d) {
  LayerSpec s;
  s.kind = static_cast<kiln_cache_kind>(d.kind);
  s.n_kv_heads = d.n_kv_heads;
  s.head_dim_k = d.head_dim_k;
  s.head_dim_v = d.head_dim_v;
  s.window = d.window;
  s.shares_with = d.shares_with;
  for (uint32_t i = 0; i < d.n_state && i < 2; ++i) {
    std::vector<int64_t> shape;
    for (int k = 0; k < KILN_MAX_DIMS && d.state_shape[i][k] > 0; ++k) shape.push_back(d.state_shape[i][k]);
    s.state_shapes.push_back(shape);
    s.state_dtypes.push_back(d.state_dtype[i]);
  }
  return s;
}

uint32_t dtype_size(uint32_t t) {
  switch (t) {
    case KILN_DTYPE_F32:
    case KILN_DTYPE_I32:
      return 4;
    case KILN_DTYPE_F16:
    case KILN_DTYPE_BF16:
      return 2;
    default:
      return 0;
  }
}

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

CacheLayout plan_layout(const std::vector<LayerSpec>& layers, const CacheOptions& o) {
  if (o.block_tokens == 0) throw_error("[cache] block_tokens must be at least 1");
  const uint32_t kv_size = dtype_size(o.kv_dtype);
  if (!kv_size || o.kv_dtype == KILN_DTYPE_I32) throw_error("[cache] KV dtype must be f32, f16 or bf16");
  CacheLayout L;
  L.block_tokens = o.block_tokens;
  L.kv_dtype = o.kv_dtype;
  L.layers = layers;
  const auto n = static_cast<int32_t>(layers.size());
  L.layer_group.assign(layers.size(), -1);
  L.layer_source.resize(layers.size());
  for (int32_t i = 0; i < n; ++i) {
    const LayerSpec& s = layers[static_cast<size_t>(i)];
    L.layer_source[static_cast<size_t>(i)] = i;
    const bool kv = s.kind == KILN_CACHE_FULL_KV || s.kind == KILN_CACHE_SLIDING_KV;
    if (s.kind == KILN_CACHE_RECURRENT) {
      for (size_t k = 0; k < s.state_shapes.size(); ++k) {
        uint64_t e = 1;
        for (int64_t d : s.state_shapes[k]) e *= static_cast<uint64_t>(d);
        // The ops keep recurrent state in f32 (kiln_layer_cache_desc.state_dtype); another declared
        // type is refused rather than budgeted as declared and allocated as f32.
        const uint32_t t = k < s.state_dtypes.size() ? s.state_dtypes[k] : uint32_t{KILN_DTYPE_F32};
        if (t != KILN_DTYPE_F32)
          throw_error("[cache] layer {}: recurrent state {} is declared {}; recurrent state must be f32", i, k,
                      kiln_dtype_name(t));
        L.state_bytes_per_slot += e * 4;
      }
      continue;
    }
    if (!kv) continue;
    if (s.shares_with >= 0) {
      if (s.shares_with >= i)
        throw_error("[cache] layer {} shares the KV of layer {}; a layer may only share an earlier layer's", i,
                    s.shares_with);
      const int32_t src = L.layer_source[static_cast<size_t>(s.shares_with)];
      if (L.layer_group[static_cast<size_t>(src)] < 0)
        throw_error("[cache] layer {} shares the KV of layer {}, which has no KV cache", i, s.shares_with);
      L.layer_source[static_cast<size_t>(i)] = src;
      L.layer_group[static_cast<size_t>(i)] = L.layer_group[static_cast<size_t>(src)];
      continue;
    }
    if (!s.n_kv_heads || !s.head_dim_k || !s.head_dim_v)
      throw_error("[cache] layer {}: a KV layer needs n_kv_heads, head_dim_k and head_dim_v (got {}, {}, {})", i,
                  s.n_kv_heads, s.head_dim_k, s.head_dim_v);
    if (s.kind == KILN_CACHE_SLIDING_KV && s.window == 0)
      throw_error("[cache] layer {}: a sliding-window layer needs window > 0", i);
    const uint32_t window = s.kind == KILN_CACHE_SLIDING_KV ? s.window : 0;
    auto g = std::find_if(L.groups.begin(), L.groups.end(),
                          [&](const KvGroup& x) { return x.kind == s.kind && x.window == window; });
    if (g == L.groups.end()) {
      L.groups.push_back({s.kind, window, {}, 0, 0});
      g = L.groups.end() - 1;
    }
    g->layers.push_back(static_cast<uint32_t>(i));
    g->bytes_per_block += uint64_t{o.block_tokens} * s.n_kv_heads * (s.head_dim_k + s.head_dim_v) * kv_size;
    L.layer_group[static_cast<size_t>(i)] = static_cast<int32_t>(g - L.groups.begin());
  }

  // Recurrent slots first: one per sequence that may be alive, and the snapshots'.
  const uint64_t snapshots =
      L.state_bytes_per_slot ? std::max<uint64_t>(o.snapshot_slots, o.snapshot_bytes / L.state_bytes_per_slot) : 0;
  L.n_state_slots =
      L.state_bytes_per_slot ? o.max_seqs + static_cast<uint32_t>(std::min<uint64_t>(snapshots, 1 << 16)) : 0;
  L.state_bytes = uint64_t{L.n_state_slots} * L.state_bytes_per_slot;
  // What each group can ever use: full layers the whole context of every sequence, sliding layers
  // the window plus one step's chunk (and a block of slack for the partly filled ends).
  const uint64_t bt = o.block_tokens;
  std::vector<uint64_t> cap(L.groups.size()), minimum(L.groups.size());
  for (size_t g = 0; g < L.groups.size(); ++g) {
    const KvGroup& G = L.groups[g];
    const uint64_t per_seq =
        G.kind == KILN_CACHE_SLIDING_KV && o.free_out_of_window
            ? std::min(ceil_div(o.max_context, bt), ceil_div(G.window + o.max_batch_tokens, bt) + 1)
            : ceil_div(o.max_context, bt);
    cap[g] = per_seq * o.max_seqs;
    minimum[g] = per_seq;
  }
  uint64_t need_min = L.state_bytes;
  for (size_t g = 0; g < L.groups.size(); ++g) need_min += minimum[g] * L.groups[g].bytes_per_block;
  if (o.budget_bytes < need_min)
    throw_error(
        "[cache] the cache budget of {} bytes cannot hold one {}-token sequence ({} bytes needed{}); raise "
        "cache.memory or lower max_context",
        o.budget_bytes, o.max_context, need_min,
        L.n_state_slots ? fmt::format(", including {} recurrent state slots", L.n_state_slots) : "");
  // Equal block counts for every group (each block covers the same tokens everywhere), groups that
  // reach their cap give the rest back to the others.
  uint64_t left = o.budget_bytes - L.state_bytes;
  std::vector<bool> done(L.groups.size(), false);
  for (size_t round = 0; round <= L.groups.size(); ++round) {
    uint64_t per_block = 0;
    for (size_t g = 0; g < L.groups.size(); ++g)
      if (!done[g]) per_block += L.groups[g].bytes_per_block;
    if (!per_block) break;
    const uint64_t count = left / per_block;
    bool capped = false;
    for (size_t g = 0; g < L.groups.size(); ++g)
      if (!done[g] && count >= cap[g]) {
        done[g] = true;
        capped = true;
        L.groups[g].n_blocks = static_cast<uint32_t>(std::min<uint64_t>(cap[g], UINT32_MAX / 2));
        left -= L.groups[g].n_blocks * L.groups[g].bytes_per_block;
      }
    if (!capped) {
      for (size_t g = 0; g < L.groups.size(); ++g)
        if (!done[g]) L.groups[g].n_blocks = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX / 2));
      break;
    }
  }
  for (const auto& g : L.groups) L.kv_bytes += g.n_blocks * g.bytes_per_block;
  return L;
}

uint64_t budget_from_config(const CacheConfig& c, uint64_t total, uint64_t free) {
  if (c.memory_bytes) return c.memory_bytes;
  const double allowed = c.memory_fraction * static_cast<double>(total);
  const double used = static_cast<double>(total > free ? total - free : 0);
  return allowed > used ? static_cast<uint64_t>(allowed - used) : 0;
}

}  // namespace kiln::cache
