#include "qwen3_5_config.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace qwen3_5 {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& msg, kiln_status st = KILN_ERR_INVALID_ARGUMENT) {
  throw kiln::Error(st, "[qwen3_5] " + msg);
}

/** Reads keys of one JSON object (config.json, or GGUF metadata with an "<arch>." prefix). */
struct Reader {
  const json& j;
  std::string prefix;
  std::string where;

  const json* find(const std::string& key) const {
    auto it = j.find(prefix + key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(where + " key '" + prefix + key + "' is missing");
    return *v;
  }
  uint32_t u32(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(where + " key '" + prefix + key + "' must be a non-negative integer, not " + v.dump());
    return v.get<uint32_t>();
  }
  float f32(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_number()) fail(where + " key '" + prefix + key + "' must be a number, not " + v.dump());
    return v.get<float>();
  }
  bool flag(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_boolean()) fail(where + " key '" + prefix + key + "' must be true or false, not " + v.dump());
    return v.get<bool>();
  }
};

Family family_of(std::string_view t, const char** name) {
  if (t == "qwen3_5" || t == "qwen3_5_text" || t == "qwen35") return *name = "qwen3_5", Family::qwen3_5;
  if (t == "qwen3_5_moe" || t == "qwen3_5_moe_text" || t == "qwen35moe")
    return *name = "qwen3_5_moe", Family::qwen3_5_moe;
  if (t == "qwen3_next" || t == "qwen3next") return *name = "qwen3_next", Family::qwen3_next;
  fail("model type '" + std::string(t) + "' is not served by the qwen3_5 plugin", KILN_ERR_UNSUPPORTED);
}

/** Layer types: the explicit list, else every full_attention_interval-th layer is full attention. */
void read_layer_types(const Reader& r, Config& c) {
  c.layers.assign(c.n_layers, {});
  if (const json* lt = r.find("layer_types")) {
    if (!lt->is_array() || lt->size() != c.n_layers)
      fail("config.json layer_types must list one type per layer (" + std::to_string(c.n_layers) + ")");
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      const json& t = (*lt)[l];
      if (t == "linear_attention")
        c.layers[l].linear = true;
      else if (t != "full_attention")
        fail("config.json layer_types[" + std::to_string(l) + "] is " + t.dump() +
             " (linear_attention or full_attention)");
    }
    return;
  }
  const uint32_t every = r.u32("full_attention_interval");
  if (!every) fail("config.json full_attention_interval must be at least 1");
  for (uint32_t l = 0; l < c.n_layers; ++l) c.layers[l].linear = (l + 1) % every != 0;
}

