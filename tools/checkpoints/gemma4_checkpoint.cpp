#include "gemma4_checkpoint.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "convert/gguf_convert.hpp"
#include "model/checkpoint_writer.hpp"
#include "random_weights.hpp"

namespace kiln::test {
namespace {

using nlohmann::json;

using Tensor = GenTensor;

bool kv_shared_layer(const Gemma4Spec& s, int l) {
  return l >= s.layers - s.kv_shared;
}

std::vector<Tensor> make_tensors(const Gemma4Spec& s) {
  std::vector<Tensor> ts;
  const int64_t H = s.hidden, V = s.vocab, L = s.layers, P = s.ple;
  // Linear weights with std ≈ 0.14 so attention is peaked and the window matters; norms and the
  // learned scalars away from 1 so a missing multiply shows (§9.3).
  auto mat = [&](const std::string& name, std::vector<int64_t> shape) {
    const std::string key = s.name + name;
    const size_t n = numel(shape);
    ts.push_back({name, shape, true, [key, n] { return uniform(key, n, -0.25f, 0.25f); }});
  };
  auto scales = [&](const std::string& name, std::vector<int64_t> shape, float mul = 1.0f) {
    const std::string key = s.name + name;
    const size_t n = numel(shape);
    ts.push_back({name, shape, false, [key, n, mul] {
                    std::vector<float> v = uniform(key, n, 0.5f, 1.5f);
                    for (float& f : v) f *= mul;
                    return v;
                  }});
  };
  mat("embed_tokens.weight", {V, H});
  if (s.favour_token >= 0) {
    ts.back().values = [plain = ts.back().values, V, H, favour = s.favour_token] {
      std::vector<float> e = plain();
      for (int64_t v = 0; v < V; ++v) e[static_cast<size_t>(v * H)] = 3.0f;
      e[static_cast<size_t>(favour * H)] = 10.0f;
      return e;
    };
  }
  scales("norm.weight", {H}, s.final_norm);
  if (P) {
    mat("embed_tokens_per_layer.weight", {V, L * P});
    mat("per_layer_model_projection.weight", {L * P, H});
    scales("per_layer_projection_norm.weight", {P});
  }
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const bool sliding = s.sliding[static_cast<size_t>(l)];
    const int64_t d = sliding ? s.head_dim : s.global_head_dim;
    const bool k_eq_v = !sliding && s.k_eq_v;
    const int64_t kv = k_eq_v ? s.global_kv_heads : s.kv_heads;
    const bool shared = kv_shared_layer(s, l);
    const int64_t ff = shared && s.double_wide ? 2 * s.inter : s.inter;
    scales(p + "input_layernorm.weight", {H});
    mat(p + "self_attn.q_proj.weight", {s.heads * d, H});
    if (!shared || s.shared_kv_weights) {
      mat(p + "self_attn.k_proj.weight", {kv * d, H});
      if (!k_eq_v) mat(p + "self_attn.v_proj.weight", {kv * d, H});
      scales(p + "self_attn.k_norm.weight", {d});
    }
    mat(p + "self_attn.o_proj.weight", {H, s.heads * d});
    scales(p + "self_attn.q_norm.weight", {d});
    scales(p + "post_attention_layernorm.weight", {H});
    scales(p + "pre_feedforward_layernorm.weight", {H});
    scales(p + "post_feedforward_layernorm.weight", {H});
    mat(p + "mlp.gate_proj.weight", {ff, H});
    mat(p + "mlp.up_proj.weight", {ff, H});
    mat(p + "mlp.down_proj.weight", {H, ff});
    scales(p + "layer_scalar", {1});
    if (P) {
      mat(p + "per_layer_input_gate.weight", {P, H});
      mat(p + "per_layer_projection.weight", {H, P});
      scales(p + "post_per_layer_input_norm.weight", {H});
    }
    if (s.moe) {
      const int64_t E = s.experts, I = s.expert_inter;
      mat(p + "router.proj.weight", {E, H});
      scales(p + "router.scale", {H});
      scales(p + "router.per_expert_scale", {E});
      mat(p + "experts.gate_up_proj", {E, 2 * I, H});
      mat(p + "experts.down_proj", {E, H, I});
      scales(p + "pre_feedforward_layernorm_2.weight", {H});
      scales(p + "post_feedforward_layernorm_1.weight", {H});
      scales(p + "post_feedforward_layernorm_2.weight", {H});
    }
  }
  return ts;
}

json text_config(const Gemma4Spec& s) {
  json types = json::array();
  for (bool sl : s.sliding) types.push_back(sl ? "sliding_attention" : "full_attention");
  json c = {
      {"model_type", "gemma4_text"},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.inter},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"global_head_dim", s.global_head_dim},
      {"attention_k_eq_v", s.k_eq_v},
      {"num_global_key_value_heads", s.k_eq_v ? json(s.global_kv_heads) : json(nullptr)},
      {"layer_types", types},
      {"sliding_window", s.window},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
      {"max_position_embeddings", 1024},
      {"rms_norm_eps", 1e-6},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"final_logit_softcapping", s.softcap > 0 ? json(s.softcap) : json(nullptr)},
      {"tie_word_embeddings", true},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"hidden_size_per_layer_input", s.ple},
      {"vocab_size_per_layer_input", s.vocab},
      {"num_kv_shared_layers", s.kv_shared},
      {"use_double_wide_mlp", s.double_wide},
      {"enable_moe_block", s.moe},
      {"num_experts", s.moe ? json(s.experts) : json(nullptr)},
      {"top_k_experts", s.moe ? json(s.top_k) : json(nullptr)},
      {"moe_intermediate_size", s.moe ? json(s.expert_inter) : json(nullptr)},
      {"use_bidirectional_attention", nullptr},
      {"pad_token_id", 0},
      {"bos_token_id", 2},
      {"eos_token_id", json::array({1, 106})},
      {"torch_dtype", "float32"},
  };
  return c;
}

}  // namespace

