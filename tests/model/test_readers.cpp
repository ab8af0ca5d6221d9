// Checkpoint readers: safetensors (single, sharded, mixed dtypes), HF config handling, GGUF (metadata,
// quantized tensors, vocabulary), the real fixtures, and malformed files (clear errors, no crash).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "fixtures.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"

using namespace kiln;
using namespace kiln::model;
using kiln::test::fixture;
using kiln::test::host_error_of;
using kiln::test::TempDir;

namespace {

WriterTensor tensor(const std::string& name, DType t, std::vector<int64_t> shape, float base = 0) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.25f * static_cast<float>(i % 17) - 1.0f;
  return {name, t, std::move(shape), encode_f32(v, t)};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST(Safetensors, MixedDtypesReadBack) {
  TempDir dir;
  write_safetensors(dir / "m.safetensors",
                    {tensor("a", DType::f32, {2, 3}), tensor("b", DType::f16, {4}), tensor("c", DType::bf16, {2, 2})},
                    {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (const auto& t : f.tensors()) {
    auto v = tensor_to_f32(t);
    for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(v[i], 0.25f * static_cast<float>(i % 17) - 1.0f) << t.name;
  }
  EXPECT_EQ(f.tensors()[1].dtype, DType::f16);
  EXPECT_EQ(f.tensors()[2].shape, (std::vector<int64_t>{2, 2}));
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  TempDir dir;
  write_safetensors(dir / "ok.safetensors", {tensor("w", DType::f32, {4, 4})});
  std::ifstream in(dir / "ok.safetensors", std::ios::binary);
  std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)), {});
  // Every truncation is an error, never a crash.
  for (size_t n = 0; n < good.size(); ++n) {
    write_file(dir / "cut.safetensors", std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)));
    const std::string e = host_error_of([&] { SafetensorsFile::open(dir / "cut.safetensors"); });
    EXPECT_NE(e.find("[safetensors]"), std::string::npos) << "length " << n;
    EXPECT_NE(e.find("cut.safetensors"), std::string::npos) << e;
  }
  auto with_header = [&](const std::string& h) {
    std::vector<uint8_t> b;
    for (uint64_t n = h.size(), i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
    for (char ch : h) b.push_back(static_cast<uint8_t>(ch));
    b.resize(b.size() + 64, 0);
    write_file(dir / "h.safetensors", b);
    return host_error_of([&] { SafetensorsFile::open(dir / "h.safetensors"); });
  };
  EXPECT_NE(with_header("{nope").find("not a JSON object"), std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})").find("F8_E5M2"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})").find("needs 16 bytes"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,4000]}})").find("truncated"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})").find("negative"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[1]}})").find("data_offsets"), std::string::npos);
}

TEST(HfCheckpoint, ShardedWithIndexAndGenerationConfig) {
  TempDir dir;
  write_safetensors(dir / "model-00001-of-00002.safetensors", {tensor("x.weight", DType::bf16, {2, 32})});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {tensor("y.weight", DType::f16, {3})});
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata":{},"weight_map":{"x.weight":"model-00001-of-00002.safetensors",
                 "y.weight":"model-00002-of-00002.safetensors"}})");
  write_text(dir / "config.json", R"({"model_type":"qwen3","eos_token_id":151645,"bos_token_id":151643})");
  write_text(dir / "generation_config.json",
             R"({"eos_token_id":[151645,151643],"temperature":0.6,"top_p":0.95,"top_k":20,"do_sample":true})");
  Checkpoint c = Checkpoint::open(dir.str());
  EXPECT_EQ(c.format(), CheckpointFormat::hf);
  EXPECT_EQ(c.model_type(), "qwen3");
  EXPECT_EQ(c.tensors().size(), 2u);
  ASSERT_NE(c.find("x.weight"), nullptr);
  EXPECT_EQ(c.find("x.weight")->dtype, DType::bf16);
  EXPECT_EQ(c.generation().stop_tokens, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(*c.generation().bos, 151643);
  EXPECT_DOUBLE_EQ(*c.generation().temperature, 0.6);
  EXPECT_EQ(*c.generation().top_k, 20);
  EXPECT_EQ(c.files().size(), 2u);

  // A shard named in the index but missing is named in the error.
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir.str()); }).find("model-00002-of-00002.safetensors"),
            std::string::npos);
}

