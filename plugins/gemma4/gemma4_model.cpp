// Gemma 4 as a kiln model (gemma4, gemma4_text): E2B/E4B (per-layer embeddings, KV sharing,
// double-wide MLP), 26B-A4B (experts beside the dense MLP, K=V full layers) and 31B (dense, K=V),
// from Hugging Face directories and llama.cpp GGUF files. The forward pass follows
// shared/docs/models/gemma4.md §2; tests/reference/gemma4_reference.py is its independent check.
#include "gemma4_model.hpp"

#include <cmath>
#include <kiln/layers.hpp>
#include <kiln/plugin.hpp>
#include <string>
#include <vector>

#include "gemma4_config.hpp"
#include "gemma4_names.hpp"

namespace gemma4 {
namespace {

namespace layers = kiln::layers;

class Gemma4Model : public kiln::Model {
 public:
  explicit Gemma4Model(const kiln::ModelInfo& info) : c_(parse_config(info)), names_(name_table(c_.format)) {
    // The released checkpoints are multimodal wrappers holding the text model under
    // model.language_model.; a text-only export keeps it under model.
    if (c_.format == KILN_CHECKPOINT_HF && info.has_prefix("model.language_model."))
      names_.rewrite_prefix("model.", "model.language_model.");
    // GGUF files may store the experts' gate and up apart (ffn_gate_exps / ffn_up_exps).
    experts_split_ = c_.moe && !info.has(name(Role::moe_gate_up, 0)) && info.has(name(Role::moe_gate, 0));
  }

  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = c_.n_layers;
    h.n_vocab = c_.n_vocab;
    h.n_embd = c_.n_embd;
    h.max_context = c_.max_context;
    h.bos_token = c_.bos_token;
    h.architecture = "gemma4";
    return h;
  }

  std::vector<kiln::TensorDecl> tensors() const override {
    std::vector<kiln::TensorDecl> d;
    const int64_t H = c_.n_embd, V = c_.n_vocab, P = c_.ple_dim, L = c_.n_layers;
    // Matrices in any stored dtype (the kernels dequantize); vectors read elementwise as F32.
    auto mat = [&](Role r, int l, std::vector<int64_t> shape, uint32_t flags = 0) {
      d.push_back({name(r, l), KILN_DTYPE_ANY, std::move(shape), false, false, 0, flags});
    };
    auto vec = [&](Role r, int l, int64_t n) { d.push_back({name(r, l), KILN_DTYPE_F32, {n}, false, true, 0}); };
    mat(Role::token_embd, -1, {V, H});
    vec(Role::output_norm, -1, H);
    if (P) {
      // [V, L·P]: gigabytes on E2B/E4B of which a step reads one row per token, so it stays in the
      // mapped file and the host gathers the rows.
      mat(Role::ple_embd, -1, {V, L * P}, KILN_TENSOR_HOST);
      mat(Role::ple_model_proj, -1, {L * P, H});
      vec(Role::ple_proj_norm, -1, P);
    }
    for (int l = 0; l < static_cast<int>(L); ++l) {
      const Layer& y = layer(l);
      const int64_t Dh = y.head_dim, q_out = int64_t{c_.n_head} * Dh, kv_out = int64_t{y.n_kv_heads} * Dh;
      vec(Role::attn_norm, l, H);
      // q, k, v declared together: one weight arena, one dispatch for the three projections.
      mat(Role::attn_q, l, {q_out, H});
      if (y.kv_source < 0) {  // KV-shared layers' k/v weights, when a checkpoint has them, are unused
        mat(Role::attn_k, l, {kv_out, H});
        if (!y.k_eq_v) mat(Role::attn_v, l, {kv_out, H});
        vec(Role::attn_k_norm, l, Dh);
      }
      vec(Role::attn_q_norm, l, Dh);
      mat(Role::attn_output, l, {H, q_out});
      vec(Role::post_attn_norm, l, H);
      vec(Role::ffn_norm, l, H);
      mat(Role::ffn_gate, l, {y.n_ff, H});
      mat(Role::ffn_up, l, {y.n_ff, H});
      mat(Role::ffn_down, l, {H, y.n_ff});
      vec(Role::post_ffn_norm, l, H);
      if (c_.moe) {
        const int64_t E = c_.n_expert, I = c_.n_ff_expert;
        mat(Role::moe_router, l, {E, H});
        vec(Role::moe_router_scale, l, H);
        vec(Role::moe_expert_scale, l, E);
        if (experts_split_) {
          mat(Role::moe_gate, l, {E, I, H});
          mat(Role::moe_up, l, {E, I, H});
        } else {
          mat(Role::moe_gate_up, l, {E, 2 * I, H});
        }
        mat(Role::moe_down, l, {E, H, I});
        vec(Role::moe_norm, l, H);
        vec(Role::post_ffn_norm_1, l, H);
        vec(Role::post_ffn_norm_2, l, H);
      }
      if (P) {
        mat(Role::ple_gate, l, {P, H});
        mat(Role::ple_proj, l, {H, P});
        vec(Role::ple_post_norm, l, H);
      }
      vec(Role::layer_scalar, l, 1);
    }
    return d;
  }

