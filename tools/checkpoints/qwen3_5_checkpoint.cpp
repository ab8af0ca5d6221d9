#include "qwen3_5_checkpoint.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/convert.hpp"
#include "model/checkpoint_writer.hpp"
#include "random_weights.hpp"

namespace kiln::test {
namespace {

using nlohmann::json;

bool is_moe_layer(const Qwen35Spec& s, int l) {
  if (s.model_type == "qwen3_5") return false;
  for (int d : s.mlp_only_layers)
    if (d == l) return false;
  return true;
}

std::vector<GenTensor> make_tensors(const Qwen35Spec& s) {
  std::vector<GenTensor> ts;
  const int64_t H = s.hidden, V = s.vocab;
  const int64_t kd = int64_t{s.k_heads} * s.k_dim, vd = int64_t{s.v_heads} * s.v_dim, conv_dim = 2 * kd + vd;
  // Ranges after §8.3: linears of std ≈ 0.1, a decisive router, zero-centred norms away from 0 (a
  // missing "+1" shows), the gated norm around 1, A_log = log(U(1, 16)).
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi, bool matrix = true,
                 bool log = false) {
    const std::string key = s.name + name;
    const size_t n = numel(shape);
    ts.push_back({name, std::move(shape), matrix, [key, n, lo, hi, log] {
                    std::vector<float> v = uniform(key, n, lo, hi);
                    if (log)
                      for (float& f : v) f = std::log(f);
                    return v;
                  }});
  };
  auto linear = [&](const std::string& name, std::vector<int64_t> shape) {
    add(name, std::move(shape), -0.17f, 0.17f);
  };
  auto zc_norm = [&](const std::string& name, int64_t n) { add(name, {n}, -0.35f, 0.35f); };
  add("embed_tokens.weight", {V, H}, -0.5f, 0.5f);
  zc_norm("norm.weight", H);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    zc_norm(p + "input_layernorm.weight", H);
    zc_norm(p + "post_attention_layernorm.weight", H);
    if (s.linear[static_cast<size_t>(l)]) {
      const std::string a = p + "linear_attn.";
      if (s.model_type == "qwen3_next") {
        linear(a + "in_proj_qkvz.weight", {2 * kd + 2 * vd, H});
        linear(a + "in_proj_ba.weight", {2 * int64_t{s.v_heads}, H});
      } else {
        linear(a + "in_proj_qkv.weight", {conv_dim, H});
        linear(a + "in_proj_z.weight", {vd, H});
        linear(a + "in_proj_b.weight", {s.v_heads, H});
        linear(a + "in_proj_a.weight", {s.v_heads, H});
      }
      add(a + "conv1d.weight", {conv_dim, 1, s.conv}, -0.52f, 0.52f);
      add(a + "A_log", {s.v_heads}, 1.0f, 16.0f, false, true);  // F32, as released
      add(a + "dt_bias", {s.v_heads}, -0.87f, 0.87f);
      add(a + "norm.weight", {s.v_dim}, 0.65f, 1.35f, false);  // F32, as released
      linear(a + "out_proj.weight", {H, vd});
    } else {
      const std::string a = p + "self_attn.";
      const int64_t D = s.head_dim;
      linear(a + "q_proj.weight", {2 * s.heads * D, H});
      linear(a + "k_proj.weight", {s.kv_heads * D, H});
      linear(a + "v_proj.weight", {s.kv_heads * D, H});
      linear(a + "o_proj.weight", {H, s.heads * D});
      zc_norm(a + "q_norm.weight", D);
      zc_norm(a + "k_norm.weight", D);
    }
    const std::string m = p + "mlp.";
    if (!is_moe_layer(s, l)) {
      linear(m + "gate_proj.weight", {s.inter, H});
      linear(m + "up_proj.weight", {s.inter, H});
      linear(m + "down_proj.weight", {H, s.inter});
      continue;
    }
    const int64_t E = s.experts, I = s.expert_inter, S = s.shared_inter;
    add(m + "gate.weight", {E, H}, -1.7f, 1.7f);
    if (s.fused_experts) {
      linear(m + "experts.gate_up_proj", {E, 2 * I, H});
      linear(m + "experts.down_proj", {E, H, I});
    } else {
      for (int e = 0; e < s.experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        linear(x + "gate_proj.weight", {I, H});
        linear(x + "up_proj.weight", {I, H});
        linear(x + "down_proj.weight", {H, I});
      }
    }
    linear(m + "shared_expert.gate_proj.weight", {S, H});
    linear(m + "shared_expert.up_proj.weight", {S, H});
    linear(m + "shared_expert.down_proj.weight", {H, S});
    add(m + "shared_expert_gate.weight", {1, H}, -0.87f, 0.87f);
  }
  return ts;
}

