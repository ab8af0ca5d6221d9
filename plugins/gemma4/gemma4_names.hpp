// The tensor-name table of Gemma 4: one row per tensor role with its Hugging Face name (text-only
// export prefix "model."; the released multimodal wrapper's "model.language_model." is applied by
// NameTable::rewrite_prefix) and its llama.cpp GGUF name. The graph code asks for roles only.
#pragma once

#include <kiln/names.hpp>

namespace gemma4 {

enum class Role {
  token_embd,
  output_norm,
  ple_embd,        ///< per-layer embeddings [V, L·P] (kept on the host: one row per token is read)
  ple_model_proj,  ///< [L·P, H]
  ple_proj_norm,   ///< [P]
  attn_norm,
  attn_q,
  attn_k,
  attn_v,
  attn_output,
  attn_q_norm,
  attn_k_norm,
  post_attn_norm,
  ffn_norm,       ///< pre_feedforward_layernorm: into the dense MLP
  post_ffn_norm,  ///< post_feedforward_layernorm: on the dense MLP (or on dense + experts with MoE)
  ffn_gate,
  ffn_up,
  ffn_down,
  layer_scalar,   ///< [1]: multiplies the residual stream at the end of the layer
  ple_gate,       ///< per_layer_input_gate [P, H]
  ple_proj,       ///< per_layer_projection [H, P]
  ple_post_norm,  ///< post_per_layer_input_norm [H]
  moe_router,     ///< router.proj [E, H]
  moe_router_scale,
  moe_expert_scale,
  moe_gate_up,  ///< [E, 2·I, H], gate rows first
  moe_gate,     ///< [E, I, H] (GGUF files that keep gate and up apart)
  moe_up,
  moe_down,         ///< [E, H, I]
  moe_norm,         ///< pre_feedforward_layernorm_2: into the experts
  post_ffn_norm_1,  ///< after the dense MLP, MoE layers
  post_ffn_norm_2,  ///< after the experts
  count
};

/** The HF and GGUF spellings of every role. */
kiln::NameTable<Role> name_table(kiln_checkpoint_format format);

}  // namespace gemma4
