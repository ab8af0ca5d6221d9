// The tensor-name table of Qwen3.5 / Qwen3.5-MoE / Qwen3-Next: one row per tensor role with its
// Hugging Face name (text-only prefix "model."; the released wrappers' "model.language_model." is
// applied by NameTable::rewrite_prefix) and its llama.cpp GGUF name.
#pragma once

#include <kiln/names.hpp>

namespace qwen3_5 {

enum class Role {
  token_embd,
  output_norm,
  output,
  attn_norm,  ///< input_layernorm
  ffn_norm,   ///< post_attention_layernorm
  // Gated full attention.
  attn_q,  ///< [n_head · 2 · head_dim, H]: per head [query | gate]
  attn_k,
  attn_v,
  attn_output,
  attn_q_norm,
  attn_k_norm,
  // Gated DeltaNet.
  lin_qkv,   ///< Qwen3.5: [2·key_dim + value_dim, H], rows q | k | v
  lin_z,     ///< Qwen3.5: [value_dim, H]
  lin_b,     ///< Qwen3.5: [H_v, H]
  lin_a,     ///< Qwen3.5: [H_v, H]
  lin_qkvz,  ///< Qwen3-Next: fused, grouped by key head
  lin_ba,    ///< Qwen3-Next (HF and GGUF): fused, grouped by key head
  lin_conv,  ///< [conv_dim, 1, K] (GGUF: [conv_dim, K])
  lin_a_log,  ///< HF: A_log; GGUF: ssm_a = -exp(A_log)
  lin_dt_bias,
  lin_norm,  ///< gated RMSNorm over d_v (plain weight)
  lin_out,
  // Dense MLP.
  ffn_gate,
  ffn_up,
  ffn_down,
  // Sparse MoE.
  moe_router,
  moe_gate_up,     ///< fused [E, 2·I, H], gate rows first
  moe_down_fused,  ///< fused [E, H, I]
  moe_gate,        ///< per expert (stacked by the host) or GGUF [E, I, H]
  moe_up,
  moe_down,
  shexp_gate,
  shexp_up,
  shexp_down,
  shexp_router,  ///< shared_expert_gate [1, H]
  count
};

/** The HF and GGUF spellings of every role. */
kiln::NameTable<Role> name_table(kiln_checkpoint_format format);

}  // namespace qwen3_5