Gemma4Spec gemma4_kitchen_sink() {
  Gemma4Spec s;
  s.name = "kitchen_sink";
  return s;
}

Gemma4Spec gemma4_31b_like() {
  Gemma4Spec s;
  s.name = "31b_like";
  s.kv_shared = 0;
  s.ple = 0;
  s.moe = false;
  s.double_wide = false;
  s.final_norm = 6.0f;
  s.text_only = true;
  return s;
}

Gemma4Spec gemma4_e4b_like() {
  Gemma4Spec s;
  s.name = "e4b_like";
  s.k_eq_v = false;
  s.moe = false;
  s.double_wide = false;
  s.shared_kv_weights = true;
  return s;
}

std::vector<Gemma4Spec> gemma4_variants() {
  return {gemma4_kitchen_sink(), gemma4_31b_like(), gemma4_e4b_like()};
}

Gemma4Cost gemma4_cost(const Gemma4Spec& s) {
  Gemma4Cost c;
  for (const Tensor& t : make_tensors(s)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    c.params += static_cast<double>(n);
    const bool gathered = t.name == "embed_tokens.weight" || t.name == "embed_tokens_per_layer.weight";
    const bool shared_kv_unused =
        t.name.find("self_attn.k_") != std::string::npos || t.name.find("self_attn.v_") != std::string::npos;
    if (!t.matrix || gathered) continue;
    if (shared_kv_unused && s.shared_kv_weights) {
      const int l = std::stoi(t.name.substr(7));
      if (kv_shared_layer(s, l)) continue;
    }
    double bytes = static_cast<double>(*dtype_bytes(s.dtype, n));
    if (t.name.find("experts.") != std::string::npos) bytes *= static_cast<double>(s.top_k) / s.experts;
    c.decode_bytes += static_cast<uint64_t>(bytes);
  }
  // The tied head reads the embedding as the vocabulary matrix.
  c.decode_bytes += *dtype_bytes(s.dtype, int64_t{s.vocab} * s.hidden);
  return c;
}

