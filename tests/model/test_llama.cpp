// The llama plugin end to end on the model host: real weights (stories260K), the Hugging Face
// golden (tiny-qwen3-moe), and the consistency properties of ragged batches and caches.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "fixtures.hpp"
#include "llama_helpers.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/safetensors.hpp"
#include "model/vocab_text.hpp"
#include "quant_packing.hpp"

using namespace kiln;
using namespace kiln::test;

class OnDevice : public DeviceTest {};
INSTANTIATE_TEST_SUITE_P(Devices, OnDevice, ::testing::Values("cpu", "reference", "vulkan"),
                         [](const auto& info) { return std::string(info.param); });

TEST_P(OnDevice, Stories260KGreedyFromBosReproducesTheReference) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  auto host = model::ModelHost::open(path, llama_registry(), options());
  EXPECT_STREQ(host->hparams().architecture, "llama");
  const auto want = stories260k_expected_greedy();
  ASSERT_EQ(want.size(), 40u);
  const auto got = greedy(*host, {1}, 40);
  EXPECT_EQ(got, want);
  const std::string text = model::detokenize(*host->checkpoint().vocab(), got);
  EXPECT_EQ(text.rfind(" Once upon a time, there was a little girl named Lily", 0), 0u) << text;
}

// ------------------------------------------------------------------------------------------------
// Hugging Face golden: tiny-qwen3-moe (fused experts), logits and intermediates of transformers.

namespace {

struct Golden {
  model::SafetensorsFile file;
  std::vector<float> get(const std::string& name, std::vector<int64_t>* shape) const {
    for (const auto& t : file.tensors())
      if (t.name == name) {
        *shape = t.shape;
        std::vector<float> v(static_cast<size_t>(t.numel()));
        if (t.dtype == DType::i64) {
          for (size_t i = 0; i < v.size(); ++i) {
            int64_t x;
            std::memcpy(&x, t.data + 8 * i, 8);
            v[i] = static_cast<float>(x);
          }
        } else {
          v = model::tensor_to_f32(t);
        }
        return v;
      }
    return {};
  }
};

// numpy.allclose: |a - b| <= atol + rtol * |b|
::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                     const std::vector<float>& want, double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, golden has " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(double(got[i]) - want[i]) > atol + rtol * std::fabs(double(want[i])))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", golden " << want[i];
  return ::testing::AssertionSuccess();
}

// [1, H, N, D] (HF) -> [N, H, D] (kiln)
std::vector<float> heads_to_tokens(const std::vector<float>& v, const std::vector<int64_t>& s) {
  const int64_t H = s[1], N = s[2], D = s[3];
  std::vector<float> out(v.size());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) out[static_cast<size_t>((n * H + h) * D + d)] = v[static_cast<size_t>((h * N + n) * D + d)];
  return out;
}

}  // namespace

TEST_P(OnDevice, TinyQwen3MoeMatchesTransformersLogitsExpertsAndIntermediates) {
  const std::string dir = fixture("tiny-qwen3-moe");
  KILN_REQUIRE_FIXTURE(dir + "/weights.safetensors");
  KILN_REQUIRE_FIXTURE(dir + "/checkpoints.safetensors");
  model::HostOptions o = options();
  const std::vector<std::string> per_layer = {"input_norm",       "query_rope",     "key_rope",
                                              "attention_output", "post_attention_norm", "router_logits",
                                              "selected_experts", "routing_weights", "moe_output",
                                              "block_output"};
  for (int l = 0; l < 2; ++l)
    for (const auto& n : per_layer) o.dump.push_back("layer_" + std::to_string(l) + "." + n);
  o.dump.push_back("hidden_state_0");
  o.dump.push_back("final_norm");
  auto host = model::ModelHost::open(dir + "/weights.safetensors", llama_registry(), o);
  EXPECT_STREQ(host->hparams().architecture, "qwen3_moe");
  ASSERT_EQ(host->add_sequence(7), cache::Status::ok);
  model::StepResult r;
  ASSERT_EQ(host->step({{7, {1, 5, 7, 2}, true, true}}, &r), cache::Status::ok);

  Golden g{model::SafetensorsFile::open(dir + "/checkpoints.safetensors")};
  std::vector<int64_t> shape;
  const auto logits = g.get("final_logits", &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{1, 4, 64}));
  EXPECT_TRUE(all_close("final_logits", r.logits, logits, 1e-6, 1e-5));

  // Intermediates the plugin names, compared where the host can dump them.
  int compared = 0;
  for (const auto& [name, t] : r.dumps) {
    std::string golden_name = name;
    if (name == "layer_0.block_output") golden_name = "hidden_state_1";
    auto want = g.get(golden_name, &shape);
    if (want.empty()) want = g.get(name, &shape);
    if (want.empty()) continue;
    if (name.find("query_rope") != std::string::npos || name.find("key_rope") != std::string::npos)
      want = heads_to_tokens(want, shape);
    if (name.find("selected_experts") != std::string::npos) {
      EXPECT_EQ(t.data, want) << name;  // exact
    } else if (name.find("router_logits") != std::string::npos) {
      EXPECT_TRUE(all_close(name, t.data, want, 1e-7, 1e-6));
    } else {
      EXPECT_TRUE(all_close(name, t.data, want, 1e-6, 1e-5));
    }
    ++compared;
  }
  EXPECT_GE(compared, 20) << "intermediates compared";
  host->release(7);
}

