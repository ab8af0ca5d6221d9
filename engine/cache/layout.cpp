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
  s.kv_sensitive = KILN_FITS(&d, kiln_layer_cache_desc, flags) && (d.flags & KILN_LAYER_KV_SENSITIVE);
  for (uint32_t i = 0; i < d.n_state && i < 2; ++i) {
    std::vector<int64_t> shape;
    for (int k = 0; k < KILN_MAX_DIMS && d.state_shape[i][k] > 0; ++k) shape.push_back(d.state_shape[i][k]);
    s.state_shapes.push_back(shape);
    s.state_dtypes.push_back(d.state_dtype[i]);
  }
  return s;
}

uint64_t kv_token_bytes(const LayerSpec& spec, uint32_t t) {
  if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16 && t != KILN_DTYPE_KV_Q8 &&
      t != KILN_DTYPE_KV_Q4)
    return 0;
  const DType d = dtype_from_kiln(t);
  const uint64_t k = row_bytes(d, spec.head_dim_k), v = row_bytes(d, spec.head_dim_v);
  return k && v ? uint64_t{spec.n_kv_heads} * (k + v) : 0;
}

namespace {

bool is_kv_layer(const LayerSpec& s) {
  return s.kind == KILN_CACHE_FULL_KV || s.kind == KILN_CACHE_SLIDING_KV;
}

/**
 * Each KV layer's dtype: cache.kv_layers where it names the layer; else, with a quantized default,
 * 16 bits for the layer the last attention layer reads (errors there reach the logits directly),
 * for layers the model marks sensitive, and for head dims the formats cannot hold; else the default.
 * Sharing layers read their source's storage and dtype.
 */
void choose_kv_dtypes(CacheLayout& L, const CacheOptions& o) {
  const auto n = L.layers.size();
  L.layer_kv_dtype.assign(n, o.kv_dtype);
  L.layer_kv_reason.assign(n, KvDtypeReason::none);
  const bool quantized = o.kv_dtype == KILN_DTYPE_KV_Q8 || o.kv_dtype == KILN_DTYPE_KV_Q4;
  int32_t last = -1;
  for (size_t i = 0; i < n; ++i)
    if (is_kv_layer(L.layers[i])) last = L.layer_source[i];
  for (const auto& [layer, t] : o.kv_layers) {
    if (layer >= n) throw_error("[cache] cache.kv_layers names layer {}; the model has {} layers", layer, n);
    const LayerSpec& s = L.layers[layer];
    if (!is_kv_layer(s)) throw_error("[cache] cache.kv_layers names layer {}, which has no KV cache", layer);
    if (L.layer_source[layer] != static_cast<int32_t>(layer))
      throw_error("[cache] cache.kv_layers names layer {}, which reads layer {}'s KV cache: name layer {}", layer,
                  L.layer_source[layer], L.layer_source[layer]);
    if (!kv_token_bytes(s, t))
      throw_error(
          "[cache] cache.kv_layers: layer {} cannot be stored as {} (head dims {}/{}; q8 and q4 need multiples "
          "of 8)",
          layer, kv_dtype_yaml_name(dtype_from_kiln(t)), s.head_dim_k, s.head_dim_v);
  }
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& s = L.layers[i];
    if (!is_kv_layer(s) || L.layer_source[i] != static_cast<int32_t>(i)) continue;
    auto& t = L.layer_kv_dtype[i];
    auto& why = L.layer_kv_reason[i];
    why = KvDtypeReason::config;
    if (auto it = o.kv_layers.find(static_cast<uint32_t>(i)); it != o.kv_layers.end()) {
      t = it->second;
      why = KvDtypeReason::explicit_layer;
    } else if (quantized && static_cast<int32_t>(i) == last) {
      t = o.kv_keep_dtype;
      why = KvDtypeReason::last_layer;
    } else if (quantized && s.kv_sensitive) {
      t = o.kv_keep_dtype;
      why = KvDtypeReason::sensitive;
    } else if (!kv_token_bytes(s, t)) {
      t = o.kv_keep_dtype;
      why = KvDtypeReason::head_dims;
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (is_kv_layer(L.layers[i]) && L.layer_source[i] != static_cast<int32_t>(i)) {
      L.layer_kv_dtype[i] = L.layer_kv_dtype[static_cast<size_t>(L.layer_source[i])];
      L.layer_kv_reason[i] = L.layer_kv_reason[static_cast<size_t>(L.layer_source[i])];
    }
}

}  // namespace

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

CacheLayout plan_layout(const std::vector<LayerSpec>& layers, const CacheOptions& o) {
  if (o.block_tokens == 0) throw_error("[cache] block_tokens must be at least 1");
  for (uint32_t t : {o.kv_dtype, o.kv_keep_dtype})
    if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16 && t != KILN_DTYPE_KV_Q8 &&
        t != KILN_DTYPE_KV_Q4)
      throw_error("[cache] KV dtype must be f32, f16, bf16, q8 or q4");
  CacheLayout L;
  L.block_tokens = o.block_tokens;
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
    L.layer_group[static_cast<size_t>(i)] = static_cast<int32_t>(g - L.groups.begin());
  }
  choose_kv_dtypes(L, o);
  for (KvGroup& g : L.groups)
    for (uint32_t l : g.layers) g.bytes_per_block += o.block_tokens * kv_token_bytes(L.layers[l], L.layer_kv_dtype[l]);

  // Recurrent slots first: one per sequence that may be alive, and the snapshots'.
  const uint64_t snapshots =
      L.state_bytes_per_slot ? std::max<uint64_t>(o.snapshot_slots, o.snapshot_bytes / L.state_bytes_per_slot) : 0;
  L.n_state_slots =
      L.state_bytes_per_slot ? o.max_seqs + static_cast<uint32_t>(std::min<uint64_t>(snapshots, 1 << 16)) : 0;
  L.state_bytes = uint64_t{L.n_state_slots} * L.state_bytes_per_slot;
  // What each group can ever use: every sequence's blocks_per_sequence.
  std::vector<uint64_t> cap(L.groups.size()), minimum(L.groups.size());
  for (size_t g = 0; g < L.groups.size(); ++g) {
    const uint64_t per_seq = blocks_per_sequence(L.groups[g], o);
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

uint64_t blocks_per_sequence(const KvGroup& g, const CacheOptions& o) {
  const uint64_t bt = o.block_tokens;
  return g.kind == KILN_CACHE_SLIDING_KV && o.free_out_of_window
             ? std::min(ceil_div(o.max_context, bt), ceil_div(g.window + o.max_batch_tokens, bt) + 1)
             : ceil_div(o.max_context, bt);
}

uint64_t CacheLayout::bytes_per_token() const {
  uint64_t b = 0;
  for (const KvGroup& g : groups) b += g.bytes_per_block / block_tokens;
  return b;
}

uint64_t CacheLayout::token_capacity() const {
  uint64_t full = UINT64_MAX, sliding = UINT64_MAX;
  for (const KvGroup& g : groups)
    (g.kind == KILN_CACHE_FULL_KV ? full : sliding) =
        std::min(g.kind == KILN_CACHE_FULL_KV ? full : sliding, uint64_t{g.n_blocks} * block_tokens);
  return full != UINT64_MAX ? full : sliding != UINT64_MAX ? sliding : 0;
}

std::string CacheLayout::describe_kv_dtypes() const {
  // Runs of consecutive storage layers with the same dtype and reason.
  std::string out;
  static constexpr const char* kWhy[] = {"", "", "cache.kv_layers", "last layer", "marked sensitive", "head dims"};
  size_t i = 0;
  const auto owner = [&](size_t l) {
    return l < layers.size() && is_kv_layer(layers[l]) && layer_source[l] == static_cast<int32_t>(l);
  };
  while (i < layers.size()) {
    if (!owner(i)) {
      ++i;
      continue;
    }
    size_t j = i, last = i;
    while (j < layers.size() &&
           (!owner(j) || (layer_kv_dtype[j] == layer_kv_dtype[i] && layer_kv_reason[j] == layer_kv_reason[i]))) {
      if (owner(j)) last = j;
      ++j;
    }
    const char* why = kWhy[static_cast<int>(layer_kv_reason[i])];
    out += fmt::format("{}{} ({}{}{}{})", out.empty() ? "" : ", ",
                       kv_dtype_yaml_name(dtype_from_kiln(layer_kv_dtype[i])), last == i ? "layer " : "layers ",
                       last == i ? std::to_string(i) : fmt::format("{}-{}", i, last), *why ? ": " : "", why);
    i = last + 1;
  }
  return out;
}

uint64_t budget_from_config(const CacheConfig& c, uint64_t total, uint64_t free) {
  if (c.memory_bytes) return c.memory_bytes;
  const double allowed = c.memory_fraction * static_cast<double>(total);
  const double used = static_cast<double>(total > free ? total - free : 0);
  return allowed > used ? static_cast<uint64_t>(allowed - used) : 0;
}

}  // namespace kiln::cache
