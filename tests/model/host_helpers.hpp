// Helpers of the model-host tests: the tiny hybrid model (tests/model/hybrid_test_plugin.cpp) and
// its random checkpoints, a registry holding it and the llama plugin, and a device that fails on
// demand (failure injection for the host's rollback).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "fixtures.hpp"
#include "llama_helpers.hpp"
#include "model/checkpoint_writer.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_test_hybrid(uint32_t, uint32_t);

namespace kiln::test {

/** The llama plugin and the test hybrid model. */
inline PluginRegistry& host_registry() {
  static const bool init =
      llama_registry().register_static(&kiln_plugin_descriptor_test_hybrid, "<static test_hybrid>");
  (void)init;
  return llama_registry();
}

struct HybridSpec {
  std::vector<std::string> layers = {"linear", "full", "linear", "sliding"};
  int window = 8;
  int chunk = 8;
  bool host_table = true;
  uint32_t fail_at_tokens = 0;
  DType dtype = DType::f32;
  uint32_t seed = 7;
};

/** Writes a random-weight checkpoint of the test hybrid model (D 32, vocab 96) into `dir`. */
inline void write_tiny_hybrid(const std::string& dir, const HybridSpec& s = {}) {
  const int D = 32, V = 96, C = 2 * 2 * 8 + 4 * 8, Hv = 4, Dv = 8, F = 48;
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd(0, 0.2f);
  std::vector<model::WriterTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean = 0.0f, float scale = 1.0f,
                 bool f32 = false) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = mean + scale * nd(rng);
    const DType t = f32 ? DType::f32 : s.dtype;
    ts.push_back({name, t, std::move(shape), model::encode_f32(v, t)});
  };
  add("model.embed_tokens.weight", {V, D});
  add("model.extra_embed.weight", {V, D}, 0.0f, 0.5f);
  add("model.norm.weight", {D}, 1.0f, 0.5f, true);
  add("lm_head.weight", {V, D});
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {D}, 1.0f, 0.5f, true);
    if (s.layers[l] == "linear") {
      add(p + "linear_attn.in_proj_qkv.weight", {C, D});
      add(p + "linear_attn.conv1d.weight", {C, 4}, 0.0f, 2.0f, true);
      add(p + "linear_attn.in_proj_b.weight", {Hv, D});
      add(p + "linear_attn.in_proj_a.weight", {Hv, D});
      add(p + "linear_attn.decay", {Hv}, -0.5f, 0.5f, true);
      add(p + "linear_attn.norm.weight", {Dv}, 1.0f, 0.5f, true);
      add(p + "linear_attn.in_proj_z.weight", {Hv * Dv, D});
      add(p + "linear_attn.out_proj.weight", {D, Hv * Dv});
    } else {
      add(p + "self_attn.q_proj.weight", {32, D});
      add(p + "self_attn.k_proj.weight", {16, D});
      add(p + "self_attn.v_proj.weight", {16, D});
      add(p + "self_attn.o_proj.weight", {D, 32});
    }
    add(p + "post_attention_layernorm.weight", {D}, 1.0f, 0.5f, true);
    add(p + "mlp.gate_proj.weight", {F, D});
    add(p + "mlp.up_proj.weight", {F, D});
    add(p + "mlp.down_proj.weight", {D, F});
  }
  model::write_safetensors(dir + "/model.safetensors", ts);
  std::string types;
  for (const auto& t : s.layers) types += (types.empty() ? "\"" : ",\"") + t + "\"";
  const std::string cfg =
      "{\"model_type\":\"kiln_test_hybrid\",\"hidden_size\":32,\"vocab_size\":96,\"layer_types\":[" + types +
      "],\"sliding_window\":" + std::to_string(s.window) + ",\"chunk\":" + std::to_string(s.chunk) +
      ",\"host_table\":" + (s.host_table ? "true" : "false") +
      ",\"fail_at_tokens\":" + std::to_string(s.fail_at_tokens) + "}";
  model::write_file(dir + "/config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
}