// ------------------------------------------------------------------------------------------------
// Consistency properties on a random-weight Qwen3-shaped checkpoint the test writes.

namespace {

std::vector<int32_t> prompt_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& x : ids) x = static_cast<int32_t>(rng() % 90) + 3;
  return ids;
}

std::unique_ptr<model::ModelHost> tiny_host(const TempDir& dir, model::HostOptions o = cpu_options()) {
  return model::ModelHost::open(dir.str(), llama_registry(), o);
}

}  // namespace

TEST_P(OnDevice, IncrementalDecodeAndChunkedPrefillEqualFullForward) {
  TempDir dir;
  write_tiny_qwen3(dir.str(), DType::f32);
  auto host = tiny_host(dir, options());
  const auto ids = prompt_ids(21, 3);
  const auto full = forward_all(*host, 1, ids);
  ASSERT_EQ(full.size(), ids.size() * 96);
  for (size_t chunk : {1, 2, 5, 8, 21}) {
    const auto got = forward_chunked(*host, 2, ids, chunk);
    EXPECT_LE(max_abs_diff(got, full), 1e-5) << "chunk " << chunk;
  }
}

// AWQ, GPTQ and compressed-tensors int4 checkpoints of the tiny Qwen3 (every projection quantized in groups of 32) give
// the logits of the same model written with their dequantized weights as f32: the unpacked weights are oriented,
// grouped and scaled as the plugins expect. The reference device reads q8_0 by dequantizing, so there the logits are
// the same; on the others they are close.
TEST_P(OnDevice, QuantizedCheckpointsRunAsTheirDequantizedWeights) {
  TempDir src_dir;
  write_tiny_qwen3(src_dir.str(), DType::f32);
  const model::Checkpoint src = model::Checkpoint::open(src_dir.str());
  std::ifstream cfg_in(src_dir.str() + "/config.json");
  const std::string cfg((std::istreambuf_iterator<char>(cfg_in)), std::istreambuf_iterator<char>());
  const auto ids = prompt_ids(9, 5);
  for (const std::string method : {"awq", "gptq", "compressed-tensors"}) {
    TempDir qdir, ddir;
    std::vector<model::WriterTensor> qts, dts;
    for (const model::TensorInfo& t : src.tensors()) {
      const std::vector<float> v = model::tensor_to_f32(t);
      const bool linear = t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, "_proj.weight") == 0;
      if (!linear) {
        qts.push_back({t.name, DType::f32, t.shape, model::encode_f32(v, DType::f32)});
        dts.push_back(qts.back());
        continue;
      }
      const int64_t M = t.shape[0], K = t.shape[1];
      const quant::IntQuant w = quant::quantize(v, M, K, 32);
      const std::string prefix = t.name.substr(0, t.name.size() - 7);
      for (auto& p : method == "awq"    ? quant::awq_tensors(prefix, w)
                     : method == "gptq" ? quant::gptq_tensors(prefix, w, true, true)
                                        : quant::ct_packed_tensors(prefix, w, true))
        qts.push_back(std::move(p));
      std::vector<float> deq(v.size());
      for (int64_t c = 0; c < M; ++c)
        for (int64_t k = 0; k < K; ++k) deq[static_cast<size_t>(c * K + k)] = w.expect(c, k);
      dts.push_back({t.name, DType::f32, t.shape, model::encode_f32(deq, DType::f32)});
    }
    model::write_safetensors(qdir.str() + "/model.safetensors", qts);
    model::write_safetensors(ddir.str() + "/model.safetensors", dts);
    const std::string qcfg = "{\"quantization_config\":{\"quant_method\":\"" + method +
                             "\",\"bits\":4,\"group_size\":32,\"version\":\"gemm\",\"format\":\"pack-quantized\"}," +
                             cfg.substr(1);
    model::write_file(qdir.str() + "/config.json", std::vector<uint8_t>(qcfg.begin(), qcfg.end()));
    model::write_file(ddir.str() + "/config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
    auto qhost = tiny_host(qdir, options());
    auto dhost = tiny_host(ddir, options());
    const auto got = forward_all(*qhost, 1, ids), want = forward_all(*dhost, 1, ids);
    double scale = 0;
    for (float x : want) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    // The native CPU device multiplies q8_0 weights by 8-bit activations (2.9% of the largest logit
    // at most here, on random weights); Vulkan's q8_0 path keeps f32 activations.
    EXPECT_LE(max_abs_diff(got, want), (GetParam() == std::string("reference") ? 1e-5 : 5e-2) * scale) << method;
  }
}