void write_gemma4_hf(const Gemma4Spec& s, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string prefix = s.text_only ? "model." : "model.language_model.";
  std::vector<model::WriterTensor> out;
  for (Tensor& t : make_tensors(s)) {
    const DType dt = t.matrix ? s.dtype : DType::f32;
    out.push_back({prefix + t.name, dt, t.shape, model::encode_f32(t.values(), dt)});
  }
  json config;
  if (s.text_only) {
    config = text_config(s);
    config["architectures"] = {"Gemma4ForCausalLM"};
  } else {
    // The released wrapper: vision weights ride along and must be skipped.
    for (const char* v : {"model.vision_tower.encoder.layers.0.mlp.down_proj.linear.weight",
                          "model.embed_vision.embedding_projection.weight"})
      out.push_back({v, DType::f32, {4, 8}, model::encode_f32(uniform(v, 32, -1, 1), DType::f32)});
    config = {{"architectures", {"Gemma4ForConditionalGeneration"}},
              {"model_type", "gemma4"},
              {"text_config", text_config(s)},
              {"vision_config", {{"model_type", "gemma4_vision"}, {"hidden_size", 8}}},
              {"audio_config", nullptr},
              {"boi_token_id", 255999},
              {"eoi_token_id", 258882},
              {"image_token_id", 258880},
              {"eos_token_id", json::array({1, 106})},
              {"tie_word_embeddings", true},
              {"transformers_version", "5.5.0"}};
  }
  model::write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  write_text(dir + "/config.json", config.dump(2));
  const json gen = {{"bos_token_id", 2}, {"eos_token_id", {1, 106, 50}}, {"pad_token_id", 0},
                    {"do_sample", true}, {"temperature", 1.0},           {"top_k", 64},
                    {"top_p", 0.95}};
  write_text(dir + "/generation_config.json", gen.dump(2));
}

void write_gemma4_tokenizer_proxy(const std::string& gemma3_dir, const std::string& template_path,
                                  const std::string& dir) {
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  json tok = json::parse(read(gemma3_dir + "/tokenizer.json"));
  const std::pair<int, const char*> kControl[] = {
      {46, "<|tool>"},          {47, "<tool|>"},          {48, "<|tool_call>"}, {49, "<tool_call|>"},
      {50, "<|tool_response>"}, {51, "<tool_response|>"}, {52, "<|\"|>"},       {98, "<|think|>"},
      {100, "<|channel>"},      {101, "<channel|>"},      {105, "<|turn>"},     {106, "<turn|>"}};
  json& vocab = tok["model"]["vocab"];
  for (const auto& [id, text] : kControl)
    for (json& t : tok["added_tokens"])
      if (t["id"] == id) {
        vocab.erase(t["content"].get<std::string>());
        vocab[text] = id;
        t["content"] = text;
        t["special"] = true;
      }
  tok["post_processor"] = nullptr;  // the chat template writes <bos> itself
  json cfg = json::parse(read(gemma3_dir + "/tokenizer_config.json"));
  cfg["add_bos_token"] = false;
  cfg["eos_token"] = "<turn|>";
  cfg.erase("chat_template");
  write_text(dir + "/tokenizer.json", tok.dump());
  write_text(dir + "/tokenizer_config.json", cfg.dump(2));
  write_text(dir + "/chat_template.jinja", read(template_path));
}

void write_gemma4_gguf(const Gemma4Spec& s, const std::string& path) {
  gguf_through_convert(
      [&](DType matrices, const std::string& dir) {
        Gemma4Spec hf = s;
        hf.dtype = matrices;
        write_gemma4_hf(hf, dir);
      },
      s.dtype, "tiny gemma4 " + s.name, s.vocab, 2, 1, path);  // Gemma's <bos> 2, <eos> 1
}

}  // namespace kiln::test
