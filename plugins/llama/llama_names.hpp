// The tensor-name table of the llama family: one row per tensor role, with its Hugging Face and
// GGUF checkpoint names ("%d" = layer, "{}" = expert for per-expert checkpoints that the host
// stacks). The graph code asks for roles, never for spelled-out names.
#pragma once

#include <kiln/names.hpp>

namespace llama {

enum class Role {
  token_embd,
  output_norm,
  output,
  attn_norm,
  attn_q,
  attn_k,
  attn_v,
  attn_output,
  attn_q_bias,
  attn_k_bias,
  attn_v_bias,
  attn_q_norm,
  attn_k_norm,
  ffn_norm,
  ffn_gate,
  ffn_up,
  ffn_down,
  moe_router,
  moe_gate_up,     ///< fused [E, 2·I, D] (transformers >= 5): gate rows first, then up
  moe_down_fused,  ///< [E, D, I] as one tensor (transformers >= 5, GGUF)
  moe_gate,        ///< [E, I, D]: GGUF ffn_gate_exps, or HF per-expert tensors stacked by the host
  moe_up,
  moe_down,  ///< HF per-expert down_proj stacked by the host
  count
};

/** The HF and GGUF spellings of every role (kiln::NameTable, sdk/include/kiln/names.hpp). */
kiln::NameTable<Role> name_table(kiln_checkpoint_format format);

}  // namespace llama