void parse_hf(const json& j, Config& c) {
  Reader r{j, "", "config.json"};
  c.n_vocab = r.u32("vocab_size");
  c.n_embd = r.u32("hidden_size");
  c.n_layers = r.u32("num_hidden_layers");
  c.n_head = r.u32("num_attention_heads");
  c.n_head_kv = r.u32("num_key_value_heads");
  c.head_dim = r.u32("head_dim");
  c.norm_eps = r.f32("rms_norm_eps");
  c.k_heads = r.u32("linear_num_key_heads");
  c.v_heads = r.u32("linear_num_value_heads");
  c.k_dim = r.u32("linear_key_head_dim");
  c.v_dim = r.u32("linear_value_head_dim");
  c.conv_kernel = r.u32("linear_conv_kernel_dim");
  if (const json* a = r.find("hidden_act"); a && *a != "silu")
    fail("config.json hidden_act " + a->dump() + " is not supported (silu)", KILN_ERR_UNSUPPORTED);
  if (const json* b = r.find("attention_bias"); b && *b == true)
    fail("config.json attention_bias true is not supported", KILN_ERR_UNSUPPORTED);
  if (r.find("attn_output_gate")) c.attn_gate = r.flag("attn_output_gate");
  if (r.find("max_position_embeddings")) c.max_context = r.u32("max_position_embeddings");
  if (const json* b = r.find("bos_token_id"); b && b->is_number_integer()) c.bos_token = r.u32("bos_token_id");

  // RoPE: transformers >= 5 nests theta (and, for Qwen3.5, the partial factor and the MRoPE
  // sections) in rope_parameters; older configs keep them at the top level. Text positions are the
  // same on MRoPE's three axes, so MRoPE is plain partial RoPE here.
  const json* rp = r.find("rope_parameters");
  if (!rp) rp = r.find("rope_scaling");
  auto rope_key = [&](const char* k) -> const json* {
    if (rp && rp->is_object())
      if (auto it = rp->find(k); it != rp->end() && !it->is_null()) return &*it;
    return r.find(k);
  };
  const json* theta = rope_key("rope_theta");
  if (!theta || !theta->is_number()) fail("config.json rope_theta (or rope_parameters.rope_theta) is missing");
  c.rope_theta = theta->get<float>();
  const json* prf = rope_key("partial_rotary_factor");
  if (!prf || !prf->is_number()) fail("config.json partial_rotary_factor (or rope_parameters.*) is missing");
  c.rope_dims = static_cast<uint32_t>(c.head_dim * prf->get<double>());
  // Scaled RoPE (YaRN and the like, in either spelling) must not run unscaled.
  for (const char* k : {"rope_type", "type"})
    if (const json* t = rope_key(k); t && t->is_string() && *t != "default")
      fail(std::string("config.json ") + k + " " + t->dump() +
               " is not supported (plain partial RoPE only); the output would be wrong",
           KILN_ERR_UNSUPPORTED);
  if (const json* f = rope_key("factor"); f && f->is_number() && f->get<double>() != 1.0)
    fail("config.json rope factor " + f->dump() + " (scaled RoPE) is not supported", KILN_ERR_UNSUPPORTED);
  // HF ties the head to the embedding by this key (the wrapper's, which the host merged in).
  c.tied = r.flag("tie_word_embeddings");

  read_layer_types(r, c);
  switch (c.family) {
    case Family::qwen3_5:
      c.n_ff = r.u32("intermediate_size");
      break;
    case Family::qwen3_5_moe:
      // Qwen3.5-MoE: every layer sparse, top-k weights always renormalized (the key was removed).
      for (Layer& y : c.layers) y.moe = true;
      break;
    case Family::qwen3_next: {
      c.norm_topk = r.flag("norm_topk_prob");
      const uint32_t step = r.u32("decoder_sparse_step");
      std::vector<uint32_t> dense;
      if (const json* m = r.find("mlp_only_layers")) {
        if (!m->is_array() || !std::all_of(m->begin(), m->end(), [](const json& v) { return v.is_number_unsigned(); }))
          fail("config.json mlp_only_layers must be a list of layer indices");
        dense = m->get<std::vector<uint32_t>>();
      }
      for (uint32_t l = 0; l < c.n_layers; ++l)
        c.layers[l].moe = step > 0 && (l + 1) % step == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
      break;
    }
  }
  const bool any_moe = std::any_of(c.layers.begin(), c.layers.end(), [](const Layer& y) { return y.moe; });
  const bool any_dense = std::any_of(c.layers.begin(), c.layers.end(), [](const Layer& y) { return !y.moe; });
  if (any_moe) {
    c.n_expert = r.u32("num_experts");
    c.n_expert_used = r.u32("num_experts_per_tok");
    c.n_ff_expert = r.u32("moe_intermediate_size");
    c.n_ff_shared = r.u32("shared_expert_intermediate_size");
  }
  if (any_dense && !c.n_ff) c.n_ff = r.u32("intermediate_size");
}

/**
 * llama.cpp's GGUF (conversion/qwen.py): the zero-centred norms stored as 1 + w, ssm_a = -exp(A_log),
 * and for qwen35 / qwen35moe the value heads reordered from HF's grouped order (key head h / R) to
 * tiled (h % H_k); qwen3next keeps the grouped order. block_count includes nextn_predict_layers MTP
 * blocks after the trunk.
 */
