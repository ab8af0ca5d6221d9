#include "qwen3_5_names.hpp"

namespace qwen3_5 {
namespace {

const kiln::NameRow<Role> kNames[] = {
    {Role::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
    {Role::output_norm, "model.norm.weight", "output_norm.weight"},
    {Role::output, "lm_head.weight", "output.weight"},
    {Role::attn_norm, "model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight"},
    {Role::ffn_norm, "model.layers.%d.post_attention_layernorm.weight", "blk.%d.post_attention_norm.weight"},
    {Role::attn_q, "model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight"},
    {Role::attn_k, "model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight"},
    {Role::attn_v, "model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight"},
    {Role::attn_output, "model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight"},
    {Role::attn_q_norm, "model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight"},
    {Role::attn_k_norm, "model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight"},
    {Role::lin_qkv, "model.layers.%d.linear_attn.in_proj_qkv.weight", "blk.%d.attn_qkv.weight"},
    {Role::lin_z, "model.layers.%d.linear_attn.in_proj_z.weight", "blk.%d.attn_gate.weight"},
    {Role::lin_b, "model.layers.%d.linear_attn.in_proj_b.weight", "blk.%d.ssm_beta.weight"},
    {Role::lin_a, "model.layers.%d.linear_attn.in_proj_a.weight", "blk.%d.ssm_alpha.weight"},
    {Role::lin_qkvz, "model.layers.%d.linear_attn.in_proj_qkvz.weight", nullptr},
    {Role::lin_ba, "model.layers.%d.linear_attn.in_proj_ba.weight", "blk.%d.ssm_ba.weight"},
    {Role::lin_conv, "model.layers.%d.linear_attn.conv1d.weight", "blk.%d.ssm_conv1d.weight"},
    {Role::lin_a_log, "model.layers.%d.linear_attn.A_log", "blk.%d.ssm_a"},
    {Role::lin_dt_bias, "model.layers.%d.linear_attn.dt_bias", "blk.%d.ssm_dt.bias"},
    {Role::lin_norm, "model.layers.%d.linear_attn.norm.weight", "blk.%d.ssm_norm.weight"},
    {Role::lin_out, "model.layers.%d.linear_attn.out_proj.weight", "blk.%d.ssm_out.weight"},
    {Role::ffn_gate, "model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight"},
    {Role::ffn_up, "model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight"},
    {Role::ffn_down, "model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight"},
    {Role::moe_router, "model.layers.%d.mlp.gate.weight", "blk.%d.ffn_gate_inp.weight"},
    {Role::moe_gate_up, "model.layers.%d.mlp.experts.gate_up_proj", "blk.%d.ffn_gate_up_exps.weight"},
    {Role::moe_down_fused, "model.layers.%d.mlp.experts.down_proj", "blk.%d.ffn_down_exps.weight"},
    {Role::moe_gate, "model.layers.%d.mlp.experts.{}.gate_proj.weight", "blk.%d.ffn_gate_exps.weight"},
    {Role::moe_up, "model.layers.%d.mlp.experts.{}.up_proj.weight", "blk.%d.ffn_up_exps.weight"},
    {Role::moe_down, "model.layers.%d.mlp.experts.{}.down_proj.weight", nullptr},
    {Role::shexp_gate, "model.layers.%d.mlp.shared_expert.gate_proj.weight", "blk.%d.ffn_gate_shexp.weight"},
    {Role::shexp_up, "model.layers.%d.mlp.shared_expert.up_proj.weight", "blk.%d.ffn_up_shexp.weight"},
    {Role::shexp_down, "model.layers.%d.mlp.shared_expert.down_proj.weight", "blk.%d.ffn_down_shexp.weight"},
    {Role::shexp_router, "model.layers.%d.mlp.shared_expert_gate.weight", "blk.%d.ffn_gate_inp_shexp.weight"},
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Role::count), "one row per role");

}  // namespace

kiln::NameTable<Role> name_table(kiln_checkpoint_format format) {
  return kiln::NameTable<Role>(kNames, format);
}

}  // namespace qwen3_5
