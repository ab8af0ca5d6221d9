// Hyperparameters of Gemma 4 (gemma4 / gemma4_text) from a Hugging Face config.json (the host has
// already flattened a multimodal wrapper's text_config) or from llama.cpp's GGUF metadata, resolved
// into one row per layer so the graph code never re-derives a layer's shape. Every key is read
// explicitly: defaults differ between implementations (docs: shared/docs/models/gemma4.md §1.2).
#pragma once

#include <cstdint>
#include <kiln/model.hpp>
#include <vector>

namespace gemma4 {

/** What one decoder layer looks like once the config is resolved. */
struct Layer {
  bool sliding = false;   ///< sliding-window attention (else full)
  uint32_t head_dim = 0;  ///< 256 sliding / 512 full on the releases
  uint32_t n_kv_heads = 0;
  bool k_eq_v = false;     ///< no v_proj: V is the raw K projection (full layers of 26B/31B)
  int32_t kv_source = -1;  ///< KV-shared layer: the layer whose cache it reads (-1: its own)
  uint32_t n_ff = 0;       ///< dense MLP width (doubled on KV-shared layers with use_double_wide_mlp)
  float rope_theta = 0;
  uint32_t rope_dims = 0;  ///< rotated span from dim 0 (0: the whole head)
  uint32_t rope_freq = 0;  ///< RoPE pairs with a non-zero frequency (0: all; proportional RoPE)
};

struct Config {
  kiln_checkpoint_format format = KILN_CHECKPOINT_HF;
  uint32_t n_layers = 0, n_embd = 0, n_vocab = 0, n_head = 0;
  uint32_t window = 0;  ///< sliding_window W: a query sees itself and W-1 earlier keys
  uint32_t max_context = 0;
  uint32_t bos_token = UINT32_MAX;
  float norm_eps = 1e-6f;
  float softcap = 0.0f;  ///< final_logit_softcapping (0: none)
  uint32_t ple_dim = 0;  ///< hidden_size_per_layer_input P (0: no per-layer embeddings)
  bool moe = false;      ///< enable_moe_block: routed experts beside the dense MLP on every layer
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0;
  std::vector<Layer> layers;
};

/** Parses `info`; throws kiln::Error(KILN_ERR_INVALID_ARGUMENT / UNSUPPORTED) naming the key. */
Config parse_config(const kiln::ModelInfo& info);

}  // namespace gemma4
