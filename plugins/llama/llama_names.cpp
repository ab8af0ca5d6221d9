#include "llama_names.hpp"

namespace llama {
namespace {

const kiln::NameRow<Role> kNames[] = {
    {Role::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
    {Role::output_norm, "model.norm.weight", "output_norm.weight"},
    {Role::output, "lm_head.weight", "output.weight"},
    {Role::attn_norm, "model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight"},
    {Role::attn_q, "model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight"},
    {Role::attn_k, "model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight"},
    {Role::attn_v, "model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight"},
    {Role::attn_output, "model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight"},
    {Role::attn_q_bias, "model.layers.%d.self_attn.q_proj.bias", "blk.%d.attn_q.bias"},
    {Role::attn_k_bias, "model.layers.%d.self_attn.k_proj.bias", "blk.%d.attn_k.bias"},
    {Role::attn_v_bias, "model.layers.%d.self_attn.v_proj.bias", "blk.%d.attn_v.bias"},
    {Role::attn_q_norm, "model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight"},
    {Role::attn_k_norm, "model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight"},
    {Role::ffn_norm, "model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight"},
    {Role::ffn_gate, "model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight"},
    {Role::ffn_up, "model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight"},
    {Role::ffn_down, "model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight"},
    {Role::moe_router, "model.layers.%d.mlp.gate.weight", "blk.%d.ffn_gate_inp.weight"},
    {Role::moe_gate_up, "model.layers.%d.mlp.experts.gate_up_proj", nullptr},
    {Role::moe_down_fused, "model.layers.%d.mlp.experts.down_proj", "blk.%d.ffn_down_exps.weight"},
    {Role::moe_gate, "model.layers.%d.mlp.experts.{}.gate_proj.weight", "blk.%d.ffn_gate_exps.weight"},
    {Role::moe_up, "model.layers.%d.mlp.experts.{}.up_proj.weight", "blk.%d.ffn_up_exps.weight"},
    {Role::moe_down, "model.layers.%d.mlp.experts.{}.down_proj.weight", nullptr},
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Role::count), "one row per role");

}  // namespace

kiln::NameTable<Role> name_table(kiln_checkpoint_format format) {
  return kiln::NameTable<Role>(kNames, format);
}

}  // namespace llama