json text_config(const Qwen35Spec& s) {
  const bool moe = s.model_type != "qwen3_5";
  json c = {
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"linear_num_key_heads", s.k_heads},
      {"linear_num_value_heads", s.v_heads},
      {"linear_key_head_dim", s.k_dim},
      {"linear_value_head_dim", s.v_dim},
      {"linear_conv_kernel_dim", s.conv},
      {"full_attention_interval", 4},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"max_position_embeddings", 4096},
      {"tie_word_embeddings", s.tied},
      {"bos_token_id", s.bos},
      {"eos_token_id", s.eos},
  };
  if (s.explicit_layer_types) {
    json types = json::array();
    for (bool lin : s.linear) types.push_back(lin ? "linear_attention" : "full_attention");
    c["layer_types"] = types;
  }
  if (s.model_type == "qwen3_next") {
    c["model_type"] = "qwen3_next";
    c["rope_theta"] = s.rope_theta;
    c["partial_rotary_factor"] = s.partial_rotary;
    c["norm_topk_prob"] = s.norm_topk;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = s.mlp_only_layers;
    c["intermediate_size"] = s.inter;
  } else {
    c["model_type"] = s.model_type + "_text";
    c["attn_output_gate"] = true;
    c["mtp_num_hidden_layers"] = 1;
    c["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", s.rope_theta},
                            {"partial_rotary_factor", s.partial_rotary},
                            {"mrope_section", {2, 1, 1}},
                            {"mrope_interleaved", true}};
    if (!moe) c["intermediate_size"] = s.inter;
  }
  if (moe) {
    c["num_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
    c["moe_intermediate_size"] = s.expert_inter;
    c["shared_expert_intermediate_size"] = s.shared_inter;
  }
  return c;
}

}  // namespace

Qwen35Spec qwen35_moe_tiny() {
  Qwen35Spec s;
  s.name = "qwen3_5_moe";
  return s;
}

Qwen35Spec qwen3_next_tiny() {
  Qwen35Spec s;
  s.name = "qwen3_next";
  s.model_type = "qwen3_next";
  s.explicit_layer_types = false;
  s.norm_topk = false;
  s.mlp_only_layers = {1};
  s.tied = true;
  s.fused_experts = false;
  s.dtype = DType::f32;
  return s;
}

Qwen35Spec qwen35_dense_tiny() {
  Qwen35Spec s;
  s.name = "qwen3_5_dense";
  s.model_type = "qwen3_5";
  s.linear = {true, false, true, true, true, false};
  s.layers = 6;
  s.v_heads = 2;
  s.v_dim = 8;  // d_v != d_k
  s.tied = true;
  s.dtype = DType::f16;
  return s;
}

Qwen35Spec qwen35_default_model() {
  Qwen35Spec s;
  s.name = "default";
  s.model_type = "qwen3_5";
  s.vocab = 151936;
  s.hidden = 128;
  s.layers = 8;
  s.linear = {true, true, true, false, true, true, true, false};
  s.head_dim = 64;
  s.k_dim = s.v_dim = 32;
  s.inter = 256;
  s.tied = true;
  s.bos = 151643;
  s.eos = {151645, 151643};  // <|im_end|>, <|endoftext|>
  return s;
}

std::vector<Qwen35Spec> qwen35_variants() {
  return {qwen35_moe_tiny(), qwen3_next_tiny(), qwen35_dense_tiny()};
}

Qwen35Cost qwen35_cost(const Qwen35Spec& s) {
  Qwen35Cost c;
  auto bytes = [&](int64_t n) { return static_cast<double>(*dtype_bytes(s.dtype, n)); };
  for (const GenTensor& t : make_tensors(s)) {
    const auto n = static_cast<int64_t>(numel(t.shape));
    c.params += static_cast<double>(n);
    if (!t.matrix || t.name == "embed_tokens.weight" || t.shape.size() < 2) continue;  // gathered, or tiny
    double b = bytes(n);
    if (t.name.find("experts.") != std::string::npos && t.name.find("shared") == std::string::npos)
      b *= static_cast<double>(s.top_k) / s.experts;
    c.decode_bytes += static_cast<uint64_t>(b);
  }
  const int64_t head = int64_t{s.vocab} * s.hidden;  // the vocabulary matrix (tied or not)
  c.decode_bytes += static_cast<uint64_t>(bytes(head));
  if (!s.tied) c.params += static_cast<double>(head);
  return c;
}

