// Gemma 4 as llama.cpp's converter writes it (conversion/gemma.py, Gemma4Model;
// shared/docs/models/gemma4.md): arch gemma4, the text model's tensors under llama.cpp's names with
// their values unchanged (Gemma 4's norms are stored as used: no +1 shift), per-layer head counts
// and FFN widths as arrays where they vary, and a rope_freqs tensor that makes ggml's NeoX RoPE
// rotate only the leading 1/4 of a full-attention head ("proportional" RoPE). The vision and audio
// towers are not part of the text model and are left out.
#include "convert/export.hpp"
#include "core/error.hpp"

namespace kiln::convert {
namespace {

/** llama.cpp's GGUF name of a text-model tensor ("model." prefix taken off), or "" when it has none. */
std::string gguf_name(const std::string& hf) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"embed_tokens.weight", "token_embd.weight"},
      {"norm.weight", "output_norm.weight"},
      {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
      {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
      {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"}};
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"layer_scalar", "layer_output_scale.weight"},
      {"per_layer_input_gate.weight", "inp_gate.weight"},
      {"per_layer_projection.weight", "proj.weight"},
      {"post_per_layer_input_norm.weight", "post_norm.weight"},
      {"router.proj.weight", "ffn_gate_inp.weight"},
      {"router.scale", "ffn_gate_inp.scale"},
      {"router.per_expert_scale", "ffn_down_exps.scale"},
      {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
      {"experts.down_proj", "ffn_down_exps.weight"},
      {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
      {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
      {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"}};
  for (const auto& [h, g] : kGlobal)
    if (hf == h) return g;
  if (hf.rfind("layers.", 0) == 0) {
    const size_t dot = hf.find('.', 7);
    if (dot == std::string::npos) return "";
    const std::string rest = hf.substr(dot + 1);
    for (const auto& [h, g] : kLayer)
      if (rest == h) return "blk." + hf.substr(7, dot - 7) + "." + g;
  }
  return "";
}

}  // namespace

Export export_gemma4(const Source& src, model::GgufWriter& w) {
  const json& c = src.config();
  Export ex;
  ex.arch = "gemma4";
  const std::string a = "gemma4.";
  const auto L = static_cast<int64_t>(src.u32("num_hidden_layers"));
  const json& types = src.need("layer_types");
  if (!types.is_array() || types.size() != static_cast<size_t>(L))
    throw_error("[convert] config.json layer_types must list one type per layer ({})", L);
  std::vector<bool> sliding;
  for (const json& t : types) sliding.push_back(t == "sliding_attention");
  const uint32_t shared = c.value("num_kv_shared_layers", 0u), inter = src.u32("intermediate_size");
  const uint32_t head_dim = src.u32("head_dim"), global_head_dim = src.u32("global_head_dim");
  const uint32_t kv_heads = src.u32("num_key_value_heads");
  const json& rp = src.need("rope_parameters");
  const json& full = src.need("full_attention", &rp, "rope_parameters");
  const json& swa = src.need("sliding_attention", &rp, "rope_parameters");

  w.add_string("general.architecture", ex.arch);
  w.add_u32(a + "block_count", static_cast<uint32_t>(L));
  w.add_u32(a + "context_length", src.u32("max_position_embeddings"));
  w.add_u32(a + "embedding_length", src.u32("hidden_size"));
  if (c.value("use_double_wide_mlp", false)) {  // the KV-shared layers' MLPs are twice as wide
    std::vector<int32_t> ff;
    for (int64_t l = 0; l < L; ++l) ff.push_back(static_cast<int32_t>(l >= L - shared ? 2 * inter : inter));
    w.add_i32s(a + "feed_forward_length", ff);
  } else {
    w.add_u32(a + "feed_forward_length", inter);
  }
  w.add_u32(a + "attention.head_count", src.u32("num_attention_heads"));
  if (const json g = c.value("num_global_key_value_heads", json()); g.is_number_unsigned()) {
    std::vector<int32_t> kv;
    for (bool s : sliding) kv.push_back(static_cast<int32_t>(s ? kv_heads : g.get<uint32_t>()));
    w.add_i32s(a + "attention.head_count_kv", kv);
  } else {
    w.add_u32(a + "attention.head_count_kv", kv_heads);
  }
  w.add_u32(a + "attention.key_length", global_head_dim);
  w.add_u32(a + "attention.value_length", global_head_dim);
  w.add_u32(a + "attention.key_length_swa", head_dim);
  w.add_u32(a + "attention.value_length_swa", head_dim);
  w.add_u32(a + "attention.sliding_window", src.u32("sliding_window"));
  w.add_bools(a + "attention.sliding_window_pattern", sliding);
  w.add_u32(a + "attention.shared_kv_layers", shared);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", src.number("rms_norm_eps"));
  w.add_u32(a + "embedding_length_per_layer_input", c.value("hidden_size_per_layer_input", 0u));
  w.add_f32(a + "rope.freq_base", src.need("rope_theta", &full, "rope_parameters.full_attention").get<float>());
  w.add_f32(a + "rope.freq_base_swa", src.need("rope_theta", &swa, "rope_parameters.sliding_attention").get<float>());
  w.add_u32(a + "rope.dimension_count", global_head_dim);
  w.add_u32(a + "rope.dimension_count_swa", static_cast<uint32_t>(head_dim * swa.value("partial_rotary_factor", 1.0)));
  if (const json s = c.value("final_logit_softcapping", json()); s.is_number() && s.get<double>() > 0)
    w.add_f32(a + "final_logit_softcapping", s.get<float>());
  const bool moe = c.value("enable_moe_block", false);
  if (moe) {
    w.add_u32(a + "expert_count", src.u32("num_experts"));
    w.add_u32(a + "expert_used_count", src.u32("top_k_experts"));
    w.add_u32(a + "expert_feed_forward_length", src.u32("moe_intermediate_size"));
  }
  ex.n_layer = static_cast<int>(L);
  ex.n_head = static_cast<int>(src.u32("num_attention_heads"));
  ex.n_head_kv = static_cast<int>(kv_heads);
  ex.n_expert = moe ? static_cast<int>(src.u32("num_experts")) : 0;

  // Proportional RoPE on full-attention layers: divisor 1 for the rotating pairs, 1e30 for the rest.
  const auto pairs = static_cast<int64_t>(global_head_dim / 2);
  const auto live = static_cast<int64_t>(global_head_dim * full.value("partial_rotary_factor", 1.0) / 2);
  ex.tensors.push_back({"rope_freqs.weight",
                        {pairs},
                        [pairs, live] {
                          std::vector<float> f(static_cast<size_t>(pairs), 1e30f);
                          std::fill(f.begin(), f.begin() + live, 1.0f);
                          return f;
                        },
                        DType::f32,
                        true});
  for (const std::string& hf : src.text_tensors()) {
    if (hf == "lm_head.weight") {  // Gemma 4 ties it to the embedding; llama.cpp reads token_embd
      if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] == false)
        throw_error("[convert] an untied Gemma 4 lm_head has no place in llama.cpp's gemma4 GGUF");
      continue;
    }
    const std::string g = gguf_name(hf.substr(6));
    if (g.empty()) throw_error("[convert] tensor {} has no llama.cpp name; this Gemma 4 layout is not known", hf);
    OutTensor t = src.as_is(hf, g);
    t.keep_f32 = g.find("ffn_gate_inp.weight") != std::string::npos;  // llama.cpp keeps routers in F32
    ex.tensors.push_back(std::move(t));
  }
  return ex;
}

}  // namespace kiln::convert
