// A tiny hybrid model plugin for the model host's tests, written against the SDK only and composed
// from kiln/layers.hpp: layers of three kinds — a Gated-DeltaNet-style linear layer (depthwise
// causal conv + gated delta rule, both with recurrent state), full attention and sliding-window
// attention — each followed by a SwiGLU MLP, plus a host-resident per-token table added to the
// embeddings (as Gemma 4's per-layer embeddings are). Model type "kiln_test_hybrid"; config.json:
//   hidden_size, vocab_size, layer_types ["linear" | "full" | "sliding", ...], sliding_window,
//   chunk (the delta rule's), host_table (declare "extra_embed.weight" KILN_TENSOR_HOST, default
//   true), fail_at_tokens (build_graph fails for batches of that many tokens: failure injection).
// tests/model/hybrid_model.hpp writes random checkpoints for it.
#include <cmath>
#include <kiln/layers.hpp>
#include <kiln/names.hpp>
#include <kiln/plugin.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hybrid {
namespace {

constexpr int64_t kHk = 2, kDk = 8, kHv = 4, kDv = 8, kConv = 4;  // linear layers
constexpr int64_t kHq = 4, kHkv = 2, kDh = 8;                     // attention layers
constexpr int64_t kFf = 48;

enum class Role {
  embed,
  extra_embed,
  final_norm,
  norm,
  qkv,
  conv,
  beta,
  alpha,
  decay,
  gate_norm,
  gate,
  out,
  q,
  k,
  v,
  o,
  mlp_norm,
  mlp_gate,
  mlp_up,
  mlp_down,
  lm_head,
};

const kiln::NameRow<Role> kNames[] = {
    {Role::embed, "model.embed_tokens.weight", nullptr},
    {Role::extra_embed, "model.extra_embed.weight", nullptr},
    {Role::final_norm, "model.norm.weight", nullptr},
    {Role::lm_head, "lm_head.weight", nullptr},
    {Role::norm, "model.layers.%d.input_layernorm.weight", nullptr},
    {Role::qkv, "model.layers.%d.linear_attn.in_proj_qkv.weight", nullptr},
    {Role::conv, "model.layers.%d.linear_attn.conv1d.weight", nullptr},
    {Role::beta, "model.layers.%d.linear_attn.in_proj_b.weight", nullptr},
    {Role::alpha, "model.layers.%d.linear_attn.in_proj_a.weight", nullptr},
    {Role::decay, "model.layers.%d.linear_attn.decay", nullptr},
    {Role::gate_norm, "model.layers.%d.linear_attn.norm.weight", nullptr},
    {Role::gate, "model.layers.%d.linear_attn.in_proj_z.weight", nullptr},
    {Role::out, "model.layers.%d.linear_attn.out_proj.weight", nullptr},
    {Role::q, "model.layers.%d.self_attn.q_proj.weight", nullptr},
    {Role::k, "model.layers.%d.self_attn.k_proj.weight", nullptr},
    {Role::v, "model.layers.%d.self_attn.v_proj.weight", nullptr},
    {Role::o, "model.layers.%d.self_attn.o_proj.weight", nullptr},
    {Role::mlp_norm, "model.layers.%d.post_attention_layernorm.weight", nullptr},
    {Role::mlp_gate, "model.layers.%d.mlp.gate_proj.weight", nullptr},
    {Role::mlp_up, "model.layers.%d.mlp.up_proj.weight", nullptr},
    {Role::mlp_down, "model.layers.%d.mlp.down_proj.weight", nullptr},
};

class HybridModel : public kiln::Model {
 public:
  explicit HybridModel(const kiln::ModelInfo& info) : names_(kNames, info.format) {
    const auto c = nlohmann::json::parse(info.config_json);
    D_ = c.at("hidden_size").get<int64_t>();
    V_ = c.at("vocab_size").get<int64_t>();
    for (const auto& t : c.at("layer_types")) types_.push_back(t.get<std::string>());
    window_ = c.value("sliding_window", 8);
    chunk_ = c.value("chunk", 64);
    host_table_ = c.value("host_table", true);
    fail_at_tokens_ = c.value("fail_at_tokens", 0u);
    if (!info.has(names_(Role::embed)))
      throw kiln::Error(KILN_ERR_INVALID_ARGUMENT, "[hybrid] the checkpoint has no " + names_(Role::embed));
  }

  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = static_cast<uint32_t>(types_.size());
    h.n_vocab = static_cast<uint32_t>(V_);
    h.n_embd = static_cast<uint32_t>(D_);
    h.max_context = 4096;
    h.bos_token = 1;
    h.architecture = "kiln_test_hybrid";
    return h;
  }

