// Quantized Hugging Face checkpoints as their tools write them: AWQ (AutoAWQ's GEMM packing), GPTQ
// (v1 and v2 zero points, 4 and 8 bits, act-order g_idx) and FP8 e4m3 (block-wise scales as the
// official releases ship them, per-channel as compressed-tensors writes them). The packing here is
// written from the formats' descriptions, independently of the reader; each unpacked weight must be
// exactly (q − zero) · scale, or fp8 · scale rounded once to the checkpoint's dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "core/error.hpp"
#include "core/half.hpp"
#include "fixtures.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_writer.hpp"
#include "quant_packing.hpp"

using namespace kiln;
using namespace kiln::model;
using kiln::test::host_error_of;
using kiln::test::TempDir;
using namespace kiln::test::quant;

namespace {

/** Writes the tensors (u8 ones as F8_E4M3) and a config.json with `quant` as its quantization_config. */
void write_checkpoint(const TempDir& dir, const std::vector<WriterTensor>& ts, const std::string& quant,
                      const std::string& dtype = "bfloat16") {
  std::map<std::string, std::string> fp8;
  for (const auto& t : ts)
    if (t.dtype == DType::u8) fp8[t.name] = "F8_E4M3";
  write_safetensors(dir.str() + "/model.safetensors", ts, {}, fp8);
  const std::string cfg = "{\"model_type\":\"qwen3\",\"torch_dtype\":\"" + dtype + "\"" +
                          (quant.empty() ? "" : ",\"quantization_config\":" + quant) + "}";
  write_file(dir.str() + "/config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
}

WriterTensor plain(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 0.5f);
  return {name, DType::f32, std::move(shape), encode_f32(v, DType::f32)};
}

/** Every value of `t` against `expect(c, k)` as the dtype stores it (bitwise through f32). */
template <class F>
void expect_values(const TensorInfo& t, int64_t M, int64_t K, F expect) {
  ASSERT_EQ(t.shape, (std::vector<int64_t>{M, K}));
  const std::vector<float> got = tensor_to_f32(t);
  int bad = 0;
  for (int64_t c = 0; c < M; ++c)
    for (int64_t k = 0; k < K; ++k) {
      const float e = expect(c, k), g = got[static_cast<size_t>(c * K + k)];
      if (std::memcmp(&e, &g, 4) != 0 && bad++ < 5)
        ADD_FAILURE() << t.name << " [" << c << ", " << k << "] " << g << " != " << e;
    }
  EXPECT_EQ(bad, 0) << t.name;
}

float round_to(DType t, float v) {
  return t == DType::f16 ? f16_to_f32(f32_to_f16(v)) : bf16_to_f32(f32_to_bf16(v));
}

}  // namespace

