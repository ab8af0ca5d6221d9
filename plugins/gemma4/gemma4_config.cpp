#include "gemma4_config.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace gemma4 {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& msg, kiln_status st = KILN_ERR_INVALID_ARGUMENT) {
  throw kiln::Error(st, "[gemma4] " + msg);
}

/** Reads keys of one JSON object (config.json, or GGUF metadata with an "<arch>." prefix). */
struct Reader {
  const json& j;
  std::string prefix;
  std::string where;  ///< "config.json" / "GGUF metadata", for messages

  const json* find(const std::string& key) const {
    auto it = j.find(prefix + key);
    return it == j.end() ? nullptr : &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v)
      fail(where + " key '" + prefix + key +
           "' is missing; Gemma 4 needs it spelled out (defaults differ "
           "between implementations)");
    return *v;
  }
  uint32_t u32(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(where + " key '" + prefix + key + "' must be a non-negative integer, not " + v.dump());
    return v.get<uint32_t>();
  }
  /** A non-negative integer where null means 0 (a disabled feature). */
  uint32_t u32_or_null(const std::string& key) const {
    const json& v = need(key);
    return v.is_null() ? 0 : u32(key);
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

/** RoPE of one layer type from rope_parameters[type]: "default" or "proportional". */
void read_rope(const json& rp, const std::string& type, uint32_t head_dim, float* theta, uint32_t* dims,
               uint32_t* freq) {
  auto it = rp.find(type);
  if (it == rp.end() || !it->is_object())
    fail("config.json rope_parameters has no '" + type + "' entry (Gemma 4 ropes each layer type differently)");
  const json& r = *it;
  auto th = r.find("rope_theta");
  if (th == r.end() || !th->is_number()) fail("config.json rope_parameters." + type + ".rope_theta is missing");
  *theta = th->get<float>();
  auto rt = r.find("rope_type");
  const std::string kind = rt != r.end() && rt->is_string() ? rt->get<std::string>() : "";
  if (kind == "default") {
    // HF's default RoPE honours a partial factor: the first int(factor · D) dims rotate, exponents over them.
    *freq = 0;
    if (auto f = r.find("partial_rotary_factor"); f != r.end() && f->is_number() && f->get<double>() != 1.0)
      *dims = static_cast<uint32_t>(f->get<double>() * head_dim) / 2 * 2;
  } else if (kind == "proportional") {
    // HF _compute_proportional_rope_parameters: the first int(factor · head_dim / 2) pairs rotate with
    // exponents over the whole head; the rest have frequency 0.
    auto f = r.find("partial_rotary_factor");
    if (f == r.end() || !f->is_number())
      fail("config.json rope_parameters." + type + ".partial_rotary_factor is missing (proportional RoPE needs it)");
    const double factor = f->get<double>();
    if (!(factor > 0 && factor <= 1))
      fail("config.json rope_parameters." + type + ".partial_rotary_factor must be in (0, 1]");
    *freq = static_cast<uint32_t>(std::floor(factor * head_dim / 2));
    if (*freq == head_dim / 2) *freq = 0;
  } else {
    fail("config.json rope_parameters." + type + ".rope_type '" + kind +
             "' is not supported (Gemma 4 uses 'default' and 'proportional'); the output would be wrong",
         KILN_ERR_UNSUPPORTED);
  }
  for (const char* k : {"factor", "attention_factor"})
    if (auto s = r.find(k); s != r.end() && s->is_number() && s->get<double>() != 1.0)
      fail(std::string("config.json rope_parameters.") + type + "." + k + " != 1 (scaled RoPE) is not supported",
           KILN_ERR_UNSUPPORTED);
}

void parse_hf(const json& j, Config& c) {
  Reader r{j, "", "config.json"};
  c.n_vocab = r.u32("vocab_size");
  c.n_embd = r.u32("hidden_size");
  c.n_layers = r.u32("num_hidden_layers");
  c.n_head = r.u32("num_attention_heads");
  const uint32_t n_ff = r.u32("intermediate_size");
  const uint32_t n_kv = r.u32("num_key_value_heads");
  const uint32_t head_dim = r.u32("head_dim");
  // Full layers' head dim and (K=V) KV heads: global_head_dim / num_global_key_value_heads, or,
  // from transformers 5.15 on (PR #47384), per_layer_config entries keyed by the zero-padded layer
  // index ({"04": {"head_dim": 512, "num_key_value_heads": 2}}).
  const bool k_eq_v = r.flag("attention_k_eq_v");
  auto present = [&](const char* k) { return r.find(k) && !r.find(k)->is_null(); };
  const uint32_t global_head_dim = present("global_head_dim") ? r.u32("global_head_dim") : 0;
  const uint32_t n_kv_global = !k_eq_v                                 ? n_kv
                               : present("num_global_key_value_heads") ? r.u32("num_global_key_value_heads")
                                                                       : 0;
  std::map<uint32_t, const json*> per_layer;
  if (const json* plc = r.find("per_layer_config"); plc && plc->is_object())
    for (auto it = plc->begin(); it != plc->end(); ++it) {
      const std::string& k = it.key();
      if (k.empty() || k.size() > 6 || k.find_first_not_of("0123456789") != std::string::npos || !it->is_object())
        fail("config.json per_layer_config must map layer indices (\"04\") to objects, not '" + k + "'");
      per_layer[static_cast<uint32_t>(std::stoul(k))] = &it.value();
    }
  auto layer_value = [&](uint32_t l, const char* key, uint32_t fallback) -> uint32_t {
    auto it = per_layer.find(l);
    if (it == per_layer.end()) return fallback;
    auto v = it->second->find(key);
    if (v == it->second->end() || v->is_null()) return fallback;
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT32_MAX)
      fail("config.json per_layer_config[" + std::to_string(l) + "]." + key + " must be a positive integer");
    return v->get<uint32_t>();
  };
  c.window = r.u32("sliding_window");
  c.softcap = r.need("final_logit_softcapping").is_null() ? 0.0f : r.f32("final_logit_softcapping");
  c.ple_dim = r.u32_or_null("hidden_size_per_layer_input");
  if (c.ple_dim && r.u32("vocab_size_per_layer_input") != c.n_vocab)
    fail(
        "config.json vocab_size_per_layer_input differs from vocab_size; per-layer embeddings of text tokens "
        "need one row per token",
        KILN_ERR_UNSUPPORTED);
  const uint32_t n_shared = r.u32("num_kv_shared_layers");
  const bool double_wide = r.flag("use_double_wide_mlp");
  c.moe = r.flag("enable_moe_block");
  if (c.moe) {
    c.n_expert = r.u32("num_experts");
    c.n_expert_used = r.u32("top_k_experts");
    c.n_ff_expert = r.u32("moe_intermediate_size");
  }
  // Keys every implementation agrees on: absent means the one value in use.
  c.norm_eps = r.find("rms_norm_eps") ? r.f32("rms_norm_eps") : 1e-6f;
  if (const json* a = r.find("hidden_activation"); a && !a->is_null() && *a != "gelu_pytorch_tanh")
    fail("config.json hidden_activation " + a->dump() + " is not supported (Gemma 4 uses gelu_pytorch_tanh)",
         KILN_ERR_UNSUPPORTED);
  if (const json* b = r.find("attention_bias"); b && *b == true)
    fail("config.json attention_bias true is not supported (no released Gemma 4 has attention biases)",
         KILN_ERR_UNSUPPORTED);
  if (const json* b = r.find("use_bidirectional_attention"); b && *b == "all")
    fail("config.json use_bidirectional_attention 'all' (bidirectional text attention) is not supported",
         KILN_ERR_UNSUPPORTED);
  if (const json* t = r.find("tie_word_embeddings"); t && *t == false)
    fail("config.json tie_word_embeddings false is not supported (Gemma 4's head is the embedding)",
         KILN_ERR_UNSUPPORTED);
  if (const json* m = r.find("max_position_embeddings"); m && m->is_number_integer())
    c.max_context = r.u32("max_position_embeddings");
  if (const json* b = r.find("bos_token_id"); b && b->is_number_integer()) c.bos_token = r.u32("bos_token_id");

  const json& types = r.need("layer_types");
  if (!types.is_array() || types.size() != c.n_layers)
    fail("config.json layer_types must list one type per layer (" + std::to_string(c.n_layers) + ")");
  const json& rp = r.need("rope_parameters");
  if (!rp.is_object()) fail("config.json rope_parameters must be an object keyed by layer type");
  if (n_shared > c.n_layers) fail("config.json num_kv_shared_layers exceeds num_hidden_layers");

  c.layers.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = c.layers[l];
    // Gemma4TextConfig forces the last layer to full attention whatever layer_types says.
    const json& t = l + 1 == c.n_layers ? json("full_attention") : types[l];
    if (t == "sliding_attention")
      L.sliding = true;
    else if (t != "full_attention")
      fail("config.json layer_types[" + std::to_string(l) + "] is " + t.dump() +
           " (sliding_attention or full_attention)");
    L.k_eq_v = !L.sliding && k_eq_v;
    L.head_dim = layer_value(l, "head_dim", L.sliding ? head_dim : global_head_dim);
    L.n_kv_heads = layer_value(l, "num_key_value_heads", L.k_eq_v ? n_kv_global : n_kv);
    if (!L.head_dim)
      fail("config.json has neither global_head_dim nor per_layer_config[" + std::to_string(l) +
           "].head_dim for full-attention layer " + std::to_string(l));
    if (!L.n_kv_heads)
      fail("config.json has neither num_global_key_value_heads nor per_layer_config[" + std::to_string(l) +
           "].num_key_value_heads for K=V layer " + std::to_string(l));
    read_rope(rp, L.sliding ? "sliding_attention" : "full_attention", L.head_dim, &L.rope_theta, &L.rope_dims,
              &L.rope_freq);
    const bool shared = l >= c.n_layers - n_shared;
    L.n_ff = shared && double_wide ? 2 * n_ff : n_ff;
    if (shared) {
      // The last cache-owning layer of the same type (HF shared_kv_states[layer_type]).
      for (int32_t s = static_cast<int32_t>(c.n_layers - n_shared) - 1; s >= 0; --s)
        if (c.layers[static_cast<size_t>(s)].sliding == L.sliding) {
          L.kv_source = s;
          break;
        }
      if (L.kv_source < 0)
        fail("layer " + std::to_string(l) + " shares KV but no earlier layer of its type owns a cache");
    }
  }
}