void parse_gguf(const kiln::ModelInfo& info, const json& j, Config& c) {
  const std::string arch = c.family == Family::qwen3_5       ? "qwen35"
                           : c.family == Family::qwen3_5_moe ? "qwen35moe"
                                                             : "qwen3next";
  Reader r{j, arch + ".", "GGUF metadata"};
  const uint32_t mtp = r.find("nextn_predict_layers") ? r.u32("nextn_predict_layers") : 0;
  const uint32_t blocks = r.u32("block_count");
  if (mtp >= blocks) fail("GGUF nextn_predict_layers must be below block_count");
  c.n_layers = blocks - mtp;
  c.n_embd = r.u32("embedding_length");
  const kiln::CheckpointTensor* embd = info.find("token_embd.weight");
  if (!embd || embd->shape.size() != 2) fail("GGUF tensor token_embd.weight is missing or not 2-D");
  c.n_vocab = static_cast<uint32_t>(embd->shape[0]);
  c.n_head = r.u32("attention.head_count");
  c.n_head_kv = r.u32("attention.head_count_kv");
  c.head_dim = r.u32("attention.key_length");
  c.norm_eps = r.f32("attention.layer_norm_rms_epsilon");
  c.rope_theta = r.f32("rope.freq_base");
  c.rope_dims = r.u32("rope.dimension_count");
  c.max_context = r.u32("context_length");
  c.conv_kernel = r.u32("ssm.conv_kernel");
  c.k_dim = r.u32("ssm.state_size");
  c.k_heads = r.u32("ssm.group_count");
  c.v_heads = r.u32("ssm.time_step_rank");
  const uint32_t inner = r.u32("ssm.inner_size");
  if (!c.v_heads || inner % c.v_heads) fail("GGUF ssm.inner_size must be a multiple of ssm.time_step_rank");
  c.v_dim = inner / c.v_heads;
  Reader top{j, "", "GGUF metadata"};
  if (top.find("tokenizer.ggml.bos_token_id")) c.bos_token = top.u32("tokenizer.ggml.bos_token_id");
  c.norms_shifted = true;
  c.stored_decay = true;
  c.tiled_heads = c.family != Family::qwen3_next && c.k_heads != c.v_heads;
  c.layers.assign(c.n_layers, {});
  if (const json* rl = r.find("attention.recurrent_layers")) {
    if (!rl->is_array() || rl->size() < c.n_layers) fail("GGUF attention.recurrent_layers must hold a flag per layer");
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      if (!(*rl)[l].is_boolean()) fail("GGUF attention.recurrent_layers must hold booleans");
      c.layers[l].linear = (*rl)[l].get<bool>();
    }
  } else {
    const uint32_t every =
        r.find("full_attention_interval") ? r.u32("full_attention_interval") : 4;  // llama.cpp's default
    if (!every) fail("GGUF full_attention_interval must be at least 1");
    for (uint32_t l = 0; l < c.n_layers; ++l) c.layers[l].linear = (l + 1) % every != 0;
  }
  // The MLP of each layer is whatever its tensors are (llama.cpp writes no per-layer key).
  for (uint32_t l = 0; l < c.n_layers; ++l)
    c.layers[l].moe = info.has("blk." + std::to_string(l) + ".ffn_gate_inp.weight");
  const bool any_moe = std::any_of(c.layers.begin(), c.layers.end(), [](const Layer& y) { return y.moe; });
  const bool any_dense = std::any_of(c.layers.begin(), c.layers.end(), [](const Layer& y) { return !y.moe; });
  if (any_moe) {
    c.n_expert = r.u32("expert_count");
    c.n_expert_used = r.u32("expert_used_count");
    c.n_ff_expert = r.u32("expert_feed_forward_length");
    c.n_ff_shared = r.u32("expert_shared_feed_forward_length");
    // llama.cpp renormalizes the top-k weights of these archs unless a converter says otherwise.
    c.norm_topk = r.find("expert_weights_norm") ? r.flag("expert_weights_norm") : true;
  }
  if (any_dense) c.n_ff = r.u32("feed_forward_length");
}

}  // namespace

Config parse_config(const kiln::ModelInfo& info) {
  json j = json::parse(info.config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the model configuration is not a JSON object");
  Config c;
  c.format = info.format;
  c.family = family_of(info.model_type, &c.arch_name);
  if (info.format == KILN_CHECKPOINT_GGUF)
    parse_gguf(info, j, c);
  else
    parse_hf(j, c);
  if (!c.n_layers || !c.n_embd || !c.n_vocab) fail("empty model shape in the configuration");
  if (!c.head_dim || !c.n_head_kv || c.n_head % c.n_head_kv)
    fail(std::to_string(c.n_head) + " query heads over " + std::to_string(c.n_head_kv) +
         " KV heads is not a valid GQA shape");
  if (c.rope_dims > c.head_dim || c.rope_dims % 2) fail("the rotated dims must be even and at most head_dim");
  if (!c.k_heads || !c.v_heads || c.v_heads % c.k_heads || !c.k_dim || !c.v_dim || c.conv_kernel < 2)
    fail("linear attention needs value heads a multiple of key heads, head dims and a conv kernel of 2 or more");
  if (c.n_expert && (!c.n_expert_used || c.n_expert_used > c.n_expert))
    fail("the MoE block needs 0 < num_experts_per_tok <= num_experts");
  if (!c.max_context) c.max_context = 262144;
  return c;
}

}  // namespace qwen3_5