  std::vector<kiln::TensorDecl> tensors() const override {
    std::vector<kiln::TensorDecl> d;
    auto mat = [&](Role r, int l, std::vector<int64_t> shape) {
      d.push_back({names_(r, l), KILN_DTYPE_ANY, std::move(shape), false, false, 0, 0});
    };
    auto vec = [&](Role r, int l, std::vector<int64_t> shape) {
      d.push_back({names_(r, l), KILN_DTYPE_F32, std::move(shape), false, true, 0, 0});
    };
    mat(Role::embed, -1, {V_, D_});
    d.push_back({names_(Role::extra_embed, -1),
                 KILN_DTYPE_ANY,
                 {V_, D_},
                 false,
                 false,
                 0,
                 host_table_ ? KILN_TENSOR_HOST : 0u});
    vec(Role::final_norm, -1, {D_});
    mat(Role::lm_head, -1, {V_, D_});
    for (int l = 0; l < static_cast<int>(types_.size()); ++l) {
      vec(Role::norm, l, {D_});
      if (types_[static_cast<size_t>(l)] == "linear") {
        mat(Role::qkv, l, {conv_channels(), D_});
        vec(Role::conv, l, {conv_channels(), kConv});
        mat(Role::beta, l, {kHv, D_});
        mat(Role::alpha, l, {kHv, D_});
        vec(Role::decay, l, {kHv});
        vec(Role::gate_norm, l, {kDv});
        mat(Role::gate, l, {kHv * kDv, D_});
        mat(Role::out, l, {D_, kHv * kDv});
      } else {
        mat(Role::q, l, {kHq * kDh, D_});
        mat(Role::k, l, {kHkv * kDh, D_});
        mat(Role::v, l, {kHkv * kDh, D_});
        mat(Role::o, l, {D_, kHq * kDh});
      }
      vec(Role::mlp_norm, l, {D_});
      mat(Role::mlp_gate, l, {kFf, D_});
      mat(Role::mlp_up, l, {kFf, D_});
      mat(Role::mlp_down, l, {D_, kFf});
    }
    return d;
  }