/** One scalar or one entry of a per-layer array (llama.cpp writes either). */
uint32_t per_layer(const Reader& r, const std::string& key, uint32_t layer, uint32_t n_layers) {
  const json& v = r.need(key);
  if (!v.is_array()) return r.u32(key);
  if (v.size() != n_layers || !v[layer].is_number_integer() || v[layer].get<int64_t>() < 0 ||
      v[layer].get<int64_t>() > INT32_MAX)
    fail("GGUF metadata '" + r.prefix + key + "' must be a number or one non-negative number per layer");
  return v[layer].get<uint32_t>();
}

/**
 * llama.cpp's converter stores Gemma 4's proportional RoPE as a `rope_freqs` table of head_dim/2
 * frequency divisors: 1 for the pairs that rotate, 1e30 (frequency 0) for the rest. Returns the
 * number of rotating pairs (0: all of them, or no table).
 */
uint32_t rope_pairs_from_freqs(const kiln::ModelInfo& info, uint32_t head_dim) {
  const kiln::CheckpointTensor* t = info.find("rope_freqs.weight");
  if (!t) return 0;
  if (t->dtype != KILN_DTYPE_F32 || t->shape.size() != 1 || t->shape[0] != head_dim / 2)
    fail("GGUF tensor rope_freqs.weight must be f32 [" + std::to_string(head_dim / 2) +
         "] (full-attention head_dim/2)");
  if (!t->data || t->nbytes < head_dim / 2 * sizeof(float))
    fail("this kiln host does not pass tensor data to plugins (ABI 2.1); rope_freqs.weight cannot be read",
         KILN_ERR_UNSUPPORTED);
  const auto* f = static_cast<const float*>(t->data);
  uint32_t live = 0;
  while (live < head_dim / 2 && f[live] == 1.0f) ++live;
  for (uint32_t i = live; i < head_dim / 2; ++i)
    if (!(f[i] >= 1e20f))
      fail(
          "GGUF rope_freqs.weight holds factors other than 1 (rotate) and 1e30 (frequency 0); only Gemma 4's "
          "proportional RoPE is supported",
          KILN_ERR_UNSUPPORTED);
  return live == head_dim / 2 ? 0 : live;
}

