#include "llama_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace llama {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& msg, kiln_status st = KILN_ERR_INVALID_ARGUMENT) {
  throw kiln::Error(st, "[llama] " + msg);
}

struct Reader {
  const json& j;
  std::string prefix;  // GGUF: "<arch>."
  const json* find(const std::string& key) const {
    auto it = j.find(prefix + key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  uint32_t u32(const std::string& key) const {
    const json* v = find(key);
    if (!v || !v->is_number_integer() || v->get<int64_t>() < 0)
      fail("config key '" + prefix + key + "' is missing or not a non-negative integer");
    return v->get<uint32_t>();
  }
  uint32_t u32(const std::string& key, uint32_t def) const {
    const json* v = find(key);
    return v && v->is_number_integer() ? v->get<uint32_t>() : def;
  }
  float f32(const std::string& key, float def) const {
    const json* v = find(key);
    return v && v->is_number() ? v->get<float>() : def;
  }
  bool flag(const std::string& key, bool def) const {
    const json* v = find(key);
    return v && v->is_boolean() ? v->get<bool>() : def;
  }
};

Arch arch_of(std::string_view t, const char** name) {
  if (t == "llama") return *name = "llama", Arch::llama;
  if (t == "qwen2") return *name = "qwen2", Arch::qwen2;
  if (t == "qwen3") return *name = "qwen3", Arch::qwen3;
  if (t == "qwen3_moe" || t == "qwen3moe") return *name = "qwen3_moe", Arch::qwen3_moe;
  fail("model type '" + std::string(t) + "' is not served by the llama plugin (llama, qwen2, qwen3, qwen3_moe)",
       KILN_ERR_UNSUPPORTED);
}

void parse_hf(const json& j, Config& c) {
  Reader r{j, ""};
  c.n_layers = r.u32("num_hidden_layers");
  c.n_embd = r.u32("hidden_size");
  c.n_vocab = r.u32("vocab_size");
  c.n_head = r.u32("num_attention_heads");
  c.n_head_kv = r.u32("num_key_value_heads", c.n_head);
  c.head_dim = r.u32("head_dim", c.n_head ? c.n_embd / c.n_head : 0);
  c.n_ff = r.u32("intermediate_size", 0);
  c.max_context = r.u32("max_position_embeddings", 2048);
  c.norm_eps = r.f32("rms_norm_eps", 1e-6f);
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  c.bos_token = r.u32("bos_token_id", UINT32_MAX);
  // transformers >= 5 nests RoPE settings in rope_parameters; older configs use rope_theta +
  // rope_scaling. Only plain RoPE is implemented: a scaled variant must not silently run unscaled.
  const json* rope = r.find("rope_parameters");
  if (!rope) rope = r.find("rope_scaling");
  c.rope_theta = r.f32("rope_theta", 10000.0f);
  if (rope && rope->is_object()) {
    if (auto t = rope->find("rope_theta"); t != rope->end() && t->is_number()) c.rope_theta = t->get<float>();
    std::string type = "default";
    if (auto t = rope->find("rope_type"); t != rope->end() && t->is_string()) type = t->get<std::string>();
    else if (auto t2 = rope->find("type"); t2 != rope->end() && t2->is_string()) type = t2->get<std::string>();
    if (type != "default")
      fail("rope_type '" + type + "' is not implemented yet (plain RoPE only); the output would be wrong",
           KILN_ERR_UNSUPPORTED);
  }
  c.qkv_bias = c.arch == Arch::qwen2 || r.flag("attention_bias", false);
  c.qk_norm = c.arch == Arch::qwen3 || c.arch == Arch::qwen3_moe;
  c.moe_layer.assign(c.n_layers, false);
  if (c.arch == Arch::qwen3_moe) {
    c.n_expert = r.u32("num_experts", r.u32("num_local_experts", 0));
    c.n_expert_used = r.u32("num_experts_per_tok");
    c.n_ff_expert = r.u32("moe_intermediate_size");
    c.norm_topk = r.flag("norm_topk_prob", true);
    const uint32_t step = r.u32("decoder_sparse_step", 1);
    std::vector<uint32_t> dense;
    if (const json* m = r.find("mlp_only_layers"); m && m->is_array())
      for (const auto& v : *m) dense.push_back(v.get<uint32_t>());
    for (uint32_t l = 0; l < c.n_layers; ++l)
      c.moe_layer[l] = c.n_expert > 0 && step > 0 && (l + 1) % step == 0 &&
                       std::find(dense.begin(), dense.end(), l) == dense.end();
  }
  c.window.assign(c.n_layers, 0);
  const uint32_t sw = r.u32("sliding_window", 0);
  if (const json* lt = r.find("layer_types"); lt && lt->is_array() && lt->size() == c.n_layers) {
    for (uint32_t l = 0; l < c.n_layers; ++l)
      if ((*lt)[l] == "sliding_attention") c.window[l] = sw;
  } else if (r.flag("use_sliding_window", false) && sw > 0) {
    const uint32_t from = r.u32("max_window_layers", 0);
    for (uint32_t l = from; l < c.n_layers; ++l) c.window[l] = sw;
  }
}

void parse_gguf(const json& j, Config& c) {
  Reader r{j, std::string(c.arch == Arch::qwen3_moe ? "qwen3moe" : c.arch_name) + "."};
  c.n_layers = r.u32("block_count");
  c.n_embd = r.u32("embedding_length");
  c.n_ff = r.u32("feed_forward_length", 0);
  c.n_head = r.u32("attention.head_count");
  c.n_head_kv = r.u32("attention.head_count_kv", c.n_head);
  c.head_dim = r.u32("attention.key_length", c.n_head ? c.n_embd / c.n_head : 0);
  c.max_context = r.u32("context_length", 2048);
  c.norm_eps = r.f32("attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope_theta = r.f32("rope.freq_base", 10000.0f);
  if (r.find("rope.scaling.type") && r.find("rope.scaling.type")->get<std::string>() != "none")
    fail("GGUF rope.scaling.type '" + r.find("rope.scaling.type")->get<std::string>() + "' is not implemented yet",
         KILN_ERR_UNSUPPORTED);
  // The vocabulary size is the embedded tokenizer's (the host writes the array's length as
  // "<key>.count"); newer converters also write <arch>.vocab_size.
  c.n_vocab = r.u32("vocab_size", 0);
  if (!c.n_vocab) {
    Reader top{j, ""};
    c.n_vocab = top.u32("tokenizer.ggml.tokens.count", 0);
  }
  if (!c.n_vocab) fail("the GGUF has neither <arch>.vocab_size nor tokenizer.ggml.tokens; cannot size the output");
  Reader top{j, ""};
  c.bos_token = top.u32("tokenizer.ggml.bos_token_id", UINT32_MAX);
  // llama.cpp's converter permutes llama's Q/K rows for GPT-J style ("normal") RoPE; the Qwen
  // families keep Hugging Face's layout (NEOX).
  c.rope_mode = c.arch == Arch::llama ? KILN_ROPE_NORMAL : KILN_ROPE_NEOX;
  c.qkv_bias = c.arch == Arch::qwen2;
  c.qk_norm = c.arch == Arch::qwen3 || c.arch == Arch::qwen3_moe;
  c.moe_layer.assign(c.n_layers, c.arch == Arch::qwen3_moe);
  if (c.arch == Arch::qwen3_moe) {
    c.n_expert = r.u32("expert_count");
    c.n_expert_used = r.u32("expert_used_count");
    c.n_ff_expert = r.u32("expert_feed_forward_length", c.n_ff);
    c.norm_topk = r.flag("expert_weights_norm", true);
  }
  c.window.assign(c.n_layers, 0);
}

}  // namespace

Config parse_config(const kiln::ModelInfo& info) {
  json j = json::parse(info.config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the model configuration is not a JSON object");
  Config c;
  c.format = info.format;
  c.arch = arch_of(info.model_type, &c.arch_name);
  if (info.format == KILN_CHECKPOINT_GGUF)
    parse_gguf(j, c);
  else
    parse_hf(j, c);
  if (!c.n_layers || !c.n_embd || !c.n_head || !c.head_dim || !c.n_head_kv || c.n_head % c.n_head_kv)
    fail("inconsistent attention shape: " + std::to_string(c.n_head) + " heads, " + std::to_string(c.n_head_kv) +
         " KV heads, head_dim " + std::to_string(c.head_dim));
  if (c.arch == Arch::qwen3_moe && (!c.n_expert || !c.n_expert_used || c.n_expert_used > c.n_expert))
    fail("qwen3_moe needs 0 < num_experts_per_tok <= num_experts");
  const bool any_dense = std::find(c.moe_layer.begin(), c.moe_layer.end(), false) != c.moe_layer.end();
  if (any_dense && !c.n_ff) fail("config key intermediate_size (feed_forward_length) is missing");
  return c;
}

}  // namespace llama