TEST(HfCheckpoint, NestedTextConfigWins) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {tensor("w", DType::f32, {2})});
  write_text(dir / "config.json",
             R"({"model_type":"gemma3","eos_token_id":[1,106],"tie_word_embeddings":true,
                 "text_config":{"model_type":"gemma3_text","hidden_size":8},"vision_config":{"hidden_size":3}})");
  Checkpoint c = Checkpoint::open(dir.str());
  EXPECT_EQ(c.model_type(), "gemma3_text");
  EXPECT_NE(c.config_json().find("\"tie_word_embeddings\":true"), std::string::npos);
  EXPECT_NE(c.config_json().find("\"hidden_size\":8"), std::string::npos);
  EXPECT_EQ(c.config_json().find("vision_config"), std::string::npos);
  EXPECT_EQ(c.generation().stop_tokens, (std::vector<int64_t>{1, 106}));
}

TEST(HfCheckpoint, MissingConfigAndAmbiguousWeights) {
  TempDir dir;
  write_safetensors(dir / "a.safetensors", {tensor("w", DType::f32, {2})});
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir.str()); }).find("no config.json"), std::string::npos);
  write_text(dir / "config.json", R"({"model_type":"llama"})");
  write_safetensors(dir / "b.safetensors", {tensor("w", DType::f32, {2})});
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir.str()); }).find("2 .safetensors files"), std::string::npos);
  // Naming the file resolves it.
  EXPECT_EQ(Checkpoint::open(dir / "a.safetensors").tensors().size(), 1u);
  EXPECT_NE(host_error_of([&] { Checkpoint::open(dir / "nothing-here"); }).find("does not exist"), std::string::npos);
}

TEST(CheckWeights, MismatchesNameTensorShapesDtypesAndFile) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors",
                    {tensor("a", DType::f32, {4, 8}), tensor("b", DType::bf16, {8}), tensor("c", DType::f16, {3})});
  write_text(dir / "config.json", R"({"model_type":"llama"})");
  Checkpoint c = Checkpoint::open(dir.str());
  auto ok = check_weights(c, {{"a", KILN_DTYPE_ANY, {4, -1}, false},
                              {"zz", KILN_DTYPE_F32, {1}, true},
                              {"b", KILN_DTYPE_F32, {8}, false, true}});
  EXPECT_EQ(ok[0], std::vector<const TensorInfo*>{c.find("a")});
  EXPECT_TRUE(ok[1].empty());
  EXPECT_EQ(ok[2].size(), 1u);  // BF16 accepted: the host converts
  const std::string e = host_error_of([&] {
    check_weights(c, {{"a", KILN_DTYPE_ANY, {4, 9}, false},
                      {"b", KILN_DTYPE_F16, {8}, false},
                      {"missing.weight", KILN_DTYPE_ANY, {2, 2}, false}});
  });
  EXPECT_NE(e.find("3 problems"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'a': expected [4, 9] any, found [4, 8] f32 in"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'b': expected [8] f16, found [8] bf16"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'missing.weight' (expected [2, 2] any) is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST(Gguf, WrittenFileReadsBackWithQuantizedTensorsAndVocab) {
  TempDir dir;
  GgufWriter w;
  w.add_string("general.architecture", "qwen3");
  w.add_u32("qwen3.block_count", 2);
  w.add_f32("qwen3.rope.freq_base", 1e6f);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 1, 1, 3});
  w.add_strings("tokenizer.ggml.merges", {"a b"});
  w.add_u32("tokenizer.ggml.eos_token_id", 3);
  w.add_u32("tokenizer.ggml.padding_token_id", 0xffffffffu);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0})
    w.add_tensor(tensor(std::string("t.") + dtype_name(t), t, {2, 64}, 0.5f));
  w.write(dir / "m.gguf");

  GgufFile g = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.architecture(), "qwen3");
  EXPECT_EQ(g.find("qwen3.block_count")->i, 2);
  EXPECT_FLOAT_EQ(static_cast<float>(g.find("qwen3.rope.freq_base")->f), 1e6f);
  ASSERT_EQ(g.tensors().size(), 5u);
  for (const auto& t : g.tensors()) {
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 64})) << t.name;
    auto v = tensor_to_f32(t);
    const float tol = t.dtype == DType::q4_0 ? 0.2f : t.dtype == DType::q8_0 ? 0.02f : 0.01f;
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(v[i], 0.5f + 0.25f * static_cast<float>(i % 17) - 1.0f, tol) << t.name;
  }
  auto vocab = g.vocab();
  ASSERT_TRUE(vocab);
  EXPECT_TRUE(vocab->is_bpe());
  EXPECT_EQ(vocab->pre, "qwen2");
  EXPECT_EQ(vocab->tokens.size(), 4u);
  EXPECT_EQ(vocab->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(vocab->eos, 3);
  EXPECT_EQ(vocab->pad, -1);  // UINT32_MAX means none
  EXPECT_EQ(*vocab->add_bos, false);

  Checkpoint c = Checkpoint::open(dir / "m.gguf");
  EXPECT_EQ(c.format(), CheckpointFormat::gguf);
  EXPECT_EQ(c.model_type(), "qwen3");
  EXPECT_NE(c.config_json().find("\"qwen3.block_count\":2"), std::string::npos) << c.config_json();
  EXPECT_NE(c.config_json().find("\"tokenizer.ggml.tokens.count\":4"), std::string::npos) << c.config_json();
  EXPECT_EQ(c.config_json().find("\"tokenizer.ggml.tokens\":"), std::string::npos);
  EXPECT_EQ(c.generation().stop_tokens, (std::vector<int64_t>{3}));
  EXPECT_EQ(c.find("t.q8_0")->dtype, DType::q8_0);
}

