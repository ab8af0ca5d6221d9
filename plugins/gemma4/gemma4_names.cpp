#include "gemma4_names.hpp"

namespace gemma4 {
namespace {

const kiln::NameRow<Role> kNames[] = {
    {Role::token_embd, "model.embed_tokens.weight", "token_embd.weight"},
    {Role::output_norm, "model.norm.weight", "output_norm.weight"},
    {Role::ple_embd, "model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {Role::ple_model_proj, "model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {Role::ple_proj_norm, "model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    {Role::attn_norm, "model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight"},
    {Role::attn_q, "model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight"},
    {Role::attn_k, "model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight"},
    {Role::attn_v, "model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight"},
    {Role::attn_output, "model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight"},
    {Role::attn_q_norm, "model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight"},
    {Role::attn_k_norm, "model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight"},
    {Role::post_attn_norm, "model.layers.%d.post_attention_layernorm.weight", "blk.%d.post_attention_norm.weight"},
    {Role::ffn_norm, "model.layers.%d.pre_feedforward_layernorm.weight", "blk.%d.ffn_norm.weight"},
    {Role::post_ffn_norm, "model.layers.%d.post_feedforward_layernorm.weight", "blk.%d.post_ffw_norm.weight"},
    {Role::ffn_gate, "model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight"},
    {Role::ffn_up, "model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight"},
    {Role::ffn_down, "model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight"},
    {Role::layer_scalar, "model.layers.%d.layer_scalar", "blk.%d.layer_output_scale.weight"},
    {Role::ple_gate, "model.layers.%d.per_layer_input_gate.weight", "blk.%d.inp_gate.weight"},
    {Role::ple_proj, "model.layers.%d.per_layer_projection.weight", "blk.%d.proj.weight"},
    {Role::ple_post_norm, "model.layers.%d.post_per_layer_input_norm.weight", "blk.%d.post_norm.weight"},
    {Role::moe_router, "model.layers.%d.router.proj.weight", "blk.%d.ffn_gate_inp.weight"},
    {Role::moe_router_scale, "model.layers.%d.router.scale", "blk.%d.ffn_gate_inp.scale"},
    {Role::moe_expert_scale, "model.layers.%d.router.per_expert_scale", "blk.%d.ffn_down_exps.scale"},
    {Role::moe_gate_up, "model.layers.%d.experts.gate_up_proj", "blk.%d.ffn_gate_up_exps.weight"},
    {Role::moe_gate, nullptr, "blk.%d.ffn_gate_exps.weight"},
    {Role::moe_up, nullptr, "blk.%d.ffn_up_exps.weight"},
    {Role::moe_down, "model.layers.%d.experts.down_proj", "blk.%d.ffn_down_exps.weight"},
    {Role::moe_norm, "model.layers.%d.pre_feedforward_layernorm_2.weight", "blk.%d.pre_ffw_norm_2.weight"},
    {Role::post_ffn_norm_1, "model.layers.%d.post_feedforward_layernorm_1.weight", "blk.%d.post_ffw_norm_1.weight"},
    {Role::post_ffn_norm_2, "model.layers.%d.post_feedforward_layernorm_2.weight", "blk.%d.post_ffw_norm_2.weight"},
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Role::count), "one row per role");

}  // namespace

kiln::NameTable<Role> name_table(kiln_checkpoint_format format) {
  return kiln::NameTable<Role>(kNames, format);
}

}  // namespace gemma4