  kiln::LayerCache layer_cache(uint32_t layer) const override {
    kiln::LayerCache c;
    const std::string& t = types_[layer];
    if (t == "linear") {
      c.kind = KILN_CACHE_RECURRENT;
      c.state_shapes = {{kConv - 1, conv_channels()}, {kHv, kDk, kDv}};
      return c;
    }
    c.kind = t == "sliding" ? KILN_CACHE_SLIDING_KV : KILN_CACHE_FULL_KV;
    c.window = t == "sliding" ? static_cast<uint32_t>(window_) : 0;
    c.n_kv_heads = kHkv;
    c.head_dim_k = c.head_dim_v = kDh;
    return c;
  }

  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc& batch) override {
    if (fail_at_tokens_ && batch.n_tokens == fail_at_tokens_)
      throw kiln::Error(KILN_ERR_UNSUPPORTED, "[hybrid] injected failure: a batch of " +
                                                  std::to_string(batch.n_tokens) + " tokens (fail_at_tokens)");
    const kiln_tensor tokens = g.input("tokens"), positions = g.input("positions");
    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {g.required(names_(Role::embed)), tokens});
    // The host gathers this table's rows itself when it is host-resident.
    x = g.add(x, g.op(KILN_OP_GET_ROWS, {g.required(names_(Role::extra_embed)), tokens}));
    for (uint32_t l = 0; l < types_.size(); ++l) {
      const int li = static_cast<int>(l);
      kiln_tensor h = g.rms_norm(x, w(g, Role::norm, li), 1e-6f);
      const kiln_tensor mix = types_[l] == "linear" ? linear(g, h, l) : attention(g, h, l, positions);
      x = g.add(x, mix);
      h = g.rms_norm(x, w(g, Role::mlp_norm, li), 1e-6f);
      x = g.add(
          x, kiln::layers::glu_mlp(g, h, w(g, Role::mlp_gate, li), w(g, Role::mlp_up, li), w(g, Role::mlp_down, li)));
      g.name(x, "layer_" + std::to_string(l) + ".block_output");
    }
    kiln::layers::lm_head(g, x, w(g, Role::final_norm, -1), 1e-6f, KILN_NORM_WEIGHT, w(g, Role::lm_head, -1));
  }

 private:
  static int64_t conv_channels() { return 2 * kHk * kDk + kHv * kDv; }
  kiln_tensor w(kiln::GraphBuilder& g, Role r, int l) const { return g.required(names_(r, l)); }

  kiln_tensor linear(kiln::GraphBuilder& g, kiln_tensor h, uint32_t l) const {
    const int li = static_cast<int>(l);
    kiln_tensor qkv =
        g.unary(KILN_OP_SILU, kiln::layers::causal_conv(g, l, g.matmul(h, w(g, Role::qkv, li)), w(g, Role::conv, li)));
    const int64_t qk = kHk * kDk;
    kiln_tensor q = g.reshape(g.slice(qkv, -1, 0, qk), {-1, kHk, kDk});
    kiln_tensor k = g.reshape(g.slice(qkv, -1, qk, 2 * qk), {-1, kHk, kDk});
    kiln_tensor v = g.reshape(g.slice(qkv, -1, 2 * qk, 2 * qk + kHv * kDv), {-1, kHv, kDv});
    q = g.scale(g.l2_norm(q, 1e-6f), 1.0f / std::sqrt(static_cast<float>(kDk)));
    k = g.l2_norm(k, 1e-6f);
    const kiln_tensor beta = g.unary(KILN_OP_SIGMOID, g.matmul(h, w(g, Role::beta, li)));
    // g = decay · softplus(a), decay = -exp(A_log) < 0 per value head.
    const kiln_tensor gate =
        g.mul(g.unary(KILN_OP_SOFTPLUS, g.matmul(h, w(g, Role::alpha, li))), w(g, Role::decay, li));
    kiln_tensor o = kiln::layers::gated_delta(g, l, q, k, v, gate, beta, chunk_);
    const kiln_tensor z = g.reshape(g.matmul(h, w(g, Role::gate, li)), {-1, kHv, kDv});
    o = g.rms_norm(o, w(g, Role::gate_norm, li), 1e-6f, KILN_NORM_GATED, z);
    return g.matmul(g.reshape(o, {-1, kHv * kDv}), w(g, Role::out, li));
  }

  kiln_tensor attention(kiln::GraphBuilder& g, kiln_tensor h, uint32_t l, kiln_tensor positions) const {
    const int li = static_cast<int>(l);
    kiln_tensor q = g.reshape(g.matmul(h, w(g, Role::q, li)), {-1, kHq, kDh});
    kiln_tensor k = g.reshape(g.matmul(h, w(g, Role::k, li)), {-1, kHkv, kDh});
    kiln_tensor v = g.reshape(g.matmul(h, w(g, Role::v, li)), {-1, kHkv, kDh});
    q = g.rope(q, positions, KILN_ROPE_NEOX, 10000.0f);
    k = g.rope(k, positions, KILN_ROPE_NEOX, 10000.0f);
    kiln::layers::AttentionOptions o;
    o.window = types_[l] == "sliding" ? window_ : 0;
    const kiln_tensor a = kiln::layers::paged_attention(g, l, q, k, v, o);
    return g.matmul(g.reshape(a, {-1, kHq * kDh}), w(g, Role::o, li));
  }

  kiln::NameTable<Role> names_;
  int64_t D_ = 0, V_ = 0;
  std::vector<std::string> types_;
  int32_t window_ = 8, chunk_ = 64;
  bool host_table_ = true;
  uint32_t fail_at_tokens_ = 0;
};

const char* const kTypes[] = {"kiln_test_hybrid", nullptr};

}  // namespace
}  // namespace hybrid

KILN_PLUGIN(test_hybrid, "0.1.0",
            kiln::model<hybrid::HybridModel>("test_hybrid", hybrid::kTypes, "tiny hybrid model for host tests"))