TEST(Gguf, EveryTruncationAndCorruptionIsAnError) {
  TempDir dir;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_strings("tokenizer.ggml.tokens", {"x", "y"});
  w.add_tensor(tensor("w", DType::q8_0, {1, 32}));
  const auto good = w.bytes();
  // The last 30 bytes are alignment padding after the 34-byte Q8_0 tensor; cutting them is harmless.
  for (size_t n = 0; n < good.size() - 30; ++n) {
    write_file(dir / "cut.gguf", std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)));
    const std::string e = host_error_of([&] { GgufFile::open(dir / "cut.gguf"); });
    EXPECT_NE(e.find("[gguf]"), std::string::npos) << "length " << n << ": " << e;
  }
  // Random single-byte corruptions of the header region: error or success, never a crash.
  for (size_t i = 4; i < 200 && i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0xA5;
    write_file(dir / "bad.gguf", bad);
    try {
      GgufFile::open(dir / "bad.gguf");
    } catch (const kiln::HostError& e) {
      EXPECT_NE(std::string(e.what()).find("[gguf]"), std::string::npos) << e.what();
    }
  }
  auto bad = good;
  bad[0] = 'X';
  write_file(dir / "magic.gguf", bad);
  EXPECT_NE(host_error_of([&] { GgufFile::open(dir / "magic.gguf"); }).find("not a GGUF file"), std::string::npos);
}

namespace {

/** A GGUF of one f32 tensor 'w' of `shape` whose type field is then set to ggml type `ggml_type`. */
std::vector<uint8_t> gguf_with_type(std::initializer_list<int64_t> shape, uint8_t ggml_type) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_tensor(tensor("w", DType::f32, shape));
  auto b = w.bytes();
  // The tensor type field follows the name (u64 length, bytes), the rank (u32) and the dims (u64 each).
  const std::string name = "w";
  auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  b[static_cast<size_t>(it - b.begin()) + 1 + 4 + 8 * shape.size()] = ggml_type;
  return b;
}

}  // namespace

TEST(Gguf, UnsupportedTensorTypeIsNamed) {
  TempDir dir;
  write_file(dir / "k.gguf", gguf_with_type({1, 256}, 16));  // IQ2_XXS
  const std::string e = host_error_of([&] { GgufFile::open(dir / "k.gguf"); });
  EXPECT_NE(e.find("IQ2_XXS"), std::string::npos) << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
}

