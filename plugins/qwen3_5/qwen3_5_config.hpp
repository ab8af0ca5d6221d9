// Hyperparameters of Qwen3.5 (dense and MoE) and Qwen3-Next from a Hugging Face config.json (the
// host has flattened a multimodal wrapper's text_config) or from llama.cpp's GGUF metadata, resolved
// into one row per layer. Every key is read explicitly (shared/docs/models/qwen3_5.md §1.2).
#pragma once

#include <cstdint>
#include <kiln/model.hpp>
#include <vector>

namespace qwen3_5 {

enum class Family { qwen3_5, qwen3_5_moe, qwen3_next };

struct Layer {
  bool linear = false;  ///< Gated DeltaNet (else gated full attention)
  bool moe = false;     ///< sparse MoE block (else dense SwiGLU MLP)
};

struct Config {
  kiln_checkpoint_format format = KILN_CHECKPOINT_HF;
  Family family = Family::qwen3_5;
  const char* arch_name = "qwen3_5";  ///< static storage
  uint32_t n_layers = 0, n_embd = 0, n_vocab = 0, max_context = 0;
  uint32_t bos_token = UINT32_MAX;
  float norm_eps = 1e-6f;
  bool tied = false;           ///< HF: tie_word_embeddings (GGUF: no output.weight)
  bool norms_shifted = false;  ///< GGUF: the zero-centred norms were stored as 1 + w (plain RMSNorm)
  // Gated full attention.
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  bool attn_gate = true;  ///< q_proj packs [query | gate] per head; output × sigmoid(gate)
  float rope_theta = 0;
  uint32_t rope_dims = 0;  ///< rotated dims from 0 (partial NeoX RoPE)
  // Gated DeltaNet.
  uint32_t k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  bool tiled_heads = false;  ///< GGUF qwen35*: value head h reads key head h % H_k (HF: h / R)
  bool stored_decay = false; ///< GGUF: ssm_a holds -exp(A_log) (HF: A_log)
  // MLPs.
  uint32_t n_ff = 0;  ///< dense MLP width
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0, n_ff_shared = 0;
  bool norm_topk = true;
  std::vector<Layer> layers;

  uint32_t key_dim() const { return k_heads * k_dim; }
  uint32_t value_dim() const { return v_heads * v_dim; }
  uint32_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

/** Parses `info`; throws kiln::Error(KILN_ERR_INVALID_ARGUMENT / UNSUPPORTED) naming the key. */
Config parse_config(const kiln::ModelInfo& info);

}  // namespace qwen3_5
