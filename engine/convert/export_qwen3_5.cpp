// Qwen3.5, Qwen3.5-MoE and Qwen3-Next as llama.cpp's converter writes them (conversion/qwen.py;
// shared/docs/models/qwen3_5.md §4.6): archs qwen35 / qwen35moe / qwen3next, zero-centred norms
// stored as 1 + w, ssm_a = −exp(A_log), conv weights squeezed to [C, K], Qwen3.5's value heads
// moved from grouped to tiled order, Qwen3-Next's in_proj_qkvz split into attn_qkv + attn_gate,
// fused experts split into gate and up, per-expert tensors stacked. The MTP head and the vision
// tower are not part of llama.cpp's text model and are left out.
#include <algorithm>
#include <cmath>

#include "convert/export.hpp"
#include "core/error.hpp"

namespace kiln::convert {
namespace {

/**
 * llama.cpp's value-head reorder (_LinearAttentionVReorderBase): along one axis of a row-major
 * [rows, cols] tensor, the span [begin, begin + K·R·D) goes from grouped order (g·R + j) to tiled
 * order (j·K + g), D values per head; axis 0 permutes rows, axis 1 columns.
 */
std::vector<float> tile_heads(const std::vector<float>& v, int64_t rows, int64_t cols, int axis, int64_t begin,
                              int64_t K, int64_t R, int64_t D) {
  std::vector<float> out = v;
  for (int64_t g = 0; g < K; ++g)
    for (int64_t j = 0; j < R; ++j)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t from = begin + (g * R + j) * D + d, to = begin + (j * K + g) * D + d;
        if (axis == 0)
          std::copy(v.begin() + from * cols, v.begin() + (from + 1) * cols, out.begin() + to * cols);
        else
          for (int64_t r = 0; r < rows; ++r)
            out[static_cast<size_t>(r * cols + to)] = v[static_cast<size_t>(r * cols + from)];
      }
  return out;
}

}  // namespace

