// Llama, Qwen2, Qwen3 and Qwen3-MoE as llama.cpp's converter writes them (convert_hf_to_gguf.py
// LlamaModel, Qwen2Model, Qwen3Model, Qwen3MoeModel): archs llama / qwen2 / qwen3 / qwen3moe, the
// usual names, llama's Q and K rows permuted for ggml's GPT-J-style ("normal") RoPE (the Qwen
// families keep Hugging Face's NeoX order), experts stacked (or split from a fused gate_up).
#include "convert/export.hpp"
#include "core/error.hpp"

namespace kiln::convert {
namespace {

/** llama.cpp's LlamaModel.permute: within each head, rows [first half | second half] interleaved. */
std::vector<float> permute_rope(const std::vector<float>& v, int64_t heads, int64_t cols) {
  std::vector<float> out(v.size());
  const int64_t rows = static_cast<int64_t>(v.size()) / cols, hd = rows / heads;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < hd / 2; ++b) {
        const int64_t from = h * hd + a * hd / 2 + b, to = h * hd + 2 * b + a;
        std::copy(v.begin() + from * cols, v.begin() + (from + 1) * cols, out.begin() + to * cols);
      }
  return out;
}

}  // namespace

Export export_llama(const Source& src, model::GgufWriter& w) {
  const json& c = src.config();
  const std::string type = c.at("model_type").get<std::string>();
  Export ex;
  ex.arch = type == "qwen3_moe" ? "qwen3moe" : type;
  const bool llama = type == "llama", moe = type == "qwen3_moe";
  const std::string a = ex.arch + ".";
  if (c.value("use_sliding_window", false))
    throw_error("[convert] config.json use_sliding_window: llama.cpp's {} has no sliding window to write", ex.arch);
  // Llama 3.1's "llama3" and the other scaled RoPEs are not served by the llama plugin either.
  if (const json rs = c.value("rope_scaling", json());
      rs.is_object() && rs.value("rope_type", rs.value("type", "")) != "default")
    throw_error("[convert] config.json rope_scaling {}: scaled RoPE cannot be converted yet (plain RoPE only)",
                rs.dump());
  const int64_t H = src.u32("hidden_size"), L = src.u32("num_hidden_layers");
  const int64_t heads = src.u32("num_attention_heads");
  if (!heads) throw_error("[convert] config.json num_attention_heads must be at least 1");
  const int64_t kv_heads = c.contains("num_key_value_heads") ? src.u32("num_key_value_heads") : heads;
  const int64_t hd = c.contains("head_dim") && !c["head_dim"].is_null() ? src.u32("head_dim") : H / heads;
  // Experts: num_experts, or Mixtral's spelling some Qwen3-MoE configs carry.
  const uint32_t n_expert = !moe                        ? 0
                            : c.contains("num_experts") ? src.u32("num_experts")
                                                        : src.u32("num_local_experts");
  float theta = c.value("rope_theta", 10000.0f);
  if (const json rp = c.value("rope_parameters", json()); rp.is_object()) theta = rp.value("rope_theta", theta);

  w.add_string("general.architecture", ex.arch);
  w.add_u32(a + "vocab_size", src.u32("vocab_size"));
  w.add_u32(a + "context_length", c.value("max_position_embeddings", 2048u));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(H));
  w.add_u32(a + "block_count", static_cast<uint32_t>(L));
  if (c.contains("intermediate_size")) w.add_u32(a + "feed_forward_length", src.u32("intermediate_size"));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(heads));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  w.add_f32(a + "rope.freq_base", theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", src.number("rms_norm_eps"));
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(hd));
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  if (moe) {
    w.add_u32(a + "expert_count", n_expert);
    w.add_u32(a + "expert_used_count", src.u32("num_experts_per_tok"));
    w.add_u32(a + "expert_feed_forward_length", src.u32("moe_intermediate_size"));
    w.add_bool(a + "expert_weights_norm", c.value("norm_topk_prob", true));
  }
  ex.n_layer = static_cast<int>(L);
  ex.n_head = static_cast<int>(heads);
  ex.n_head_kv = static_cast<int>(kv_heads);
  ex.n_expert = static_cast<int>(n_expert);
  // llama.cpp's model size "70B" (llama-model.cpp): 80 layers of qwen2, or of llama with grouped KV.
  ex.size_70b = L == 80 && (type == "qwen2" || (llama && heads != kv_heads));

  auto& out = ex.tensors;
  out.push_back(src.as_is("model.embed_tokens.weight", "token_embd.weight"));
  out.push_back(src.as_is("model.norm.weight", "output_norm.weight"));
  if (src.has("lm_head.weight") && !c.value("tie_word_embeddings", false))
    out.push_back(src.as_is("lm_head.weight", "output.weight"));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    out.push_back(src.as_is(p + "input_layernorm.weight", b + "attn_norm.weight"));
    for (const auto& [proj, gguf, n] :
         {std::tuple{"q_proj", "attn_q", heads}, std::tuple{"k_proj", "attn_k", kv_heads}}) {
      const std::string hf = p + "self_attn." + proj + ".weight";
      OutTensor t = src.as_is(hf, b + gguf + ".weight");
      if (llama) {
        src.expect_shape(hf, {n * hd, H}, "num_attention_heads, num_key_value_heads, head_dim, hidden_size");
        t.values = [&src, hf, n = n, H] { return permute_rope(src.values(hf), n, H); };
      }
      out.push_back(std::move(t));
    }
    out.push_back(src.as_is(p + "self_attn.v_proj.weight", b + "attn_v.weight"));
    out.push_back(src.as_is(p + "self_attn.o_proj.weight", b + "attn_output.weight"));
    for (const char* bias : {"q", "k", "v"})
      if (const std::string hf = p + "self_attn." + bias + "_proj.bias"; src.has(hf)) {
        if (llama) throw_error("[convert] {}: llama with attention biases cannot be converted yet", hf);
        out.push_back(src.as_is(hf, b + "attn_" + bias + ".bias"));
      }
    for (const char* norm : {"q", "k"})
      if (const std::string hf = p + "self_attn." + norm + "_norm.weight"; src.has(hf))
        out.push_back(src.as_is(hf, b + "attn_" + norm + "_norm.weight"));
    out.push_back(src.as_is(p + "post_attention_layernorm.weight", b + "ffn_norm.weight"));
    const std::string m = p + "mlp.";
    if (!moe) {
      out.push_back(src.as_is(m + "gate_proj.weight", b + "ffn_gate.weight"));
      out.push_back(src.as_is(m + "up_proj.weight", b + "ffn_up.weight"));
      out.push_back(src.as_is(m + "down_proj.weight", b + "ffn_down.weight"));
      continue;
    }
    src.sparse_mlp(m, b, n_expert, src.u32("moe_intermediate_size"), H, out);
  }
  return ex;
}

}  // namespace kiln::convert