void parse_gguf(const kiln::ModelInfo& info, const json& j, Config& c) {
  Reader r{j, "gemma4.", "GGUF metadata"};
  c.n_layers = r.u32("block_count");
  c.n_embd = r.u32("embedding_length");
  c.n_head = r.u32("attention.head_count");
  const kiln::CheckpointTensor* embd = info.find("token_embd.weight");
  if (!embd || embd->shape.size() != 2) fail("GGUF tensor token_embd.weight is missing or not 2-D");
  c.n_vocab = static_cast<uint32_t>(embd->shape[0]);
  const uint32_t head_dim_full = r.u32("attention.key_length");
  const uint32_t head_dim_swa = r.u32("attention.key_length_swa");
  if (r.find("attention.value_length") && r.u32("attention.value_length") != head_dim_full)
    fail("GGUF attention.value_length differs from attention.key_length; Gemma 4 has equal K and V heads");
  c.window = r.u32("attention.sliding_window");
  c.norm_eps = r.f32("attention.layer_norm_rms_epsilon");
  c.ple_dim = r.u32("embedding_length_per_layer_input");
  // llama.cpp's loader treats these as optional with these defaults; the converter always writes them.
  const uint32_t n_shared = r.find("attention.shared_kv_layers") ? r.u32("attention.shared_kv_layers") : 0;
  c.softcap = r.find("final_logit_softcapping") ? r.f32("final_logit_softcapping") : 0.0f;
  const float theta_full = r.f32("rope.freq_base");
  const float theta_swa = r.find("rope.freq_base_swa") ? r.f32("rope.freq_base_swa") : theta_full;
  const uint32_t rot_swa = r.find("rope.dimension_count_swa") ? r.u32("rope.dimension_count_swa") : head_dim_swa;
  const uint32_t rot_full = r.find("rope.dimension_count") ? r.u32("rope.dimension_count") : head_dim_full;
  if (r.find("context_length")) c.max_context = r.u32("context_length");
  Reader top{j, "", "GGUF metadata"};
  if (top.find("tokenizer.ggml.bos_token_id")) c.bos_token = top.u32("tokenizer.ggml.bos_token_id");
  const json& pattern = r.need("attention.sliding_window_pattern");
  if (!pattern.is_array() || pattern.size() != c.n_layers)
    fail("GGUF gemma4.attention.sliding_window_pattern must hold one boolean per layer");
  if (n_shared > c.n_layers) fail("GGUF gemma4.attention.shared_kv_layers exceeds block_count");
  c.moe = info.has("blk.0.ffn_gate_inp.weight");
  if (c.moe) {
    c.n_expert = r.u32("expert_count");
    c.n_expert_used = r.u32("expert_used_count");
    c.n_ff_expert = r.u32("expert_feed_forward_length");
  }
  const uint32_t full_pairs = rope_pairs_from_freqs(info, head_dim_full);
  // llama.cpp's converter writes proportional RoPE as rope_freqs over the whole head; a file
  // without it (or rotating part of the full head) would rope the 512-wide layers wrongly.
  const bool any_full = std::any_of(pattern.begin(), pattern.end(), [](const json& v) { return v == false; });
  if (any_full && !info.has("rope_freqs.weight"))
    fail("GGUF tensor rope_freqs.weight is missing: Gemma 4's full-attention layers need it (proportional RoPE)");
  if (any_full && rot_full != head_dim_full)
    fail(
        "GGUF gemma4.rope.dimension_count must equal attention.key_length (the full head rotates through "
        "rope_freqs)");
  if (r.find("suppress_tokens"))
    fail("GGUF gemma4.suppress_tokens (the 12B unified variant) is not supported", KILN_ERR_UNSUPPORTED);
  c.layers.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = c.layers[l];
    if (!pattern[l].is_boolean()) fail("GGUF gemma4.attention.sliding_window_pattern must hold booleans");
    L.sliding = pattern[l].get<bool>();
    L.head_dim = L.sliding ? head_dim_swa : head_dim_full;
    L.n_kv_heads = per_layer(r, "attention.head_count_kv", l, c.n_layers);
    L.n_ff = per_layer(r, "feed_forward_length", l, c.n_layers);
    L.rope_theta = L.sliding ? theta_swa : theta_full;
    const uint32_t rot = L.sliding ? rot_swa : rot_full;
    L.rope_dims = rot == L.head_dim ? 0 : rot;
    L.rope_freq = L.sliding ? 0 : full_pairs;
    if (l >= c.n_layers - n_shared) {
      for (int32_t s = static_cast<int32_t>(c.n_layers - n_shared) - 1; s >= 0; --s)
        if (c.layers[static_cast<size_t>(s)].sliding == L.sliding) {
          L.kv_source = s;
          break;
        }
      if (L.kv_source < 0)
        fail("layer " + std::to_string(l) + " shares KV but no earlier layer of its type owns a cache");
    } else {
      // llama.cpp takes V from K where a cache-owning layer has no attn_v (K=V full layers).
      L.k_eq_v = !info.has("blk." + std::to_string(l) + ".attn_v.weight");
      if (L.k_eq_v && L.sliding)
        fail("GGUF layer " + std::to_string(l) +
             " is a sliding layer without attn_v.weight; only full layers take V "
             "from K");
    }
  }
}

}  // namespace

Config parse_config(const kiln::ModelInfo& info) {
  json j = json::parse(info.config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the model configuration is not a JSON object");
  Config c;
  c.format = info.format;
  if (info.format == KILN_CHECKPOINT_GGUF)
    parse_gguf(info, j, c);
  else
    parse_hf(j, c);
  if (!c.n_layers || !c.n_embd || !c.n_head || !c.n_vocab) fail("empty model shape in the configuration");
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = c.layers[l];
    if (!L.head_dim || !L.n_kv_heads || c.n_head % L.n_kv_heads)
      fail("layer " + std::to_string(l) + ": " + std::to_string(c.n_head) + " query heads over " +
           std::to_string(L.n_kv_heads) + " KV heads of dim " + std::to_string(L.head_dim) +
           " is not a valid GQA shape");
    if (L.sliding && !c.window) fail("sliding layers need sliding_window > 0");
  }
  if (c.moe && (!c.n_expert || !c.n_expert_used || c.n_expert_used > c.n_expert || !c.n_ff_expert))
    fail("the MoE block needs 0 < top_k_experts <= num_experts and moe_intermediate_size > 0");
  if (!c.max_context) c.max_context = 131072;
  return c;
}

}  // namespace gemma4