  kiln::LayerCache layer_cache(uint32_t l) const override {
    const Layer& y = layer(static_cast<int>(l));
    kiln::LayerCache lc;
    lc.kind = y.sliding ? KILN_CACHE_SLIDING_KV : KILN_CACHE_FULL_KV;
    lc.window = y.sliding ? c_.window : 0;
    lc.n_kv_heads = y.n_kv_heads;
    lc.head_dim_k = lc.head_dim_v = y.head_dim;
    lc.shares_with = y.kv_source;
    // A layer whose cache the KV-shared layers read feeds all of them: its quantization error would
    // reach several layers, so it stays at 16 bits when the cache is quantized.
    for (uint32_t j = l + 1; j < c_.n_layers; ++j)
      if (layer(static_cast<int>(j)).kv_source == static_cast<int32_t>(l)) lc.kv_sensitive = true;
    return lc;
  }

  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc& batch) override {
    (void)batch;  // every shape comes from the inputs
    const kiln_tensor tokens = g.input("tokens"), positions = g.input("positions");
    const kiln_tensor embd = weight(g, Role::token_embd, -1);
    const float H = static_cast<float>(c_.n_embd);

    // The embedding times √H in f32 (HF rounds the factor to the weights' dtype because it runs in
    // that dtype; kiln's activations are f32, as HF's are when it runs in f32).
    kiln_tensor x = g.scale(g.op(KILN_OP_GET_ROWS, {embd, tokens}), std::sqrt(H));
    g.name(x, "hidden_state_0");
    const kiln_tensor ple = c_.ple_dim ? per_layer_inputs(g, tokens, x) : 0;

    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      const std::string pre = "layer_" + std::to_string(l) + ".";
      kiln_tensor h = g.rms_norm(x, weight(g, Role::attn_norm, l), c_.norm_eps);
      g.name(h, pre + "input_norm");
      kiln_tensor a = attention(g, h, l, positions, pre);
      a = g.rms_norm(a, weight(g, Role::post_attn_norm, l), c_.norm_eps);
      g.name(a, pre + "attention_output");
      x = g.add(x, a);
      x = g.add(x, c_.moe ? dense_and_experts(g, x, l, pre) : dense(g, x, l, Role::post_ffn_norm));
      if (ple) x = g.add(x, per_layer_block(g, x, ple, l));
      x = g.mul(x, weight(g, Role::layer_scalar, l));
      g.name(x, pre + "block_output");
    }
    layers::lm_head(g, x, weight(g, Role::output_norm, -1), c_.norm_eps, KILN_NORM_WEIGHT, embd, c_.softcap);
  }

 private:
  const Layer& layer(int l) const { return c_.layers[static_cast<size_t>(l)]; }
  std::string name(Role r, int l) const { return names_(r, l); }

  kiln_tensor weight(kiln::GraphBuilder& g, Role r, int l) const {
    const kiln_tensor t = g.weight(name(r, l));
    if (!t) throw kiln::Error(KILN_ERR_NOT_FOUND, "[gemma4] weight " + name(r, l) + " is not loaded");
    return t;
  }

  /**
   * Per-layer embeddings [N, L, P] (§2.3): the token's row of the PLE table times √P, plus the
   * projection of the scaled embedding times H^-½, RMS-normed over P; their sum times 2^-½.
   */
  kiln_tensor per_layer_inputs(kiln::GraphBuilder& g, kiln_tensor tokens, kiln_tensor x0) const {
    const int64_t L = c_.n_layers, P = c_.ple_dim;
    kiln_tensor tok = g.op(KILN_OP_GET_ROWS, {weight(g, Role::ple_embd, -1), tokens});
    tok = g.reshape(g.scale(tok, std::sqrt(static_cast<float>(P))), {-1, L, P});
    kiln_tensor ctx = g.matmul(x0, weight(g, Role::ple_model_proj, -1));
    ctx = g.reshape(g.scale(ctx, 1.0f / std::sqrt(static_cast<float>(c_.n_embd))), {-1, L, P});
    ctx = g.rms_norm(ctx, weight(g, Role::ple_proj_norm, -1), c_.norm_eps);
    kiln_tensor ple = g.scale(g.add(ctx, tok), 1.0f / std::sqrt(2.0f));
    g.name(ple, "per_layer_inputs");
    return ple;
  }

  /** The layer's share of the per-layer embeddings, gated by the residual stream (§2.3). */
  kiln_tensor per_layer_block(kiln::GraphBuilder& g, kiln_tensor x, kiln_tensor ple, int l) const {
    const int64_t P = c_.ple_dim;
    const kiln_tensor mine = g.reshape(g.slice(ple, 1, l, l + 1), {-1, P});
    const kiln_tensor gate = g.unary(KILN_OP_GELU_TANH, g.matmul(x, weight(g, Role::ple_gate, l)));
    const kiln_tensor y = g.matmul(g.mul(gate, mine), weight(g, Role::ple_proj, l));
    return g.rms_norm(y, weight(g, Role::ple_post_norm, l), c_.norm_eps);
  }

  kiln_tensor attention(kiln::GraphBuilder& g, kiln_tensor h, int l, kiln_tensor positions,
                        const std::string& pre) const {
    const Layer& y = layer(l);
    const int64_t Dh = y.head_dim, nh = c_.n_head, nkv = y.n_kv_heads;
    const bool own = y.kv_source < 0;
    // The projections back to back (one dispatch when their weights share an arena).
    kiln_tensor q = g.matmul(h, weight(g, Role::attn_q, l));
    kiln_tensor k = own ? g.matmul(h, weight(g, Role::attn_k, l)) : 0;
    kiln_tensor v = own && !y.k_eq_v ? g.matmul(h, weight(g, Role::attn_v, l)) : 0;
    q = g.reshape(q, {-1, nh, Dh});
    q = layers::norm_rope(g, q, weight(g, Role::attn_q_norm, l), c_.norm_eps, KILN_NORM_WEIGHT, positions,
                          KILN_ROPE_NEOX, y.rope_theta, static_cast<int32_t>(y.rope_dims),
                          static_cast<int32_t>(y.rope_freq));
    g.name(q, pre + "query_rope");
    if (own) {
      k = g.reshape(k, {-1, nkv, Dh});
      // K=V layers: V is the raw K projection, normed without weight and not rotated.
      v = y.k_eq_v ? k : g.reshape(v, {-1, nkv, Dh});
      k = layers::norm_rope(g, k, weight(g, Role::attn_k_norm, l), c_.norm_eps, KILN_NORM_WEIGHT, positions,
                            KILN_ROPE_NEOX, y.rope_theta, static_cast<int32_t>(y.rope_dims),
                            static_cast<int32_t>(y.rope_freq));
      g.name(k, pre + "key_rope");
      v = g.rms_norm(v, 0, c_.norm_eps, KILN_NORM_NONE);
      g.name(v, pre + "value_norm");
    }
    layers::AttentionOptions o;
    o.scale = 1.0f;  // the learned q/k norms carry the scale
    o.window = y.sliding ? static_cast<int32_t>(c_.window) : 0;
    o.shared_kv = !own;
    kiln_tensor out = layers::paged_attention(g, static_cast<uint32_t>(l), q, k, v, o);
    out = g.reshape(out, {-1, nh * Dh});
    return g.matmul(out, weight(g, Role::attn_output, l));
  }

  /** The dense GeGLU MLP on pre_feedforward_layernorm(x), normed by `post`. */
  kiln_tensor dense(kiln::GraphBuilder& g, kiln_tensor x, int l, Role post) const {
    const kiln_tensor h = g.rms_norm(x, weight(g, Role::ffn_norm, l), c_.norm_eps);
    const kiln_tensor f = layers::glu_mlp(g, h, weight(g, Role::ffn_gate, l), weight(g, Role::ffn_up, l),
                                          weight(g, Role::ffn_down, l), layers::Activation::gelu_tanh);
    return g.rms_norm(f, weight(g, post, l), c_.norm_eps);
  }

  /**
   * 26B-A4B (§2.7): the dense MLP and the routed experts both read the post-attention residual x;
   * each branch has its own norms, and their sum is normed once more.
   */
  kiln_tensor dense_and_experts(kiln::GraphBuilder& g, kiln_tensor x, int l, const std::string& pre) const {
    const kiln_tensor d = dense(g, x, l, Role::post_ffn_norm_1);
    // Router: weightless norm of x times router.scale and H^-½, softmax over every expert, top-k,
    // renormalized, times per_expert_scale.
    kiln_tensor z = g.rms_norm(x, weight(g, Role::moe_router_scale, l), c_.norm_eps);
    z = g.scale(z, 1.0f / std::sqrt(static_cast<float>(c_.n_embd)));
    const kiln_tensor logits = g.matmul(z, weight(g, Role::moe_router, l));
    g.name(logits, pre + "router_logits");
    layers::MoeRouting r;
    r.top_k = static_cast<int32_t>(c_.n_expert_used);
    r.renormalize = true;
    r.expert_scale = weight(g, Role::moe_expert_scale, l);
    const layers::MoeRoute route = layers::moe_route(g, logits, r, pre);
    layers::MoeExperts e;
    e.inter = c_.n_ff_expert;
    e.act = layers::Activation::gelu_tanh;
    if (experts_split_) {
      e.gate = weight(g, Role::moe_gate, l);
      e.up = weight(g, Role::moe_up, l);
    } else {
      e.gate_up = weight(g, Role::moe_gate_up, l);
    }
    e.down = weight(g, Role::moe_down, l);
    const kiln_tensor hm = g.rms_norm(x, weight(g, Role::moe_norm, l), c_.norm_eps);
    kiln_tensor m = layers::moe_experts(g, hm, e, route);
    g.name(m, pre + "moe_output");
    m = g.rms_norm(m, weight(g, Role::post_ffn_norm_2, l), c_.norm_eps);
    return g.rms_norm(g.add(d, m), weight(g, Role::post_ffn_norm, l), c_.norm_eps);
  }

  Config c_;
  kiln::NameTable<Role> names_;
  bool experts_split_ = false;
};

const char* const kModelTypes[] = {"gemma4", "gemma4_text", nullptr};

}  // namespace

kiln_component model_component() {
  return kiln::model<Gemma4Model>("gemma4", kModelTypes, "Gemma 4: E2B, E4B, 26B-A4B, 31B (HF safetensors and GGUF)");
}

}  // namespace gemma4