/**
 * A device that forwards to a registered one ("faulty:<id>") and fails the run it is told to: wait()
 * lets the inner run finish, then throws BackendError(device), as a lost device or a kernel's error
 * flag would. Registered once per process for every device.
 */
class FaultyDevice : public backend::Device {
 public:
  explicit FaultyDevice(backend::Device& inner) : inner_(inner) {
    info_ = inner.info();
    info_.id = "faulty:" + inner.info().id;
    info_.name = "faulty " + inner.info().name;
  }
  /** The n-th wait() from now fails (1: the next one); 0: none. */
  void fail_wait(uint32_t n) { countdown_ = n; }
  /** Every wait() first sleeps this long (a slow device; 0: none). */
  void slow_wait(std::chrono::milliseconds ms) { slow_ms_ = static_cast<uint32_t>(ms.count()); }
  /** The n-th allocate() from now throws out-of-memory (1: the next one); 0: none. */
  void fail_allocate(uint32_t n) { alloc_countdown_ = n; }
  const backend::DeviceInfo& info() const override { return info_; }
  backend::MemoryInfo memory() const override { return inner_.memory(); }
  std::unique_ptr<backend::Buffer> allocate(size_t b, backend::BufferUsage u) override {
    if (alloc_countdown_ && --alloc_countdown_ == 0)
      throw backend::BackendError(backend::BackendError::Kind::out_of_memory, "[backend faulty] injected allocation failure");
    return inner_.allocate(b, u);
  }
  std::unique_ptr<backend::Buffer> import_host(void* p, size_t b) override { return inner_.import_host(p, b); }
  backend::Support supports_op(const backend::Node& n) const override { return inner_.supports_op(n); }
  backend::DeviceLimits limits(uint32_t bt) const override { return inner_.limits(bt); }
  std::unique_ptr<backend::Executable> prepare(const backend::BoundGraph& g) override { return inner_.prepare(g); }
  void submit(backend::Executable& e) override { inner_.submit(e); }
  void wait(backend::Executable& e) override {
    if (const uint32_t ms = slow_ms_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    inner_.wait(e);
    if (countdown_ && --countdown_ == 0)
      throw backend::BackendError(backend::BackendError::Kind::device, "[backend faulty] injected failure");
  }
  void copy(const std::vector<backend::CopyRegion>& r) override { inner_.copy(r); }
  void sync() override { inner_.sync(); }

 private:
  backend::Device& inner_;
  backend::DeviceInfo info_;
  std::atomic<uint32_t> countdown_{0}, alloc_countdown_{0}, slow_ms_{0};
};

class FaultyBackend : public backend::Backend {
 public:
  std::string_view name() const override { return "faulty"; }
  std::vector<backend::Device*> devices() override {
    std::vector<backend::Device*> out;
    for (auto& d : devs_) out.push_back(d.get());
    return out;
  }
  std::vector<std::unique_ptr<FaultyDevice>> devs_;
};

/** The faulty wrapper of the device `spec` selects ("cpu", "vulkan"); nullptr when none is registered. */
inline FaultyDevice* faulty(const std::string& spec) {
  backend::Device* real = backend::Registry::instance().find(spec);
  if (!real) return nullptr;
  const std::string id = real->info().id;
  static FaultyBackend* backend = [] {
    auto b = std::make_unique<FaultyBackend>();
    FaultyBackend* raw = b.get();
    for (backend::Device* d : backend::Registry::instance().devices())
      raw->devs_.push_back(std::make_unique<FaultyDevice>(*d));
    backend::Registry::instance().add(std::move(b));
    return raw;
  }();
  for (auto& d : backend->devs_)
    if (d->info().id == "faulty:" + id) return d.get();
  return nullptr;
}

}  // namespace kiln::test
