// A one-layer transformer as a third party would write it: the SDK's name table and building
// blocks (kiln/names.hpp, kiln/layers.hpp), nothing from kiln's source tree. config.json:
// {"model_type": "toy_lm", "hidden_size", "vocab_size", "num_heads", "head_dim", "intermediate_size"}.
#include <kiln/layers.hpp>
#include <kiln/names.hpp>
#include <kiln/plugin.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace toy {
namespace {

enum class Role { embed, attn_norm, q, k, v, o, mlp_norm, gate, up, down, final_norm, head };

const kiln::NameRow<Role> kNames[] = {
    {Role::embed, "embed.weight", nullptr},
    {Role::attn_norm, "layer.attn_norm.weight", nullptr},
    {Role::q, "layer.q.weight", nullptr},
    {Role::k, "layer.k.weight", nullptr},
    {Role::v, "layer.v.weight", nullptr},
    {Role::o, "layer.o.weight", nullptr},
    {Role::mlp_norm, "layer.mlp_norm.weight", nullptr},
    {Role::gate, "layer.gate.weight", nullptr},
    {Role::up, "layer.up.weight", nullptr},
    {Role::down, "layer.down.weight", nullptr},
    {Role::final_norm, "final_norm.weight", nullptr},
    {Role::head, "head.weight", nullptr},
};

class ToyLm : public kiln::Model {
 public:
  explicit ToyLm(const kiln::ModelInfo& info) : names_(kNames, info.format) {
    const auto c = nlohmann::json::parse(info.config_json);
    D_ = c.at("hidden_size").get<int64_t>();
    V_ = c.at("vocab_size").get<int64_t>();
    H_ = c.at("num_heads").get<int64_t>();
    Dh_ = c.at("head_dim").get<int64_t>();
    F_ = c.at("intermediate_size").get<int64_t>();
    // Refuse a checkpoint this plugin cannot serve now, with what is missing.
    for (Role r : {Role::embed, Role::head})
      if (!info.has(names_(r))) throw kiln::Error(KILN_ERR_INVALID_ARGUMENT, "[toy_lm] no tensor " + names_(r));
  }
  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = 1;
    h.n_vocab = static_cast<uint32_t>(V_);
    h.n_embd = static_cast<uint32_t>(D_);
    h.max_context = 256;
    h.architecture = "toy_lm";
    return h;
  }
  std::vector<kiln::TensorDecl> tensors() const override {
    auto mat = [&](Role r, std::vector<int64_t> s) { return kiln::TensorDecl{names_(r), KILN_DTYPE_ANY, s}; };
    auto vec = [&](Role r) { return kiln::TensorDecl{names_(r), KILN_DTYPE_F32, {D_}, false, true}; };
    return {mat(Role::embed, {V_, D_}),   vec(Role::attn_norm),         mat(Role::q, {H_ * Dh_, D_}),
            mat(Role::k, {H_ * Dh_, D_}), mat(Role::v, {H_ * Dh_, D_}), mat(Role::o, {D_, H_ * Dh_}),
            vec(Role::mlp_norm),          mat(Role::gate, {F_, D_}),    mat(Role::up, {F_, D_}),
            mat(Role::down, {D_, F_}),    vec(Role::final_norm),        mat(Role::head, {V_, D_})};
  }
  kiln::LayerCache layer_cache(uint32_t) const override {
    kiln::LayerCache c;
    c.n_kv_heads = static_cast<uint32_t>(H_);
    c.head_dim_k = c.head_dim_v = static_cast<uint32_t>(Dh_);
    return c;
  }
  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc&) override {
    auto w = [&](Role r) { return g.required(names_(r)); };
    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {w(Role::embed), g.input("tokens")});
    kiln_tensor h = g.rms_norm(x, w(Role::attn_norm), 1e-5f);
    const kiln_tensor pos = g.input("positions");
    kiln_tensor q = g.rope(g.reshape(g.matmul(h, w(Role::q)), {-1, H_, Dh_}), pos, KILN_ROPE_NEOX, 10000.0f);
    kiln_tensor k = g.rope(g.reshape(g.matmul(h, w(Role::k)), {-1, H_, Dh_}), pos, KILN_ROPE_NEOX, 10000.0f);
    kiln_tensor v = g.reshape(g.matmul(h, w(Role::v)), {-1, H_, Dh_});
    kiln_tensor a = kiln::layers::paged_attention(g, 0, q, k, v);
    x = g.add(x, g.matmul(g.reshape(a, {-1, H_ * Dh_}), w(Role::o)));
    h = g.rms_norm(x, w(Role::mlp_norm), 1e-5f);
    x = g.add(x, kiln::layers::glu_mlp(g, h, w(Role::gate), w(Role::up), w(Role::down)));
    kiln::layers::lm_head(g, x, w(Role::final_norm), 1e-5f, KILN_NORM_WEIGHT, w(Role::head));
  }

 private:
  kiln::NameTable<Role> names_;
  int64_t D_ = 0, V_ = 0, H_ = 0, Dh_ = 0, F_ = 0;
};

const char* const kTypes[] = {"toy_lm", nullptr};

}  // namespace
}  // namespace toy

KILN_PLUGIN(toy_lm, "1.0.0", kiln::model<toy::ToyLm>("toy_lm", toy::kTypes, "a one-layer toy transformer (example)"))