TEST_P(OnDevice, RaggedBatchRowsAreBitwiseIdenticalToRunningAlone) {
  TempDir dir;
  write_tiny_qwen3(dir.str(), DType::f16);
  auto host = tiny_host(dir, options());
  // Three sequences with different lengths; step 1 prefills all, step 2 mixes two decodes with a
  // second prefill chunk. Alone, each sequence runs the same two steps by itself.
  const std::vector<std::vector<int32_t>> first = {prompt_ids(7, 1), prompt_ids(12, 2), prompt_ids(3, 3)};
  const std::vector<std::vector<int32_t>> second = {{5}, {9}, prompt_ids(6, 4)};
  std::vector<std::vector<float>> alone(3);
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(host->add_sequence(100 + s), cache::Status::ok);
    model::StepResult r1, r2;
    ASSERT_EQ(host->step({{100 + s, first[s], true, true}}, &r1), cache::Status::ok);
    ASSERT_EQ(host->step({{100 + s, second[s], true, true}}, &r2), cache::Status::ok);
    alone[s] = r1.logits;
    alone[s].insert(alone[s].end(), r2.logits.begin(), r2.logits.end());
    host->release(100 + s);
  }
  std::vector<std::vector<float>> batched(3);
  for (uint64_t s = 0; s < 3; ++s) ASSERT_EQ(host->add_sequence(s), cache::Status::ok);
  for (const auto* step : {&first, &second}) {
    model::StepResult r;
    // Order inside the batch differs from the sequence ids on purpose.
    ASSERT_EQ(host->step({{2, (*step)[2], true, true}, {0, (*step)[0], true, true}, {1, (*step)[1], true, true}}, &r),
              cache::Status::ok);
    for (uint32_t row = 0; row < r.rows; ++row) {
      auto& dst = batched[r.row_seq[row]];
      dst.insert(dst.end(), r.logits.begin() + row * 96, r.logits.begin() + (row + 1) * 96);
    }
  }
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_EQ(batched[s].size(), alone[s].size()) << s;
    EXPECT_EQ(std::memcmp(batched[s].data(), alone[s].data(), alone[s].size() * 4), 0) << "sequence " << s;
  }
}

TEST_P(OnDevice, SlidingWindowSameWhetherOldBlocksAreFreedOrKept) {
  TempDir dir;
  write_tiny_qwen3(dir.str(), DType::f32, /*sliding_window=*/5);
  model::HostOptions o = options();
  o.cache.block_tokens = 2;
  auto freeing = tiny_host(dir, o);
  o.free_out_of_window = false;
  auto keeping = tiny_host(dir, o);
  const auto ids = prompt_ids(30, 9);
  for (size_t chunk : {1, 3, 7}) {
    const auto a = forward_chunked(*freeing, 1, ids, chunk);
    const auto b = forward_chunked(*keeping, 1, ids, chunk);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "chunk " << chunk;
  }
  // Blocks really were returned: after 30 tokens the freeing cache holds only the window's blocks.
  ASSERT_EQ(freeing->add_sequence(5), cache::Status::ok);
  model::StepResult r;
  ASSERT_EQ(freeing->step({{5, ids, true, false}}, &r), cache::Status::ok);
  ASSERT_EQ(freeing->step({{5, {4}, true, false}}, &r), cache::Status::ok);
  EXPECT_LE(freeing->cache().blocks_held(5, 0), 4u);
  // And the window matters: a full-attention model with the same weights differs.
  TempDir full_dir;
  write_tiny_qwen3(full_dir.str(), DType::f32, 0);
  auto full = tiny_host(full_dir, options());
  EXPECT_GT(max_abs_diff(forward_all(*full, 1, ids), forward_all(*keeping, 2, ids)), 1e-4);
}

