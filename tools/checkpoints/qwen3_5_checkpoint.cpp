#include "qwen3_5_checkpoint.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "convert/gguf_convert.hpp"
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

void write_qwen35_gguf(const Qwen35Spec& s, const std::string& path) {
  gguf_through_convert(
      [&](DType matrices, const std::string& dir) {
        Qwen35Spec hf = s;
        hf.dtype = matrices;
        write_qwen35_hf(hf, dir);
      },
      s.dtype, "tiny " + s.name, s.vocab, static_cast<uint32_t>(s.bos), static_cast<uint32_t>(s.eos.front()), path);
}

void write_qwen35_tokenizer(const std::string& qwen3_dir, const std::string& template_path, const std::string& dir) {
  json tok = json::parse(read_text(qwen3_dir + "/tokenizer.json"));
  tok["normalizer"] = nullptr;
  write_text(dir + "/tokenizer.json", tok.dump());
  write_text(dir + "/tokenizer_config.json", read_text(qwen3_dir + "/tokenizer_config.json"));
  write_text(dir + "/chat_template.jinja", read_text(template_path));
}

}  // namespace kiln::test