TEST(Gguf, BlockFormatsReadAsTheyAreStored) {
  // ggml type ids (ggml.h) and the bytes of a [2, 512] tensor in each.
  struct T {
    uint8_t id;
    DType t;
    uint64_t bytes;
  };
  for (T x : {T{3, DType::q4_1, 2 * 16 * 20}, T{6, DType::q5_0, 2 * 16 * 22}, T{7, DType::q5_1, 2 * 16 * 24},
              T{10, DType::q2_k, 2 * 2 * 84}, T{11, DType::q3_k, 2 * 2 * 110}, T{12, DType::q4_k, 2 * 2 * 144},
              T{13, DType::q5_k, 2 * 2 * 176}, T{14, DType::q6_k, 2 * 2 * 210}, T{20, DType::iq4_nl, 2 * 16 * 18},
              T{23, DType::iq4_xs, 2 * 2 * 136}}) {
    TempDir dir;
    auto b = gguf_with_type({2, 512}, x.id);
    b.resize(b.size() + 4096);  // the f32 data was larger than any of these; room for the check either way
    write_file(dir / "q.gguf", b);
    const auto f = GgufFile::open(dir / "q.gguf");
    ASSERT_EQ(f.tensors().size(), 1u);
    EXPECT_EQ(f.tensors()[0].dtype, x.t) << int(x.id);
    EXPECT_EQ(f.tensors()[0].nbytes, x.bytes) << dtype_name(x.t);
  }
}

TEST(Gguf, QuantizedRowsThatAreNotWholeBlocksAreNamed) {
  TempDir dir;
  write_file(dir / "k.gguf", gguf_with_type({8, 32}, 12));  // Q4_K: 256 values per block
  const std::string e = host_error_of([&] { GgufFile::open(dir / "k.gguf"); });
  EXPECT_NE(e.find("'w' q4_K has rows of 32 values"), std::string::npos) << e;
  EXPECT_NE(e.find("256-value blocks"), std::string::npos) << e;
}

TEST(Fixtures, Stories260KGguf) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  Checkpoint c = Checkpoint::open(path);
  EXPECT_EQ(c.model_type(), "llama");
  ASSERT_TRUE(c.vocab());
  EXPECT_TRUE(c.vocab()->is_sentencepiece());
  EXPECT_EQ(c.vocab()->tokens.size(), 512u);
  EXPECT_EQ(c.vocab()->tokens[1], "<s>");
  EXPECT_EQ(c.vocab()->bos, 1);
  EXPECT_EQ(c.generation().stop_tokens, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.tensors().size(), 48u);
  ASSERT_NE(c.find("token_embd.weight"), nullptr);
  EXPECT_EQ(c.find("token_embd.weight")->shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(c.find("blk.0.ffn_down.weight")->shape, (std::vector<int64_t>{64, 172}));
  EXPECT_NE(c.config_json().find("\"llama.block_count\":5"), std::string::npos);
}

TEST(Fixtures, TinyQwen3MoeSafetensors) {
  const std::string path = fixture("tiny-qwen3-moe/weights.safetensors");
  KILN_REQUIRE_FIXTURE(path);
  Checkpoint c = Checkpoint::open(path);
  EXPECT_EQ(c.model_type(), "qwen3_moe");
  EXPECT_EQ(c.tensors().size(), 25u);
  EXPECT_EQ(c.find("model.layers.0.mlp.experts.gate_up_proj")->shape, (std::vector<int64_t>{4, 48, 16}));
  EXPECT_EQ(c.generation().stop_tokens, (std::vector<int64_t>{2}));
}

TEST(CheckWeights, StackedPiecesAreFoundCheckedAndNamed) {
  TempDir dir;
  write_safetensors(
      dir / "model.safetensors",
      {tensor("e.0.w", DType::f16, {3, 32}), tensor("e.1.w", DType::f16, {3, 32}), tensor("e.2.w", DType::f16, {3, 32}),
       tensor("f.0.w", DType::f16, {3, 32}), tensor("f.1.w", DType::f16, {4, 32})});
  write_text(dir / "config.json", R"({"model_type":"qwen3_moe"})");
  Checkpoint c = Checkpoint::open(dir.str());
  auto got = check_weights(c, {{"e.{}.w", KILN_DTYPE_ANY, {3, 3, 32}, true, false, 3},
                               {"none.{}.w", KILN_DTYPE_ANY, {2, 3, 32}, true, false, 2}});
  ASSERT_EQ(got[0].size(), 3u);
  EXPECT_EQ(got[0][2]->name, "e.2.w");
  EXPECT_TRUE(got[1].empty());
  const std::string e = host_error_of([&] {
    check_weights(c, {{"e.{}.w", KILN_DTYPE_ANY, {4, 3, 32}, false, false, 4},
                      {"f.{}.w", KILN_DTYPE_ANY, {2, -1, 32}, false, false, 2}});
  });
  EXPECT_NE(e.find("tensor 'e.3.w' (expected [3, 32] any) is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("stacked pieces must agree"), std::string::npos) << e;
}