TEST(LlamaConsistency, OutOfCacheIsAStatusNotACrash) {
  TempDir dir;
  write_tiny_qwen3(dir.str(), DType::f32);
  model::HostOptions o = cpu_options();
  o.max_context = 32;
  o.max_seqs = 2;
  o.cache.block_tokens = 4;
  o.cache.memory_bytes = 2 * 8 * 4 * 2 * 16 * 4;  // 2 layers x 8 blocks: exactly one 32-token sequence
  auto host = tiny_host(dir, o);
  ASSERT_EQ(host->add_sequence(1), cache::Status::ok);
  model::StepResult r;
  ASSERT_EQ(host->step({{1, prompt_ids(30, 1), true, false}}, &r), cache::Status::ok);
  EXPECT_EQ(host->step({{1, prompt_ids(3, 2), true, false}}, &r), cache::Status::too_long);
  ASSERT_EQ(host->add_sequence(2), cache::Status::ok);
  EXPECT_EQ(host->step({{2, prompt_ids(8, 2), true, false}}, &r), cache::Status::out_of_blocks);
  host->release(1);
  EXPECT_EQ(host->step({{2, prompt_ids(8, 2), true, false}}, &r), cache::Status::ok);
}

TEST(VulkanVsCpu, LogitsAgreeWithinTolerance) {
  if (!backend::Registry::instance().find("vulkan")) GTEST_SKIP() << "no vulkan device registered";
  TempDir dir;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    write_tiny_qwen3(dir.str(), t);
    model::HostOptions o = cpu_options();
    auto cpu = tiny_host(dir, o);
    o.device = "vulkan";
    o.allow_cpu_fallback = false;
    auto vk = tiny_host(dir, o);
    const auto ids = prompt_ids(17, 5);
    const auto a = forward_chunked(*cpu, 1, ids, 6);
    const auto b = forward_chunked(*vk, 1, ids, 6);
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      den += double(a[i]) * a[i];
    }
    EXPECT_LT(num / den, 1e-8) << dtype_name(t);  // NMSE, as the op harness measures
  }
}

// ------------------------------------------------------------------------------------------------
// The same tiny-qwen3-moe weights in the other layouts the plugin maps: Hugging Face per-expert
// tensors (stacked by the host) and GGUF (llama.cpp names, experts as [E, ...] tensors). Both must
// reproduce the transformers logits.

namespace {

struct Split {
  std::vector<model::WriterTensor> hf_per_expert;
  model::GgufWriter gguf;
};

std::vector<float> rows_of(const std::vector<float>& v, int64_t row_len, int64_t begin, int64_t end) {
  return std::vector<float>(v.begin() + begin * row_len, v.begin() + end * row_len);
}

Split convert_tiny_moe(const model::Checkpoint& ck) {
  Split s;
  auto& g = s.gguf;
  g.add_string("general.architecture", "qwen3moe");
  g.add_u32("qwen3moe.block_count", 2);
  g.add_u32("qwen3moe.embedding_length", 16);
  g.add_u32("qwen3moe.attention.head_count", 4);
  g.add_u32("qwen3moe.attention.head_count_kv", 2);
  g.add_u32("qwen3moe.attention.key_length", 4);
  g.add_u32("qwen3moe.context_length", 32);
  g.add_u32("qwen3moe.vocab_size", 64);
  g.add_u32("qwen3moe.expert_count", 4);
  g.add_u32("qwen3moe.expert_used_count", 2);
  g.add_u32("qwen3moe.expert_feed_forward_length", 24);
  g.add_bool("qwen3moe.expert_weights_norm", false);
  g.add_f32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
  g.add_f32("qwen3moe.rope.freq_base", 10000.0f);
  const std::vector<std::pair<std::string, std::string>> names = {
      {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}, {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.experts.down_proj", "ffn_down_exps.weight"}};
  for (const auto& t : ck.tensors()) {
    const auto v = model::tensor_to_f32(t);
    std::string layer, rest = t.name;
    if (t.name.rfind("model.layers.", 0) == 0) {
      const size_t dot = t.name.find('.', 13);
      layer = t.name.substr(13, dot - 13);
      rest = t.name.substr(dot + 1);
    }
    if (rest == "mlp.experts.gate_up_proj") {  // [E, 2I, D]: gate rows, then up rows
      const int64_t E = t.shape[0], I2 = t.shape[1], D = t.shape[2];
      std::vector<float> gate, up;
      for (int64_t e = 0; e < E; ++e) {
        auto ge = rows_of(v, D, e * I2, e * I2 + I2 / 2), ue = rows_of(v, D, e * I2 + I2 / 2, (e + 1) * I2);
        gate.insert(gate.end(), ge.begin(), ge.end());
        up.insert(up.end(), ue.begin(), ue.end());
        const std::string p = "model.layers." + layer + ".mlp.experts." + std::to_string(e) + ".";
        s.hf_per_expert.push_back({p + "gate_proj.weight", DType::f32, {I2 / 2, D}, model::encode_f32(ge, DType::f32)});
        s.hf_per_expert.push_back({p + "up_proj.weight", DType::f32, {I2 / 2, D}, model::encode_f32(ue, DType::f32)});
      }
      g.add_tensor({"blk." + layer + ".ffn_gate_exps.weight", DType::f32, {E, I2 / 2, D}, model::encode_f32(gate, DType::f32)});
      g.add_tensor({"blk." + layer + ".ffn_up_exps.weight", DType::f32, {E, I2 / 2, D}, model::encode_f32(up, DType::f32)});
      continue;
    }
    if (rest == "mlp.experts.down_proj") {
      const int64_t E = t.shape[0], D = t.shape[1], I = t.shape[2];
      for (int64_t e = 0; e < E; ++e)
        s.hf_per_expert.push_back({"model.layers." + layer + ".mlp.experts." + std::to_string(e) + ".down_proj.weight",
                                   DType::f32, {D, I}, model::encode_f32(rows_of(v, I, e * D, (e + 1) * D), DType::f32)});
    } else {
      s.hf_per_expert.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(
                                                               reinterpret_cast<const uint8_t*>(t.data),
                                                               reinterpret_cast<const uint8_t*>(t.data) + t.nbytes)});
    }
    for (const auto& [hf, gg] : names)
      if (rest == hf) g.add_tensor({layer.empty() ? gg : "blk." + layer + "." + gg, DType::f32, t.shape, model::encode_f32(v, DType::f32)});
  }
  return s;
}

}  // namespace