TEST(QuantizedCheckpoint, AwqGroupsOfWholeBlocksAreExactQ8AndOthersRoundOnce) {
  TempDir dir;
  const IntQuant a = random_quant(64, 256, 128, 4, false, 1), b = random_quant(24, 96, 16, 4, false, 2);
  std::vector<WriterTensor> ts = awq_tensors("model.layers.0.mlp.up_proj", a);
  ts.push_back(plain("model.layers.0.mlp.up_proj.bias", {64}));
  ts.push_back(plain("lm_head.weight", {8, 64}));  // not quantized (modules_to_not_convert)
  write_checkpoint(dir, ts, R"({"quant_method":"awq","bits":4,"group_size":128,"zero_point":true,"version":"gemm"})");
  const Checkpoint c = Checkpoint::open(dir.str());
  const TensorInfo* up = c.find("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->dtype, DType::q8_0);
  expect_values(*up, 64, 256, [&](int64_t r, int64_t k) { return a.expect(r, k); });
  // Groups of 16 straddle 32-value blocks: dequantized and rounded once to the checkpoint's bf16.
  TempDir dir16;
  write_checkpoint(dir16, awq_tensors("model.layers.0.mlp.down_proj", b), R"({"quant_method":"awq","group_size":16})");
  const Checkpoint c16 = Checkpoint::open(dir16.str());
  const TensorInfo* down = c16.find("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->dtype, DType::bf16);
  expect_values(*down, 24, 96, [&](int64_t r, int64_t k) { return round_to(DType::bf16, b.expect(r, k)); });
  EXPECT_TRUE(c.find("model.layers.0.mlp.up_proj.bias"));
  EXPECT_TRUE(c.find("lm_head.weight"));
  for (const char* gone :
       {"model.layers.0.mlp.up_proj.qweight", "model.layers.0.mlp.up_proj.qzeros", "model.layers.0.mlp.up_proj.scales"})
    EXPECT_FALSE(c.find(gone)) << gone;
  EXPECT_NE(c.quantization().find("1 as q8_0 (exact)"), std::string::npos) << c.quantization();
}

TEST(QuantizedCheckpoint, GptqV1V2EightBitsAndActOrder) {
  TempDir dir;
  // v1 4-bit without act-order (g_idx = k / group): exact q8_0. Zeros start at 1 (v1 stores zero − 1).
  const IntQuant a = random_quant(32, 256, 64, 4, false, 3, 1);
  std::vector<WriterTensor> ts = gptq_tensors("model.layers.0.self_attn.q_proj", a, true, true);
  // Act-order: rows in any group; the 32-value blocks mix groups, so the weight is dequantized.
  const IntQuant b = random_quant(16, 128, 32, 4, true, 4, 1);
  for (auto& t : gptq_tensors("model.layers.0.self_attn.k_proj", b, true, true)) ts.push_back(t);
  write_checkpoint(dir, ts, R"({"quant_method":"gptq","bits":4,"group_size":64,"desc_act":true,"sym":false})",
                   "float16");
  const Checkpoint c = Checkpoint::open(dir.str());
  EXPECT_EQ(c.find("model.layers.0.self_attn.q_proj.weight")->dtype, DType::q8_0);
  expect_values(*c.find("model.layers.0.self_attn.q_proj.weight"), 32, 256,
                [&](int64_t r, int64_t k) { return a.expect(r, k); });
  const TensorInfo* k = c.find("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k->dtype, DType::f16);  // the checkpoint's torch_dtype
  expect_values(*k, 16, 128, [&](int64_t r, int64_t kk) { return round_to(DType::f16, b.expect(r, kk)); });
  EXPECT_FALSE(c.find("model.layers.0.self_attn.k_proj.g_idx"));

  // Symmetric 4-bit (zeros 8, stored 7 in v1), groups of 128: exact q4_0.
  TempDir dir_sym;
  IntQuant sym = random_quant(16, 256, 128, 4, false, 6);
  for (int& z : sym.z) z = 8;
  write_checkpoint(dir_sym, gptq_tensors("model.layers.0.mlp.up_proj", sym, true, true),
                   R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false,"sym":true})");
  const Checkpoint cs = Checkpoint::open(dir_sym.str());
  EXPECT_EQ(cs.find("model.layers.0.mlp.up_proj.weight")->dtype, DType::q4_0);
  expect_values(*cs.find("model.layers.0.mlp.up_proj.weight"), 16, 256,
                [&](int64_t r, int64_t kk) { return sym.expect(r, kk); });
  EXPECT_NE(cs.quantization().find("1 as q4_0 (exact)"), std::string::npos) << cs.quantization();

  // v2 (no zero offset), 8 bits, symmetric zero 128, no g_idx tensor: exact q8_0.
  TempDir dir2;
  IntQuant e = random_quant(8, 64, 32, 8, false, 5);
  for (int& z : e.z) z = 128;
  write_checkpoint(dir2, gptq_tensors("model.layers.0.mlp.gate_proj", e, false, false),
                   R"({"quant_method":"gptq","bits":8,"group_size":32,"sym":true,"checkpoint_format":"gptq_v2"})");
  const Checkpoint c2 = Checkpoint::open(dir2.str());
  EXPECT_EQ(c2.find("model.layers.0.mlp.gate_proj.weight")->dtype, DType::q8_0);
  expect_values(*c2.find("model.layers.0.mlp.gate_proj.weight"), 8, 64,
                [&](int64_t r, int64_t kk) { return e.expect(r, kk); });
}

TEST(QuantizedCheckpoint, CompressedTensorsPackQuantizedSymmetricAndAsymmetric) {
  TempDir dir;
  IntQuant sym = random_quant(16, 64, 32, 4, false, 11);
  for (int& z : sym.z) z = 8;  // symmetric: the stored offset is the zero
  const IntQuant asym = random_quant(16, 96, 32, 4, false, 12), chan = random_quant(8, 64, 64, 8, false, 13);
  std::vector<WriterTensor> ts = ct_packed_tensors("model.layers.0.mlp.up_proj", sym, false);
  for (auto& t : ct_packed_tensors("model.layers.0.mlp.down_proj", asym, true)) ts.push_back(t);
  write_checkpoint(dir, ts, R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":
      {"group_0":{"weights":{"num_bits":4,"type":"int","symmetric":false,"strategy":"group","group_size":32},
                  "targets":["Linear"]}},"ignore":["lm_head"]})");
  const Checkpoint c = Checkpoint::open(dir.str());
  const TensorInfo* up = c.find("model.layers.0.mlp.up_proj.weight");
  const TensorInfo* down = c.find("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(up && down);
  EXPECT_EQ(up->dtype, DType::q4_0);  // symmetric int4: half of q8_0's bytes, the same values
  EXPECT_EQ(down->dtype, DType::q8_0);
  expect_values(*up, 16, 64, [&](int64_t r, int64_t k) { return sym.expect(r, k); });
  expect_values(*down, 16, 96, [&](int64_t r, int64_t k) { return asym.expect(r, k); });
  for (const char* gone :
       {"model.layers.0.mlp.down_proj.weight_packed", "model.layers.0.mlp.down_proj.weight_scale",
        "model.layers.0.mlp.down_proj.weight_shape", "model.layers.0.mlp.down_proj.weight_zero_point"})
    EXPECT_FALSE(c.find(gone)) << gone;
  // 8 bits per channel (one group of the whole row), zero 128.
  TempDir dir2;
  IntQuant e = chan;
  for (int& z : e.z) z = 128;
  write_checkpoint(dir2, ct_packed_tensors("model.layers.0.mlp.gate_proj", e, false),
                   R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":
                       {"group_0":{"weights":{"num_bits":8,"type":"int","strategy":"channel"}}}})");
  const Checkpoint c2 = Checkpoint::open(dir2.str());
  EXPECT_EQ(c2.find("model.layers.0.mlp.gate_proj.weight")->dtype, DType::q8_0);
  expect_values(*c2.find("model.layers.0.mlp.gate_proj.weight"), 8, 64,
                [&](int64_t r, int64_t k) { return e.expect(r, k); });
}

// Experts a plugin stacks into one tensor must share a format: a projection's experts take the
// format the least regular of them allows (here one asymmetric expert makes all q8_0, one with
// act-order makes all dequantized).
TEST(QuantizedCheckpoint, StackedExpertsShareAFormat) {
  TempDir dir;
  IntQuant sym = random_quant(16, 64, 32, 4, false, 21), asym = random_quant(16, 64, 32, 4, false, 22, 1);
  for (int& z : sym.z) z = 8;
  IntQuant shuffled = random_quant(16, 64, 32, 4, true, 23, 1);
  std::vector<WriterTensor> ts;
  for (auto& t : gptq_tensors("model.layers.0.mlp.experts.0.up_proj", sym, true, false)) ts.push_back(t);
  for (auto& t : gptq_tensors("model.layers.0.mlp.experts.1.up_proj", asym, true, false)) ts.push_back(t);
  for (auto& t : gptq_tensors("model.layers.0.mlp.experts.0.down_proj", sym, true, true)) ts.push_back(t);
  for (auto& t : gptq_tensors("model.layers.0.mlp.experts.1.down_proj", shuffled, true, true)) ts.push_back(t);
  for (auto& t : gptq_tensors("model.layers.0.mlp.shared_expert.up_proj", sym, true, false)) ts.push_back(t);
  write_checkpoint(dir, ts, R"({"quant_method":"gptq","bits":4,"group_size":32,"desc_act":true})");
  const Checkpoint c = Checkpoint::open(dir.str());
  for (const char* e : {"0", "1"}) {
    EXPECT_EQ(c.find(std::string("model.layers.0.mlp.experts.") + e + ".up_proj.weight")->dtype, DType::q8_0) << e;
    EXPECT_EQ(c.find(std::string("model.layers.0.mlp.experts.") + e + ".down_proj.weight")->dtype, DType::bf16) << e;
  }
  EXPECT_EQ(c.find("model.layers.0.mlp.shared_expert.up_proj.weight")->dtype, DType::q4_0);  // not stacked
  expect_values(*c.find("model.layers.0.mlp.experts.0.up_proj.weight"), 16, 64,
                [&](int64_t r, int64_t k) { return sym.expect(r, k); });
  expect_values(*c.find("model.layers.0.mlp.experts.0.down_proj.weight"), 16, 64,
                [&](int64_t r, int64_t k) { return round_to(DType::bf16, sym.expect(r, k)); });
}

// Without g_idx, column k is in group k / group_size, and a last partial group counts:
// 192 columns in groups of 128 are two groups (not two of 96).
TEST(QuantizedCheckpoint, GroupsFollowGroupSizeWithAPartialLastGroup) {
  TempDir dir;
  IntQuant w = random_quant(8, 192, 64, 4, false, 31, 1);
  w.G = 2;
  w.z.resize(static_cast<size_t>(2 * w.M));
  w.s.resize(static_cast<size_t>(2 * w.M));
  for (int64_t k = 0; k < w.K; ++k) w.gidx[static_cast<size_t>(k)] = static_cast<int32_t>(k / 128);
  write_checkpoint(dir, gptq_tensors("model.layers.0.mlp.up_proj", w, true, false),
                   R"({"quant_method":"gptq","bits":4,"group_size":128})");
  const Checkpoint c = Checkpoint::open(dir.str());
  expect_values(*c.find("model.layers.0.mlp.up_proj.weight"), 8, 192,
                [&](int64_t r, int64_t k) { return w.expect(r, k); });
  TempDir dir2;  // three groups where group_size 128 makes two
  IntQuant three = random_quant(8, 192, 64, 4, false, 32, 1);
  write_checkpoint(dir2, gptq_tensors("x", three, true, false), R"({"quant_method":"gptq","bits":4,"group_size":128})");
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir2.str()); }).find("group_size 128 over 192 input columns makes 2"),
            std::string::npos);
}