void write_qwen35_hf(const Qwen35Spec& s, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const bool wrapper = s.model_type != "qwen3_next";
  const std::string prefix = wrapper ? "model.language_model." : "model.";
  std::vector<model::WriterTensor> out;
  for (GenTensor& t : make_tensors(s)) {
    const DType dt = t.matrix ? s.dtype : DType::f32;
    out.push_back({prefix + t.name, dt, t.shape, model::encode_f32(t.values(), dt)});
  }
  if (!s.tied)
    out.push_back({"lm_head.weight",
                   s.dtype,
                   {s.vocab, s.hidden},
                   model::encode_f32(uniform(s.name + "lm_head", numel({s.vocab, s.hidden}), -0.17f, 0.17f), s.dtype)});
  // What rides along in the releases and is not run: a vision tower and the MTP head.
  for (const char* extra : {"model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight"})
    if (wrapper) out.push_back({extra, DType::f32, {4, 8}, model::encode_f32(uniform(extra, 32, -1, 1), DType::f32)});
  json config;
  if (wrapper) {
    const bool moe = s.model_type == "qwen3_5_moe";
    config = {{"architectures", {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
              {"model_type", s.model_type},
              {"text_config", text_config(s)},
              {"vision_config", {{"model_type", "qwen3_5_vision"}, {"hidden_size", 8}}},
              {"image_token_id", 248056},
              {"video_token_id", 248057},
              {"tie_word_embeddings", s.tied},
              {"transformers_version", "5.5.0"}};
  } else {
    config = text_config(s);
    config["architectures"] = {"Qwen3NextForCausalLM"};
  }
  model::write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  write_text(dir + "/config.json", config.dump(2));
  const json gen = {{"bos_token_id", s.bos}, {"eos_token_id", s.eos}, {"do_sample", true},
                    {"temperature", 0.6},    {"top_k", 20},           {"top_p", 0.95}};
  write_text(dir + "/generation_config.json", gen.dump(2));
}

namespace {

/**
 * llama.cpp's value-head reorder (_LinearAttentionVReorderBase): along one axis, the span
 * [begin, begin + K·R·D) goes from grouped order (g·R + j) to tiled order (j·K + g), D values per head.
 * `v` is row-major [rows, cols]; axis 0 permutes rows, axis 1 columns.
 */
std::vector<float> reorder_heads(const std::vector<float>& v, int64_t rows, int64_t cols, int axis, int64_t begin,
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

void write_qwen35_gguf(const Qwen35Spec& s, const std::string& path) {
  std::map<std::string, GenTensor> t;
  for (GenTensor& x : make_tensors(s)) t.emplace(x.name, std::move(x));
  // The values as the HF checkpoint stores them (rounded to its dtype), converted from there.
  auto vals = [&](const std::string& n) {
    const GenTensor& x = t.at(n);
    std::vector<float> v = x.values();
    if (x.matrix && (s.dtype == DType::f16 || s.dtype == DType::bf16)) {  // types HF files hold
      const std::vector<uint8_t> stored = model::encode_f32(v, s.dtype);
      to_f32(s.dtype, stored.data(), static_cast<int64_t>(v.size()), v.data());
    }
    return v;
  };
  const bool next = s.model_type == "qwen3_next";
  const std::string arch = next ? "qwen3next" : s.model_type == "qwen3_5" ? "qwen35" : "qwen35moe";
  const int64_t H = s.hidden, K = s.k_heads, R = s.v_heads / s.k_heads, dk = s.k_dim, dv = s.v_dim;
  const int64_t kd = K * dk, vd = int64_t{s.v_heads} * dv, conv_dim = 2 * kd + vd;
  const bool reorder = !next && s.k_heads != s.v_heads;
  model::GgufWriter g;
  const std::string a = arch + ".";
  g.add_string("general.architecture", arch);
  g.add_string("general.name", "tiny " + s.name);
  g.add_u32(a + "block_count", static_cast<uint32_t>(s.layers));
  g.add_u32(a + "context_length", 4096);
  g.add_u32(a + "embedding_length", static_cast<uint32_t>(s.hidden));
  g.add_u32(a + "feed_forward_length", static_cast<uint32_t>(s.inter));
  g.add_u32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
  g.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  g.add_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  g.add_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  g.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  g.add_f32(a + "rope.freq_base", s.rope_theta);
  g.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.head_dim * s.partial_rotary));
  if (!next) g.add_i32s(a + "rope.dimension_sections", {2, 1, 1, 0});
  g.add_u32(a + "full_attention_interval", 4);
  std::vector<bool> recurrent(s.linear.begin(), s.linear.end());
  bool by_interval = true;
  for (int l = 0; l < s.layers; ++l)
    by_interval = by_interval && recurrent[static_cast<size_t>(l)] == ((l + 1) % 4 != 0);
  if (!by_interval) g.add_bools(a + "attention.recurrent_layers", recurrent);
  g.add_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.conv));
  g.add_u32(a + "ssm.state_size", static_cast<uint32_t>(s.k_dim));
  g.add_u32(a + "ssm.group_count", static_cast<uint32_t>(s.k_heads));
  g.add_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.v_heads));
  g.add_u32(a + "ssm.inner_size", static_cast<uint32_t>(vd));
  if (s.model_type != "qwen3_5") {
    g.add_u32(a + "expert_count", static_cast<uint32_t>(s.experts));
    g.add_u32(a + "expert_used_count", static_cast<uint32_t>(s.top_k));
    g.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.expert_inter));
    g.add_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_inter));
    g.add_bool(a + "expert_weights_norm", s.norm_topk);
  }
  model::add_placeholder_vocab(g, s.vocab, static_cast<uint32_t>(s.bos), static_cast<uint32_t>(s.eos.front()));

  auto mat = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    g.add_tensor({name, s.dtype, std::move(shape), model::encode_f32(v, s.dtype)});
  };
  auto vec = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    g.add_tensor({name, DType::f32, std::move(shape), model::encode_f32(v, DType::f32)});
  };
  auto plus_one = [](std::vector<float> v) {
    for (float& f : v) f += 1.0f;
    return v;
  };
  mat("token_embd.weight", {s.vocab, H}, vals("embed_tokens.weight"));
  vec("output_norm.weight", {H}, plus_one(vals("norm.weight")));
  if (!s.tied)
    mat("output.weight", {s.vocab, H}, uniform(s.name + "lm_head", numel({s.vocab, s.hidden}), -0.17f, 0.17f));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", {H}, plus_one(vals(p + "input_layernorm.weight")));
    vec(b + "post_attention_norm.weight", {H}, plus_one(vals(p + "post_attention_layernorm.weight")));
    if (s.linear[static_cast<size_t>(l)]) {
      const std::string x = p + "linear_attn.";
      if (next) {  // in_proj_qkvz split: q and k head-major, v and z in the grouped order
        const std::vector<float> w = vals(x + "in_proj_qkvz.weight");
        const int64_t group = 2 * dk + 2 * R * dv;
        std::vector<float> qkv, z;
        auto rows = [&](std::vector<float>& dst, int64_t gi, int64_t from, int64_t n) {
          const auto* src = w.data() + (gi * group + from) * H;
          dst.insert(dst.end(), src, src + n * H);
        };
        for (int64_t gi = 0; gi < K; ++gi) rows(qkv, gi, 0, dk);
        for (int64_t gi = 0; gi < K; ++gi) rows(qkv, gi, dk, dk);
        for (int64_t gi = 0; gi < K; ++gi) rows(qkv, gi, 2 * dk, R * dv);
        for (int64_t gi = 0; gi < K; ++gi) rows(z, gi, 2 * dk + R * dv, R * dv);
        mat(b + "attn_qkv.weight", {conv_dim, H}, qkv);
        mat(b + "attn_gate.weight", {vd, H}, z);
        mat(b + "ssm_ba.weight", {2 * int64_t{s.v_heads}, H}, vals(x + "in_proj_ba.weight"));
      } else {
        auto heads = [&](const std::vector<float>& v, int64_t rows, int64_t cols, int axis, int64_t begin, int64_t D) {
          return reorder ? reorder_heads(v, rows, cols, axis, begin, K, R, D) : v;
        };
        mat(b + "attn_qkv.weight", {conv_dim, H}, heads(vals(x + "in_proj_qkv.weight"), conv_dim, H, 0, 2 * kd, dv));
        mat(b + "attn_gate.weight", {vd, H}, heads(vals(x + "in_proj_z.weight"), vd, H, 0, 0, dv));
        mat(b + "ssm_beta.weight", {s.v_heads, H}, heads(vals(x + "in_proj_b.weight"), s.v_heads, H, 0, 0, 1));
        mat(b + "ssm_alpha.weight", {s.v_heads, H}, heads(vals(x + "in_proj_a.weight"), s.v_heads, H, 0, 0, 1));
      }
      auto heads1 = [&](std::vector<float> v, int64_t rows, int64_t cols, int axis, int64_t begin, int64_t D) {
        return reorder ? reorder_heads(v, rows, cols, axis, begin, K, R, D) : v;
      };
      vec(b + "ssm_conv1d.weight", {conv_dim, s.conv},
          heads1(vals(x + "conv1d.weight"), conv_dim, s.conv, 0, 2 * kd, dv));
      std::vector<float> decay = vals(x + "A_log");
      for (float& f : decay) f = -std::exp(f);
      vec(b + "ssm_a", {s.v_heads}, heads1(decay, s.v_heads, 1, 0, 0, 1));
      vec(b + "ssm_dt.bias", {s.v_heads}, heads1(vals(x + "dt_bias"), s.v_heads, 1, 0, 0, 1));
      vec(b + "ssm_norm.weight", {dv}, vals(x + "norm.weight"));
      mat(b + "ssm_out.weight", {H, vd}, heads1(vals(x + "out_proj.weight"), H, vd, 1, 0, dv));
    } else {
      const std::string x = p + "self_attn.";
      const int64_t D = s.head_dim;
      mat(b + "attn_q.weight", {2 * s.heads * D, H}, vals(x + "q_proj.weight"));
      mat(b + "attn_k.weight", {s.kv_heads * D, H}, vals(x + "k_proj.weight"));
      mat(b + "attn_v.weight", {s.kv_heads * D, H}, vals(x + "v_proj.weight"));
      mat(b + "attn_output.weight", {H, s.heads * D}, vals(x + "o_proj.weight"));
      vec(b + "attn_q_norm.weight", {D}, plus_one(vals(x + "q_norm.weight")));
      vec(b + "attn_k_norm.weight", {D}, plus_one(vals(x + "k_norm.weight")));
    }
    const std::string m = p + "mlp.";
    if (!is_moe_layer(s, l)) {
      mat(b + "ffn_gate.weight", {s.inter, H}, vals(m + "gate_proj.weight"));
      mat(b + "ffn_up.weight", {s.inter, H}, vals(m + "up_proj.weight"));
      mat(b + "ffn_down.weight", {H, s.inter}, vals(m + "down_proj.weight"));
      continue;
    }
    const int64_t E = s.experts, I = s.expert_inter, S = s.shared_inter;
    mat(b + "ffn_gate_inp.weight", {E, H}, vals(m + "gate.weight"));
    std::vector<float> gate, up, down;
    if (s.fused_experts) {  // the converter splits gate_up (gate rows first) into two tensors
      const std::vector<float> gu = vals(m + "experts.gate_up_proj");
      for (int64_t e = 0; e < E; ++e) {
        const auto* base = gu.data() + e * 2 * I * H;
        gate.insert(gate.end(), base, base + I * H);
        up.insert(up.end(), base + I * H, base + 2 * I * H);
      }
      down = vals(m + "experts.down_proj");
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        for (auto [dst, n] :
             {std::pair{&gate, "gate_proj.weight"}, {&up, "up_proj.weight"}, {&down, "down_proj.weight"}}) {
          const std::vector<float> v = vals(x + n);
          dst->insert(dst->end(), v.begin(), v.end());
        }
      }
    }
    mat(b + "ffn_gate_exps.weight", {E, I, H}, gate);
    mat(b + "ffn_up_exps.weight", {E, I, H}, up);
    mat(b + "ffn_down_exps.weight", {E, H, I}, down);
    mat(b + "ffn_gate_shexp.weight", {S, H}, vals(m + "shared_expert.gate_proj.weight"));
    mat(b + "ffn_up_shexp.weight", {S, H}, vals(m + "shared_expert.up_proj.weight"));
    mat(b + "ffn_down_shexp.weight", {H, S}, vals(m + "shared_expert.down_proj.weight"));
    vec(b + "ffn_gate_inp_shexp.weight", {H}, vals(m + "shared_expert_gate.weight"));
  }
  g.write(path);
}

void write_qwen35_tokenizer(const std::string& qwen3_dir, const std::string& template_path, const std::string& dir) {
  json tok = json::parse(read_text(qwen3_dir + "/tokenizer.json"));
  tok["normalizer"] = nullptr;
  write_text(dir + "/tokenizer.json", tok.dump());
  write_text(dir + "/tokenizer_config.json", read_text(qwen3_dir + "/tokenizer_config.json"));
  write_text(dir + "/chat_template.jinja", read_text(template_path));
}

}  // namespace kiln::test