TEST(TinyQwen3MoeLayouts, PerExpertHfAndGgufReproduceTheGolden) {
  const std::string dir = fixture("tiny-qwen3-moe");
  KILN_REQUIRE_FIXTURE(dir + "/weights.safetensors");
  KILN_REQUIRE_FIXTURE(dir + "/checkpoints.safetensors");
  Golden golden{model::SafetensorsFile::open(dir + "/checkpoints.safetensors")};
  std::vector<int64_t> shape;
  const auto want = golden.get("final_logits", &shape);
  Split s = convert_tiny_moe(model::Checkpoint::open(dir + "/weights.safetensors"));
  TempDir tmp;
  std::filesystem::copy_file(dir + "/config.json", tmp / "config.json");
  model::write_safetensors(tmp / "model.safetensors", s.hf_per_expert);
  s.gguf.write(tmp / "tiny-moe.gguf");
  for (const std::string& path : {tmp.str(), tmp / "tiny-moe.gguf"}) {
    auto host = model::ModelHost::open(path, llama_registry(), cpu_options());
    EXPECT_TRUE(all_close(path, forward_all(*host, 1, {1, 5, 7, 2}), want, 1e-6, 1e-5));
  }
}

TEST(LlamaFamily, Qwen2BiasesAreLoadedAndUsed) {
  TempDir dir;
  write_tiny_qwen3(dir.str(), DType::bf16, 0, 4, 2, 96, "qwen2");
  auto host = tiny_host(dir);
  EXPECT_STREQ(host->hparams().architecture, "qwen2");
  const auto ids = prompt_ids(9, 4);
  const auto full = forward_all(*host, 1, ids);
  EXPECT_LE(max_abs_diff(forward_chunked(*host, 2, ids, 1), full), 1e-5);
  // Zeroing the biases changes the result: they are really part of the graph.
  auto ck = model::Checkpoint::open(dir.str());
  std::vector<model::WriterTensor> ts;
  for (const auto& t : ck.tensors()) {
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(t.data), reinterpret_cast<const uint8_t*>(t.data) + t.nbytes);
    if (t.name.find(".bias") != std::string::npos) std::fill(bytes.begin(), bytes.end(), 0);
    ts.push_back({t.name, t.dtype, t.shape, bytes});
  }
  TempDir nobias;
  model::write_safetensors(nobias / "model.safetensors", ts);
  std::filesystem::copy_file(dir / "config.json", nobias / "config.json");
  auto plain = tiny_host(nobias);
  EXPECT_GT(max_abs_diff(forward_all(*plain, 1, ids), full), 1e-4);
}