TEST(QuantizedCheckpoint, Fp8E4m3BytesDecodeAsTheFormatSays) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // the largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(QuantizedCheckpoint, Fp8BlockAndChannelScales) {
  std::mt19937 rng(9);
  auto fp8_bytes = [&](int64_t n) {
    std::vector<uint8_t> v(static_cast<size_t>(n));
    for (auto& b : v) {
      b = static_cast<uint8_t>(rng());
      if ((b & 0x7f) == 0x7f) b = 0x38;  // no NaN
    }
    return v;
  };
  // Block-wise [128, 128] over [200, 256] (the last row block partial): weight_scale_inv [2, 2].
  TempDir dir;
  const int64_t M = 200, K = 256;
  const auto w = fp8_bytes(M * K);
  const std::vector<float> sinv = {0.5f, 0.001f, 3.0f, 0.0625f};
  WriterTensor wt{"model.layers.0.mlp.up_proj.weight", DType::u8, {M, K}, w};
  write_checkpoint(
      dir,
      {wt,
       {"model.layers.0.mlp.up_proj.weight_scale_inv", DType::f32, {2, 2}, raw(sinv)},
       plain("model.norm.weight", {K})},
      R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]})");
  const Checkpoint c = Checkpoint::open(dir.str());
  const TensorInfo* up = c.find("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->dtype, DType::bf16);
  expect_values(*up, M, K, [&](int64_t r, int64_t k) {
    return round_to(DType::bf16, fp8_e4m3_to_f32(w[static_cast<size_t>(r * K + k)]) *
                                     sinv[static_cast<size_t>((r / 128) * 2 + k / 128)]);
  });
  EXPECT_FALSE(c.find("model.layers.0.mlp.up_proj.weight_scale_inv"));

  // compressed-tensors float-quantized: per-channel weight_scale [M, 1], an input_scale that goes.
  TempDir dir2;
  const auto w2 = fp8_bytes(16 * 64);
  std::vector<float> ch(16);
  for (size_t i = 0; i < ch.size(); ++i) ch[i] = 0.01f * static_cast<float>(i + 1);
  write_checkpoint(dir2,
                   {{"model.layers.0.self_attn.o_proj.weight", DType::u8, {16, 64}, w2},
                    {"model.layers.0.self_attn.o_proj.weight_scale", DType::f32, {16, 1}, raw(ch)},
                    {"model.layers.0.self_attn.o_proj.input_scale", DType::f32, {1}, raw(std::vector<float>{1.0f})}},
                   R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":
                       {"group_0":{"weights":{"num_bits":8,"type":"float","strategy":"channel"},"targets":["Linear"]}}})",
                   "float16");
  const Checkpoint c2 = Checkpoint::open(dir2.str());
  const TensorInfo* o = c2.find("model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(o->dtype, DType::f16);
  expect_values(*o, 16, 64, [&](int64_t r, int64_t k) {
    return round_to(DType::f16, fp8_e4m3_to_f32(w2[static_cast<size_t>(r * 64 + k)]) * ch[static_cast<size_t>(r)]);
  });
  EXPECT_FALSE(c2.find("model.layers.0.self_attn.o_proj.input_scale"));
}

