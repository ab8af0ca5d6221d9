// Quantized KV caches (cache.kv_dtype q8 / q4) on real and tiny models: stories260K's greedy text
// unchanged at q8, and the KL divergence of every position's next-token distribution against the
// f16 cache under the bounds docs/backend.md ("Quantized KV cache") documents per format, on the
// CPU reference and on Vulkan. The models: stories260K (real weights, head dim 8), tiny-qwen3-moe
// (the transformers golden's weights, head dim 32), the tiny Gemma 4 variants (sliding 16 / full 32,
// KV sharing) and the tiny Qwen3.5 variants (one full-attention layer among delta-net layers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "all_models.hpp"
#include "fixtures.hpp"
#include "gemma4_checkpoint.hpp"
#include "llama_helpers.hpp"
#include "model_checks.hpp"
#include "qwen3_5_checkpoint.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

struct Kl {
  double mean = 0, max = 0;
};

/** KL(p_ref || p) of softmax(logits) per row of V, averaged and maximized over the rows. */
Kl kl_divergence(const std::vector<float>& ref, const std::vector<float>& got, size_t V) {
  Kl k;
  const size_t rows = ref.size() / V;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = ref.data() + r * V;
    const float* b = got.data() + r * V;
    const double ma = *std::max_element(a, a + V), mb = *std::max_element(b, b + V);
    double za = 0, zb = 0;
    for (size_t i = 0; i < V; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
    double kl = 0;
    for (size_t i = 0; i < V; ++i) {
      const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
      kl += std::exp(la) * (la - lb);
    }
    k.mean += kl / static_cast<double>(rows);
    k.max = std::max(k.max, kl);
  }
  return k;
}

std::vector<int32_t> ids_of(size_t n, uint32_t seed, int vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(3 + (i * 131 + seed * 977 + i * i * 7) % (vocab - 3));
  return v;
}

/** Bounds on the mean KL (nats per position) against the f16 cache, per model and format. */
struct KlBounds {
  double q8, q4;
};