Export export_qwen3_5(const Source& src, model::GgufWriter& w) {
  const json& c = src.config();
  const std::string type = c.at("model_type").get<std::string>();
  const bool next = type == "qwen3_next";
  const bool dense = type == "qwen3_5" || type == "qwen3_5_text";
  Export ex;
  ex.arch = next ? "qwen3next" : dense ? "qwen35" : "qwen35moe";
  const std::string a = ex.arch + ".";
  const int64_t H = src.u32("hidden_size"), L = src.u32("num_hidden_layers");
  const int64_t heads = src.u32("num_attention_heads"), kv_heads = src.u32("num_key_value_heads");
  const int64_t D = src.u32("head_dim");
  const int64_t K = src.u32("linear_num_key_heads"), Hv = src.u32("linear_num_value_heads");
  const int64_t dk = src.u32("linear_key_head_dim"), dv = src.u32("linear_value_head_dim");
  const int64_t conv = src.u32("linear_conv_kernel_dim");
  if (!K || Hv % K) throw_error("[convert] linear_num_value_heads must be a multiple of linear_num_key_heads");
  const int64_t R = Hv / K, kd = K * dk, vd = Hv * dv, conv_dim = 2 * kd + vd;
  const bool tiled = !next && K != Hv;

  // Layer kinds: the explicit list, else every full_attention_interval-th layer is full attention.
  std::vector<bool> linear(static_cast<size_t>(L));
  const uint32_t interval = c.contains("full_attention_interval") ? src.u32("full_attention_interval") : 4;
  if (const auto lt = c.find("layer_types"); lt != c.end() && lt->is_array() && lt->size() == static_cast<size_t>(L))
    for (int64_t l = 0; l < L; ++l)
      linear[static_cast<size_t>(l)] = (*lt)[static_cast<size_t>(l)] == "linear_attention";
  else
    for (int64_t l = 0; l < L; ++l) linear[static_cast<size_t>(l)] = interval && (l + 1) % interval != 0;
  // MoE layers: every layer (Qwen3.5-MoE), or every decoder_sparse_step-th outside mlp_only_layers.
  std::vector<bool> moe(static_cast<size_t>(L), !dense);
  if (next) {
    const uint32_t step = src.u32("decoder_sparse_step");
    const std::vector<int64_t> only = c.value("mlp_only_layers", std::vector<int64_t>{});
    for (int64_t l = 0; l < L; ++l)
      moe[static_cast<size_t>(l)] = step && (l + 1) % step == 0 && std::find(only.begin(), only.end(), l) == only.end();
  }
  const bool any_moe = std::find(moe.begin(), moe.end(), true) != moe.end();
  const bool any_dense = std::find(moe.begin(), moe.end(), false) != moe.end();

  const json* rp = c.contains("rope_parameters") ? &c["rope_parameters"] : nullptr;
  auto rope = [&](const char* k) -> const json& {
    if (rp && rp->contains(k) && !(*rp)[k].is_null()) return (*rp)[k];
    return src.need(k);
  };

  w.add_string("general.architecture", ex.arch);
  w.add_u32(a + "block_count", static_cast<uint32_t>(L));
  w.add_u32(a + "context_length", src.u32("max_position_embeddings"));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(H));
  if (any_dense) w.add_u32(a + "feed_forward_length", src.u32("intermediate_size"));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(heads));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(D));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(D));
  w.add_f32(a + "attention.layer_norm_rms_epsilon", src.number("rms_norm_eps"));
  w.add_f32(a + "rope.freq_base", rope("rope_theta").get<float>());
  w.add_u32(a + "rope.dimension_count",
            static_cast<uint32_t>(static_cast<double>(D) * rope("partial_rotary_factor").get<double>()));
  if (!next && rp && rp->contains("mrope_section")) {
    std::vector<int32_t> sections = (*rp)["mrope_section"].get<std::vector<int32_t>>();
    sections.resize(4, 0);
    w.add_i32s(a + "rope.dimension_sections", sections);
  }
  w.add_u32(a + "full_attention_interval", interval);
  bool by_interval = true;
  for (int64_t l = 0; l < L; ++l)
    by_interval = by_interval && linear[static_cast<size_t>(l)] == (interval && (l + 1) % interval != 0);
  if (!by_interval) w.add_bools(a + "attention.recurrent_layers", linear);
  w.add_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(conv));
  w.add_u32(a + "ssm.state_size", static_cast<uint32_t>(dk));
  w.add_u32(a + "ssm.group_count", static_cast<uint32_t>(K));
  w.add_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(Hv));
  w.add_u32(a + "ssm.inner_size", static_cast<uint32_t>(vd));
  if (any_moe) {
    w.add_u32(a + "expert_count", src.u32("num_experts"));
    w.add_u32(a + "expert_used_count", src.u32("num_experts_per_tok"));
    w.add_u32(a + "expert_feed_forward_length", src.u32("moe_intermediate_size"));
    w.add_u32(a + "expert_shared_feed_forward_length", src.u32("shared_expert_intermediate_size"));
    const json norm = next ? src.need("norm_topk_prob") : json(true);  // Qwen3.5-MoE always renormalizes
    if (!norm.is_boolean()) throw_error("[convert] config.json norm_topk_prob must be true or false");
    w.add_bool(a + "expert_weights_norm", norm.get<bool>());
  }
  ex.n_layer = static_cast<int>(L);
  ex.n_head = static_cast<int>(heads);
  ex.n_head_kv = static_cast<int>(kv_heads);
  ex.n_expert = any_moe ? static_cast<int>(src.u32("num_experts")) : 0;

  auto& out = ex.tensors;
  // A tensor computed from checkpoint tensor `from`, which must have `hf_shape` (the layout changes
  // index by the config's sizes); `keep_f32`: kept in F32 as llama.cpp keeps it.
  const char* sizes = "hidden_size, head_dim and the linear_* head counts and dims";
  auto add = [&](std::string name, std::vector<int64_t> shape, const std::string& from, std::vector<int64_t> hf_shape,
                 std::function<std::vector<float>()> f, bool keep_f32 = false) {
    src.expect_shape(from, hf_shape, sizes);
    out.push_back({std::move(name), std::move(shape), std::move(f), src.tensor(from).dtype, keep_f32});
  };
  auto plus_one = [&](const std::string& hf) {
    return [&src, hf] {
      std::vector<float> v = src.values(hf);
      for (float& f : v) f += 1.0f;
      return v;
    };
  };
  // Qwen3.5's value heads from grouped to tiled order along one axis (a no-op where K = H_v).
  auto tiled_heads = [&](const std::string& hf, int64_t rows, int64_t cols, int axis, int64_t begin, int64_t Dh) {
    return [&src, hf, rows, cols, axis, begin, Dh, tiled, K, R] {
      std::vector<float> v = src.values(hf);
      return tiled ? tile_heads(v, rows, cols, axis, begin, K, R, Dh) : v;
    };
  };

  out.push_back(src.as_is("model.embed_tokens.weight", "token_embd.weight"));
  add("output_norm.weight", {H}, "model.norm.weight", {H}, plus_one("model.norm.weight"));
  if (src.has("lm_head.weight") && !c.value("tie_word_embeddings", false))
    out.push_back(src.as_is("lm_head.weight", "output.weight"));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    for (const auto& [hf, gguf] : {std::pair{"input_layernorm.weight", "attn_norm.weight"},
                                   std::pair{"post_attention_layernorm.weight", "post_attention_norm.weight"}})
      add(b + gguf, {H}, p + hf, {H}, plus_one(p + hf));
    if (linear[static_cast<size_t>(l)]) {
      const std::string x = p + "linear_attn.";
      if (next) {  // in_proj_qkvz split: q and k head-major, v and z in the grouped order
        const std::string qkvz = x + "in_proj_qkvz.weight";
        auto part = [&src, qkvz, K, dk, R, dv, H](bool z) {
          return [&src, qkvz, K, dk, R, dv, H, z] {
            const std::vector<float> v = src.values(qkvz);
            const int64_t group = 2 * dk + 2 * R * dv;
            std::vector<float> o;
            auto rows = [&](int64_t g, int64_t from, int64_t n) {
              const float* s = v.data() + (g * group + from) * H;
              o.insert(o.end(), s, s + n * H);
            };
            if (z) {
              for (int64_t g = 0; g < K; ++g) rows(g, 2 * dk + R * dv, R * dv);
            } else {
              for (int64_t g = 0; g < K; ++g) rows(g, 0, dk);
              for (int64_t g = 0; g < K; ++g) rows(g, dk, dk);
              for (int64_t g = 0; g < K; ++g) rows(g, 2 * dk, R * dv);
            }
            return o;
          };
        };
        add(b + "attn_qkv.weight", {conv_dim, H}, qkvz, {conv_dim + vd, H}, part(false));
        add(b + "attn_gate.weight", {vd, H}, qkvz, {conv_dim + vd, H}, part(true));
        src.expect_shape(x + "in_proj_ba.weight", {2 * Hv, H}, sizes);
        out.push_back(src.as_is(x + "in_proj_ba.weight", b + "ssm_ba.weight"));
      } else {
        add(b + "attn_qkv.weight", {conv_dim, H}, x + "in_proj_qkv.weight", {conv_dim, H},
            tiled_heads(x + "in_proj_qkv.weight", conv_dim, H, 0, 2 * kd, dv));
        add(b + "attn_gate.weight", {vd, H}, x + "in_proj_z.weight", {vd, H},
            tiled_heads(x + "in_proj_z.weight", vd, H, 0, 0, dv));
        add(b + "ssm_beta.weight", {Hv, H}, x + "in_proj_b.weight", {Hv, H},
            tiled_heads(x + "in_proj_b.weight", Hv, H, 0, 0, 1));
        add(b + "ssm_alpha.weight", {Hv, H}, x + "in_proj_a.weight", {Hv, H},
            tiled_heads(x + "in_proj_a.weight", Hv, H, 0, 0, 1));
      }
      add(b + "ssm_conv1d.weight", {conv_dim, conv}, x + "conv1d.weight", {conv_dim, 1, conv},
          tiled_heads(x + "conv1d.weight", conv_dim, conv, 0, 2 * kd, dv), true);
      add(b + "ssm_a", {Hv}, x + "A_log", {Hv}, [&src, x, Hv, tiled, K, R] {
        std::vector<float> v = src.values(x + "A_log");
        for (float& f : v) f = -std::exp(f);
        return tiled ? tile_heads(v, Hv, 1, 0, 0, K, R, 1) : v;
      });
      add(b + "ssm_dt.bias", {Hv}, x + "dt_bias", {Hv}, tiled_heads(x + "dt_bias", Hv, 1, 0, 0, 1));
      out.push_back(src.as_is(x + "norm.weight", b + "ssm_norm.weight"));
      add(b + "ssm_out.weight", {H, vd}, x + "out_proj.weight", {H, vd},
          tiled_heads(x + "out_proj.weight", H, vd, 1, 0, dv));
    } else {
      const std::string x = p + "self_attn.";
      out.push_back(src.as_is(x + "q_proj.weight", b + "attn_q.weight"));
      out.push_back(src.as_is(x + "k_proj.weight", b + "attn_k.weight"));
      out.push_back(src.as_is(x + "v_proj.weight", b + "attn_v.weight"));
      out.push_back(src.as_is(x + "o_proj.weight", b + "attn_output.weight"));
      add(b + "attn_q_norm.weight", {D}, x + "q_norm.weight", {D}, plus_one(x + "q_norm.weight"));
      add(b + "attn_k_norm.weight", {D}, x + "k_norm.weight", {D}, plus_one(x + "k_norm.weight"));
    }
    const std::string m = p + "mlp.";
    if (!moe[static_cast<size_t>(l)]) {
      out.push_back(src.as_is(m + "gate_proj.weight", b + "ffn_gate.weight"));
      out.push_back(src.as_is(m + "up_proj.weight", b + "ffn_up.weight"));
      out.push_back(src.as_is(m + "down_proj.weight", b + "ffn_down.weight"));
      continue;
    }
    src.sparse_mlp(m, b, src.u32("num_experts"), src.u32("moe_intermediate_size"), H, out);
    out.push_back(src.as_is(m + "shared_expert.gate_proj.weight", b + "ffn_gate_shexp.weight"));
    out.push_back(src.as_is(m + "shared_expert.up_proj.weight", b + "ffn_up_shexp.weight"));
    out.push_back(src.as_is(m + "shared_expert.down_proj.weight", b + "ffn_down_shexp.weight"));
    add(b + "ffn_gate_inp_shexp.weight", {H}, m + "shared_expert_gate.weight", {1, H},
        [&src, m] { return src.values(m + "shared_expert_gate.weight"); });
  }
  return ex;
}

}  // namespace kiln::convert