TEST(QuantizedCheckpoint, WhatIsNotReadIsNamed) {
  const IntQuant a = random_quant(16, 64, 32, 4, false, 7);
  auto open_with = [&](const std::vector<WriterTensor>& ts, const std::string& quant) {
    TempDir dir;
    write_checkpoint(dir, ts, quant);
    return host_error_of([&] { Checkpoint::open(dir.str()); });
  };
  EXPECT_NE(
      open_with({plain("x.weight", {4, 4})}, R"({"quant_method":"bitsandbytes"})").find("'bitsandbytes' is not read"),
      std::string::npos);
  EXPECT_NE(open_with(awq_tensors("x", a), R"({"quant_method":"awq","version":"gemv"})").find("version 'gemv'"),
            std::string::npos);
  EXPECT_NE(open_with(gptq_tensors("x", a, true, false), R"({"quant_method":"gptq","bits":3})").find("bits 3"),
            std::string::npos);
  auto no_zeros = awq_tensors("x", a);
  no_zeros.erase(no_zeros.begin() + 1);
  const std::string e = open_with(no_zeros, R"({"quant_method":"awq"})");
  EXPECT_NE(e.find("'x.qzeros' is missing"), std::string::npos) << e;
  auto bad_scales = gptq_tensors("x", a, true, false);
  bad_scales[2].shape = {2, 8};
  bad_scales[2].bytes.resize(32);
  const std::string e2 = open_with(bad_scales, R"({"quant_method":"gptq"})");
  EXPECT_NE(e2.find("'x.scales'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("expected [groups, 16]"), std::string::npos) << e2;
  EXPECT_NE(open_with({plain("x.weight", {4, 4})}, R"({"quant_method":"compressed-tensors","format":"int-quantized"})")
                .find("format 'int-quantized' is not read"),
            std::string::npos);
  EXPECT_NE(open_with(ct_packed_tensors("x", a, false),
                      R"({"quant_method":"compressed-tensors","format":"pack-quantized",
                          "config_groups":{"g":{"weights":{"num_bits":2,"type":"int"}}}})")
                .find("int 2-bit"),
            std::string::npos);
  // FP8 bytes with nothing saying how to scale them.
  TempDir dir;
  write_checkpoint(dir, {{"x.weight", DType::u8, {2, 2}, {0x38, 0x38, 0x38, 0x38}}}, "");
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir.str()); }).find("no quantization_config"), std::string::npos);
}