class KvQuant : public DeviceTest {
 protected:
  /** `every_layer` >= 0: that layer (the last layer's storage) is named in kv_layers too. */
  model::HostOptions with(const std::string& dtype, int every_layer = -1) const {
    model::HostOptions o = options();
    o.max_context = 128;
    o.cache.block_tokens = 4;  // several blocks per prompt, so paged reads cross blocks
    o.cache.kv_dtype = dtype;
    if (every_layer >= 0) o.cache.kv_layers[every_layer] = dtype;
    return o;
  }
  /**
   * Both formats on `path` against f16, with every KV layer quantized and with the defaults (the
   * last layer at 16 bits); prints the figures docs/backend.md tabulates.
   */
  void check_model(const std::string& name, const std::string& path, const std::vector<int32_t>& ids, KlBounds b) {
    auto host = model::ModelHost::open(path, all_models_registry(), with("f16"));
    const size_t V = host->hparams().n_vocab;
    const cache::CacheLayout& L = host->cache().layout();
    int last = -1;
    for (size_t l = 0; l < L.layers.size(); ++l)
      if (L.layer_group[l] >= 0) last = L.layer_source[l];
    ASSERT_GE(last, 0);
    const auto ref = forward_chunked(*host, 1, ids, 5);  // chunks of 5: prefills reading earlier chunks
    host.reset();
    for (const auto& [dtype, bound] : {std::pair{"q8", b.q8}, std::pair{"q4", b.q4}}) {
      Kl kl[2];
      for (int every : {0, 1}) {
        auto q = model::ModelHost::open(path, all_models_registry(), with(dtype, every ? last : -1));
        kl[every] = kl_divergence(ref, forward_chunked(*q, 1, ids, 5), V);
        EXPECT_LE(kl[every].mean, bound) << name << " " << dtype << (every ? " every layer" : " default");
      }
      std::printf("[kv-quant] %s %s %s: mean KL %.3g (max %.3g) every layer, %.3g (max %.3g) by default\n", GetParam(),
                  name.c_str(), dtype, kl[1].mean, kl[1].max, kl[0].mean, kl[0].max);
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, KvQuant, ::testing::Values("cpu", "vulkan"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace

TEST_P(KvQuant, Stories260KGreedyTextIsUnchangedAtQ8) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  const auto want = stories260k_expected_greedy();
  ASSERT_EQ(want.size(), 40u);
  for (int every : {-1, 4}) {  // stories260K has 5 layers
    auto host = model::ModelHost::open(path, all_models_registry(), with("q8", every));
    EXPECT_EQ(greedy(*host, {1}, 40), want) << (every >= 0 ? "every layer q8" : "default (last layer f16)");
  }
}

TEST_P(KvQuant, Stories260KNextTokenDistributionsStayClose) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  auto ids = stories260k_expected_greedy();
  ids.insert(ids.begin(), 1);
  check_model("stories260K", path, ids, {1e-3, 0.5});
}

TEST_P(KvQuant, HeadDimsTheFormatsCannotHoldStayAt16Bits) {
  // tiny-qwen3-moe's heads have 4 dims (q8 / q4 rows need multiples of 8): with q8 asked for, every
  // layer keeps f16, says why, and computes exactly what the f16 cache computes.
  const std::string path = fixture("tiny-qwen3-moe/weights.safetensors");
  KILN_REQUIRE_FIXTURE(path);
  auto f16 = model::ModelHost::open(path, all_models_registry(), with("f16"));
  auto q8 = model::ModelHost::open(path, all_models_registry(), with("q8"));
  const cache::CacheLayout& L = q8->cache().layout();
  for (size_t l = 0; l < L.layers.size(); ++l) {
    if (L.layer_group[l] < 0) continue;
    EXPECT_EQ(L.layer_kv_dtype[l], KILN_DTYPE_F16) << "layer " << l;
    EXPECT_TRUE(L.layer_kv_reason[l] == cache::KvDtypeReason::head_dims ||
                L.layer_kv_reason[l] == cache::KvDtypeReason::last_layer)
        << "layer " << l;
  }
  const auto ids = ids_of(20, 3, 64);
  EXPECT_EQ(forward_chunked(*f16, 1, ids, 5), forward_chunked(*q8, 1, ids, 5));
}

TEST_P(KvQuant, TinyGemma4VariantsNextTokenDistributionsStayClose) {
  for (const Gemma4Spec& s : gemma4_variants()) {
    TempDir dir;
    write_gemma4_hf(s, dir.str());
    check_model("gemma4 " + s.name, dir.str(), ids_of(30, 5, s.vocab), {4e-3, 1.0});
  }
}

TEST_P(KvQuant, TinyQwen35VariantsNextTokenDistributionsStayClose) {
  for (const Qwen35Spec& s : qwen35_variants()) {
    TempDir dir;
    write_qwen35_hf(s, dir.str());
    check_model("qwen3.5 " + s.name, dir.str(), ids_of(30, 7, s.vocab), {1e-3, 0.1});
  }
}

TEST_P(KvQuant, RaggedBatchRowsAreBitwiseIdenticalToRunningAlone) {
  // Gemma 4's kitchen sink (sliding and full layers, KV sharing) with every layer at q4, blocks of 4.
  TempDir dir;
  write_gemma4_hf(gemma4_kitchen_sink(), dir.str());
  model::HostOptions o = with("q4");
  o.cache.kv_layers = {{2, "q4"}, {3, "q4"}};
  auto host = model::ModelHost::open(dir.str(), all_models_registry(), o);
  expect_ragged_batch_matches_alone(*host, {ids_of(9, 1, 512), ids_of(14, 2, 512), ids_of(3, 3, 512)},
                                    {{5}, {9}, ids_of(7, 4, 512)});
}

TEST(KvQuantLayout, LastAndSensitiveLayersStayAt16BitsUnlessNamed) {
  // Gemma 4's e4b-like variant: KV-shared layers read two donor layers, which the plugin marks.
  TempDir dir;
  const Gemma4Spec s = gemma4_e4b_like();
  write_gemma4_hf(s, dir.str());
  model::HostOptions o = cpu_options();
  o.cache.kv_dtype = "q4";
  auto host = model::ModelHost::open(dir.str(), all_models_registry(), o);
  const cache::CacheLayout& L = host->cache().layout();
  int quantized = 0, kept = 0;
  for (size_t l = 0; l < L.layers.size(); ++l) {
    if (L.layer_source[l] != static_cast<int32_t>(l) || L.layer_group[l] < 0) continue;
    const bool q4 = L.layer_kv_dtype[l] == KILN_DTYPE_KV_Q4;
    (q4 ? quantized : kept) += 1;
    EXPECT_EQ(!q4, L.layer_kv_reason[l] == cache::KvDtypeReason::sensitive ||
                       L.layer_kv_reason[l] == cache::KvDtypeReason::last_layer)
        << "layer " << l;
  }
  EXPECT_GT(quantized, 0);
  EXPECT_GT(kept, 0);
  for (size_t l = 0; l < L.layers.size(); ++l)
    if (L.layer_source[l] == static_cast<int32_t>(l) && L.layer_kv_reason[l] == cache::KvDtypeReason::last_layer) {
      o.cache.kv_layers = {{static_cast<int>(l), "q4"}};
      auto named = model::ModelHost::open(dir.str(), all_models_registry(), o);
      EXPECT_EQ(named->cache().layout().layer_kv_dtype[l], KILN_DTYPE_KV_Q4) << "layer " << l;
      EXPECT_EQ(named->cache().layout().layer_kv_reason[l], cache::KvDtypeReason::explicit_layer);
    }
  // A layer that reads another's cache cannot be named: the message says which layer to name.
  o.cache.kv_layers = {{-1, "q8"}};
  try {
    model::ModelHost::open(dir.str(), all_models_registry(), o);
    ADD_FAILURE() << "naming a KV-shared layer was accepted";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("reads layer"), std::string::npos) << e.what();
  }
}
