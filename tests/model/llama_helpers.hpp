// Shared helpers of the llama-plugin tests: the plugin registry (static llama plugin), greedy
// decoding through the model host, random tiny checkpoints, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_writer.hpp"
#include "model/model_host.hpp"
#include "plugin/registry.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);

namespace kiln::test {

inline PluginRegistry& llama_registry() {
  static PluginRegistry r;
  static const bool init = [] {
    register_builtin_plugins(r);  // KILN_STATIC_PLUGINS builds already hold the llama plugin
    if (!r.find_model_type("llama")) r.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
    return true;
  }();
  (void)init;
  return r;
}

inline model::HostOptions cpu_options() {
  model::HostOptions o;
  o.device = "cpu";
  o.cache.memory_bytes = 64ull << 20;
  o.max_context = 256;
  o.max_seqs = 4;
  o.progress = false;
  return o;
}

/**
 * A test run on the device its parameter names ("cpu", "vulkan"): every model test runs on the
 * CPU reference backend and, when a Vulkan device is registered (lavapipe in CI), on it too.
 */
class DeviceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!backend::Registry::instance().find(GetParam())) GTEST_SKIP() << "no " << GetParam() << " device registered";
  }
  model::HostOptions options() const {
    model::HostOptions o = cpu_options();
    o.device = GetParam();
    o.allow_cpu_fallback = false;
    return o;
  }
};

inline int argmax(const float* v, size_t n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

/** Greedy decoding as sequence 1, one token per step after the prompt; the `n` ids it picks. */
inline std::vector<int32_t> greedy(model::ModelHost& host, std::vector<int32_t> prompt, int n) {
  EXPECT_EQ(host.add_sequence(1), cache::Status::ok);
  std::vector<int32_t> out;
  const size_t V = host.hparams().n_vocab;
  for (int i = 0; i < n; ++i) {
    model::StepResult r;
    EXPECT_EQ(host.step({{1, prompt, true, false}}, &r), cache::Status::ok);
    out.push_back(argmax(r.logits.data(), V));
    prompt = {out.back()};
  }
  host.release(1);
  return out;
}

/** Runs `ids` as one prefill and returns the logits of every position [n, V]. */
inline std::vector<float> forward_all(model::ModelHost& host, uint64_t seq, const std::vector<int32_t>& ids) {
  EXPECT_EQ(host.add_sequence(seq), cache::Status::ok);
  model::StepResult r;
  EXPECT_EQ(host.step({{seq, ids, true, true}}, &r), cache::Status::ok);
  host.release(seq);
  return r.logits;
}

/** Feeds `ids` in chunks of `chunk` tokens (one decode per token when 1); logits of every position. */
inline std::vector<float> forward_chunked(model::ModelHost& host, uint64_t seq, const std::vector<int32_t>& ids,
                                          size_t chunk) {
  EXPECT_EQ(host.add_sequence(seq), cache::Status::ok);
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    std::vector<int32_t> part(ids.begin() + static_cast<long>(i),
                              ids.begin() + static_cast<long>(std::min(ids.size(), i + chunk)));
    model::StepResult r;
    EXPECT_EQ(host.step({{seq, part, true, true}}, &r), cache::Status::ok);
    all.insert(all.end(), r.logits.begin(), r.logits.end());
  }
  host.release(seq);
  return all;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

/**
 * Writes a random-weight Qwen3-shaped HF checkpoint into `dir` (config.json + model.safetensors).
 * `sliding_window` > 0 makes every layer a sliding-window layer; `moe` adds fused experts.
 */
inline void write_tiny_qwen3(const std::string& dir, DType dtype, uint32_t sliding_window = 0, uint32_t seed = 1,
                             int layers = 2, int V = 96, const char* model_type = "qwen3") {
  const int D = 32, H = 4, KV = 2, Dh = 8, F = 64;
  const bool qwen2 = std::string(model_type) == "qwen2", llama = std::string(model_type) == "llama";
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 0.2f);
  std::vector<model::WriterTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = norm ? 1.0f + nd(rng) * 0.5f : nd(rng);
    ts.push_back({name, norm ? DType::f32 : dtype, std::move(shape), model::encode_f32(v, norm ? DType::f32 : dtype)});
  };
  add("model.embed_tokens.weight", {V, D});
  add("model.norm.weight", {D}, true);
  add("lm_head.weight", {V, D});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {D}, true);
    add(p + "post_attention_layernorm.weight", {D}, true);
    add(p + "self_attn.q_proj.weight", {H * Dh, D});
    add(p + "self_attn.k_proj.weight", {KV * Dh, D});
    add(p + "self_attn.v_proj.weight", {KV * Dh, D});
    add(p + "self_attn.o_proj.weight", {D, H * Dh});
    if (qwen2) {  // Qwen2: q/k/v biases, no per-head norms
      add(p + "self_attn.q_proj.bias", {H * Dh});
      add(p + "self_attn.k_proj.bias", {KV * Dh});
      add(p + "self_attn.v_proj.bias", {KV * Dh});
    } else if (!llama) {  // Qwen3: per-head q/k norms
      add(p + "self_attn.q_norm.weight", {Dh}, true);
      add(p + "self_attn.k_norm.weight", {Dh}, true);
    }
    add(p + "mlp.gate_proj.weight", {F, D});
    add(p + "mlp.up_proj.weight", {F, D});
    add(p + "mlp.down_proj.weight", {D, F});
  }
  model::write_safetensors(dir + "/model.safetensors", ts);
  std::string cfg = std::string(R"({"model_type":")") + model_type + R"(","hidden_size":32,"num_hidden_layers":)" +
                    std::to_string(layers) +
                    R"(,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"intermediate_size":64,
      "rms_norm_eps":1e-6,"vocab_size":)" +
                    std::to_string(V) + R"(,"rope_theta":10000.0,"max_position_embeddings":512,
      "tie_word_embeddings":false,"bos_token_id":1,"eos_token_id":2)";
  if (sliding_window)
    cfg += R"(,"use_sliding_window":true,"max_window_layers":0,"sliding_window":)" + std::to_string(sliding_window);
  cfg += "}";
  model::write_file(dir + "/config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
}

}  // namespace kiln::test
