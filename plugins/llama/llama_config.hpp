// Hyperparameters of the llama family (llama, qwen2, qwen3, qwen3_moe) read from a Hugging Face
// config.json or from GGUF metadata. Config keys for both sources sit here, beside the tensor-name
// table (llama_names.hpp), so supporting a new checkpoint flavour touches these two files only.
#pragma once

#include <kiln/model.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace llama {

enum class Arch { llama, qwen2, qwen3, qwen3_moe };

struct Config {
  Arch arch = Arch::llama;
  const char* arch_name = "llama";        ///< static storage (kiln_model_hparams.architecture)
  kiln_checkpoint_format format = KILN_CHECKPOINT_HF;
  uint32_t n_layers = 0, n_embd = 0, n_ff = 0, n_vocab = 0;
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t max_context = 2048;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  kiln_rope_mode rope_mode = KILN_ROPE_NEOX;
  bool qkv_bias = false;                  ///< qwen2
  bool qk_norm = false;                   ///< qwen3, qwen3_moe
  bool tied_embeddings = false;           ///< lm_head = embed_tokens
  uint32_t bos_token = UINT32_MAX;
  // Mixture of experts (qwen3_moe).
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0;
  bool norm_topk = true;
  std::vector<bool> moe_layer;            ///< per layer: sparse MoE block instead of the dense MLP
  // Sliding-window attention (qwen2/qwen3 with use_sliding_window, or layer_types).
  std::vector<uint32_t> window;           ///< per layer: 0 = full attention
};

/** Parses `info`; throws kiln::Error(KILN_ERR_INVALID_ARGUMENT / UNSUPPORTED) naming the key. */
Config parse_config(const kiln::ModelInfo& info);

}  // namespace llama
