// How a model's per-layer cache kinds become storage: layers with the same kind and window form a
// group sharing one block pool and one block table per sequence (a block id addresses the same
// token range in every layer of its group); recurrent layers get per-sequence state slots. The
// memory budget (YAML cache.memory: bytes or a fraction of device memory) decides the pool sizes.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace kiln {
struct CacheConfig;
}

namespace kiln::cache {

/** Host copy of kiln_layer_cache_desc. */
struct LayerSpec {
  kiln_cache_kind kind = KILN_CACHE_NONE;
  uint32_t n_kv_heads = 0, head_dim_k = 0, head_dim_v = 0;
  uint32_t window = 0;                             ///< SLIDING_KV: tokens a query sees, itself included
  int32_t shares_with = -1;                        ///< reads another layer's KV (no storage of its own)
  std::vector<std::vector<int64_t>> state_shapes;  ///< RECURRENT: per-sequence shapes
  std::vector<uint32_t> state_dtypes;              ///< kiln_dtype per state
  bool kv_sensitive = false;                       ///< KILN_LAYER_KV_SENSITIVE: kept at 16 bits when quantizing

  static LayerSpec from_c(const kiln_layer_cache_desc& d);
};

struct CacheOptions {
  uint32_t block_tokens = 16;
  uint64_t budget_bytes = 0;           ///< KV blocks + recurrent slots together
  uint32_t kv_dtype = KILN_DTYPE_F32;  ///< f32, f16, bf16, kv_q8 or kv_q4 (YAML cache.kv_dtype)
  /** Per-layer dtypes that override everything else (YAML cache.kv_layers, indices resolved). */
  std::map<uint32_t, uint32_t> kv_layers;
  /** What the last KV layer and sensitive layers get when kv_dtype is quantized. */
  uint32_t kv_keep_dtype = KILN_DTYPE_F16;
  uint32_t max_seqs = kDefaultMaxSeqs;  ///< sequences alive at once (a recurrent slot each)
  uint32_t snapshot_slots = 0;          ///< recurrent slots beyond max_seqs, for state snapshots
  uint64_t snapshot_bytes = 0;          ///< or as many as fit in these bytes (whichever is more)
  uint32_t max_context = 4096;          ///< tokens per sequence
  uint32_t max_batch_tokens = kDefaultMaxBatchTokens;
  /** Sliding-window layers return blocks that left the window to the pool (off: keep them; tests). */
  bool free_out_of_window = true;
};

struct KvGroup {
  kiln_cache_kind kind = KILN_CACHE_FULL_KV;
  uint32_t window = 0;           ///< 0 for full attention
  std::vector<uint32_t> layers;  ///< layers with storage in this group
  uint64_t bytes_per_block = 0;  ///< K + V of every layer in the group, one block
  uint32_t n_blocks = 0;
};

/** Why a layer's KV dtype is what it is (startup log). */
enum class KvDtypeReason { none, config, explicit_layer, last_layer, sensitive, head_dims };

struct CacheLayout {
  uint32_t block_tokens = 16;
  std::vector<uint32_t> layer_kv_dtype;        ///< per layer with KV: its k / v dtype (a sharing layer: its source's)
  std::vector<KvDtypeReason> layer_kv_reason;  ///< per layer: why
  std::vector<KvGroup> groups;
  std::vector<int32_t> layer_group;   ///< per layer: its KV group (a sharing layer: its source's), -1 none
  std::vector<int32_t> layer_source;  ///< per layer: the layer whose storage it reads (itself if own)
  std::vector<LayerSpec> layers;
  uint32_t n_state_slots = 0;
  uint64_t state_bytes_per_slot = 0;  ///< all recurrent layers, one sequence
  uint64_t kv_bytes = 0, state_bytes = 0;

  uint64_t total_bytes() const { return kv_bytes + state_bytes; }
  bool has_recurrent() const { return state_bytes_per_slot > 0; }
  /** KV bytes one token takes in every layer with storage (the chosen formats' row sizes). */
  uint64_t bytes_per_token() const;
  /**
   * Tokens the KV cache holds over all sequences: what the full-attention groups' blocks hold (the
   * fewest of them), or, with sliding-window layers only, what those hold; 0 without KV layers.
   */
  uint64_t token_capacity() const;
  /** "q8 (layers 0-26), f16 (27: last layer)" for the startup log. */
  std::string describe_kv_dtypes() const;
};

/**
 * Blocks one sequence can ever hold in group `g`: full layers the whole context, sliding layers (that
 * return blocks) the window plus one step's chunk and a block of slack for the partly filled ends.
 */
uint64_t blocks_per_sequence(const KvGroup& g, const CacheOptions& options);

/** Bytes of one token's K and V in a layer of `spec` stored as `kiln_dtype` (0: not storable). */
uint64_t kv_token_bytes(const LayerSpec& spec, uint32_t kiln_dtype);

/**
 * Sizes the pools. Throws HostError("[cache] ...") when the declarations are inconsistent or the
 * budget cannot hold even one full-length sequence, saying how much is needed.
 */
CacheLayout plan_layout(const std::vector<LayerSpec>& layers, const CacheOptions& options);

/**
 * The byte budget from YAML: cache.memory as bytes, or as a fraction of the device's total memory
 * minus what is already in use (weights are loaded first), never below zero.
 */
uint64_t budget_from_config(const CacheConfig& config, uint64_t device_total, uint64_t device_free);

}  // namespace kiln::cache
