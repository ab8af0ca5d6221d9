// The SDK's model adapter across struct sizes (ABI.md, "Struct sizes"): what a plugin fills is
// sized by the host, so an older host's smaller struct is never written past its end, and the
// checkpoint's tensors reach the model through kiln_model_create_info's stride.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <kiln/plugin.hpp>
#include <vector>

namespace {

class TinyModel : public kiln::Model {
 public:
  explicit TinyModel(const kiln::ModelInfo& info) {
    // The views are valid during construction only: keep copies.
    for (const auto& t : info.tensors) names_.emplace_back(t.name);
    has_fused_ = info.has("experts.gate_up_proj");
    const kiln::CheckpointTensor* w = info.find("embed.weight");
    rows_ = w ? w->shape.at(0) : 0;
  }
  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = 3;
    h.n_vocab = 77;
    h.n_embd = 16;
    h.max_context = 128;
    h.bos_token = 1;
    h.architecture = "tiny";
    return h;
  }
  std::vector<kiln::TensorDecl> tensors() const override { return {{"embed.weight", KILN_DTYPE_ANY, {rows_, 16}}}; }
  kiln::LayerCache layer_cache(uint32_t) const override {
    kiln::LayerCache c;
    c.n_kv_heads = 2;
    c.head_dim_k = c.head_dim_v = 8;
    return c;
  }
  void build_graph(kiln::GraphBuilder&, const kiln_batch_desc&) override {}

  std::vector<std::string> names_;
  bool has_fused_ = false;
  int64_t rows_ = 0;
};

using Adapter = kiln::detail::ModelAdapter<TinyModel>;

TEST(SdkModelAdapter, FillsOnlyWhatFitsInTheHostsStruct) {
  // An older host whose kiln_model_hparams ended after n_vocab, followed by guard bytes.
  constexpr size_t kOld = offsetof(kiln_model_hparams, n_vocab) + sizeof(uint32_t);
  alignas(kiln_model_hparams) unsigned char buf[sizeof(kiln_model_hparams)];
  std::memset(buf, 0xAB, sizeof buf);
  auto* out = reinterpret_cast<kiln_model_hparams*>(buf);
  out->struct_size = kOld;

  kiln_checkpoint_tensor t{};
  t.name = {"embed.weight", 12};
  t.ndim = 2;
  t.shape[0] = 77;
  t.shape[1] = 16;
  kiln_model_create_info info{};
  info.struct_size = sizeof(info);
  info.tensors = &t;
  info.n_tensors = 1;
  info.tensor_stride = sizeof(t);
  kiln_error err{};
  void* m = Adapter::create(&info, &err);
  ASSERT_NE(m, nullptr) << err.message;
  ASSERT_EQ(Adapter::hparams(m, out, &err), KILN_OK);
  EXPECT_EQ(out->struct_size, kOld);  // the host's size stays
  EXPECT_EQ(out->n_layers, 3u);
  EXPECT_EQ(out->n_vocab, 77u);
  for (size_t i = kOld; i < sizeof buf; ++i)
    ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " written past the host's struct";

  // The declaration saw the checkpoint's shape.
  kiln_tensor_decl d{};
  d.struct_size = sizeof(d);
  ASSERT_EQ(Adapter::tensor_decl(m, 0, &d, &err), KILN_OK);
  EXPECT_EQ(d.shape[0], 77);
  Adapter::destroy(m);
}

TEST(SdkModelAdapter, ReadsCheckpointTensorsThroughTheHostsStride) {
  // A newer host's element with 16 more bytes per tensor: the plugin must step by the stride.
  struct Wider {
    kiln_checkpoint_tensor t;
    char extra[16];
  };
  std::vector<Wider> ts(2);
  ts[0].t.name = {"a", 1};
  ts[1].t.name = {"experts.gate_up_proj", 20};
  ts[1].t.ndim = 3;
  kiln_model_create_info info{};
  info.struct_size = sizeof(info);
  info.tensors = &ts[0].t;
  info.n_tensors = 2;
  info.tensor_stride = sizeof(Wider);
  kiln_error err{};
  void* m = Adapter::create(&info, &err);
  ASSERT_NE(m, nullptr) << err.message;
  const auto* inst = static_cast<Adapter::Instance*>(m);
  EXPECT_EQ(inst->model.names_, (std::vector<std::string>{"a", "experts.gate_up_proj"}));
  EXPECT_TRUE(inst->model.has_fused_);
  Adapter::destroy(m);

  // An ABI 1.0-sized create info (no tensor list): the model sees none.
  kiln_model_create_info old{};
  old.struct_size = offsetof(kiln_model_create_info, tensors);
  m = Adapter::create(&old, &err);
  ASSERT_NE(m, nullptr) << err.message;
  EXPECT_TRUE(static_cast<Adapter::Instance*>(m)->model.names_.empty());
  Adapter::destroy(m);
}

}  // namespace
