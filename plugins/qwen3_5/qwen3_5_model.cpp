// Qwen3.5 (dense and MoE) and Qwen3-Next as a kiln model: three of every four layers Gated DeltaNet
// (recurrent state: the conv window and the delta-rule matrix per sequence), the rest gated full
// attention, each followed by a dense SwiGLU MLP or a sparse MoE with a sigmoid-gated shared expert.
// The forward pass follows shared/docs/models/qwen3_5.md §2; tests/reference/qwen3_5_reference.py
// is its independent check.
#include "qwen3_5_model.hpp"

#include <cmath>
#include <cstdlib>
#include <kiln/layers.hpp>
#include <kiln/plugin.hpp>
#include <string>
#include <vector>

#include "qwen3_5_config.hpp"
#include "qwen3_5_names.hpp"

namespace qwen3_5 {
namespace {

namespace layers = kiln::layers;

class Qwen35Model : public kiln::Model {
 public:
  explicit Qwen35Model(const kiln::ModelInfo& info) : c_(parse_config(info)), names_(name_table(c_.format)) {
    if (c_.format == KILN_CHECKPOINT_HF && info.has_prefix("model.language_model."))
      names_.rewrite_prefix("model.", "model.language_model.");
    tied_ = c_.format == KILN_CHECKPOINT_GGUF ? !info.has(name(Role::output, -1)) : c_.tied;
    for (uint32_t l = 0; l < c_.n_layers; ++l) {
      const int li = static_cast<int>(l);
      if (c_.layers[l].linear) {
        fused_qkvz_ = !info.has(name(Role::lin_qkv, li)) && info.has(name(Role::lin_qkvz, li));
        fused_ba_ = !info.has(name(Role::lin_b, li)) && info.has(name(Role::lin_ba, li));
      }
      if (c_.layers[l].moe) experts_fused_ = info.has(name(Role::moe_gate_up, li));
    }
    // MTP weights (HF "mtp.*", GGUF blocks past the trunk) are read and kept for speculative
    // decoding, which does not run them yet. Matrices stay in the mapped file (host-resident): a
    // whole MoE layer on the device would come out of the cache memory for nothing.
    for (const kiln::CheckpointTensor& t : info.tensors)
      if ((t.name.substr(0, 4) == "mtp." || mtp_block(t.name)) && t.dtype != KILN_DTYPE_ANY)
        mtp_.push_back({std::string(t.name), t.shape});
    // llama.cpp stores the zero-centred norms as 1 + w.
    norm_mode_ = c_.norms_shifted ? KILN_NORM_WEIGHT : KILN_NORM_ONE_PLUS;
  }

  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = c_.n_layers;
    h.n_vocab = c_.n_vocab;
    h.n_embd = c_.n_embd;
    h.max_context = c_.max_context;
    h.bos_token = c_.bos_token;
    h.architecture = c_.arch_name;
    return h;
  }

  std::vector<kiln::TensorDecl> tensors() const override {
    std::vector<kiln::TensorDecl> d;
    const int64_t H = c_.n_embd, V = c_.n_vocab;
    auto mat = [&](Role r, int l, std::vector<int64_t> shape, uint32_t stack = 0) {
      d.push_back({name(r, l), KILN_DTYPE_ANY, std::move(shape), false, false, stack});
    };
    // Vectors and small tables read elementwise: F32 whatever the storage (A_log and the gated norm
    // are F32 in the releases, the rest BF16).
    auto vec = [&](Role r, int l, std::vector<int64_t> shape) {
      d.push_back({name(r, l), KILN_DTYPE_F32, std::move(shape), false, true, 0});
    };
    mat(Role::token_embd, -1, {V, H});
    vec(Role::output_norm, -1, {H});
    if (!tied_) mat(Role::output, -1, {V, H});
    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      const Layer& y = c_.layers[static_cast<size_t>(l)];
      vec(Role::attn_norm, l, {H});
      if (y.linear) {
        const int64_t kd = c_.key_dim(), vd = c_.value_dim(), hv = c_.v_heads;
        // The projections together: one weight arena, one dispatch.
        if (fused_qkvz_) {
          mat(Role::lin_qkvz, l, {2 * kd + 2 * vd, H});
        } else {
          mat(Role::lin_qkv, l, {2 * kd + vd, H});
          mat(Role::lin_z, l, {vd, H});
        }
        if (fused_ba_) {
          mat(Role::lin_ba, l, {2 * hv, H});
        } else {
          mat(Role::lin_b, l, {hv, H});
          mat(Role::lin_a, l, {hv, H});
        }
        if (c_.format == KILN_CHECKPOINT_GGUF)
          vec(Role::lin_conv, l, {c_.conv_dim(), c_.conv_kernel});
        else
          vec(Role::lin_conv, l, {c_.conv_dim(), 1, c_.conv_kernel});
        vec(Role::lin_a_log, l, {hv});
        vec(Role::lin_dt_bias, l, {hv});
        vec(Role::lin_norm, l, {c_.v_dim});
        mat(Role::lin_out, l, {H, vd});
      } else {
        const int64_t D = c_.head_dim;
        mat(Role::attn_q, l, {c_.n_head * D * (c_.attn_gate ? 2 : 1), H});
        mat(Role::attn_k, l, {c_.n_head_kv * D, H});
        mat(Role::attn_v, l, {c_.n_head_kv * D, H});
        mat(Role::attn_output, l, {H, c_.n_head * D});
        vec(Role::attn_q_norm, l, {D});
        vec(Role::attn_k_norm, l, {D});
      }
      vec(Role::ffn_norm, l, {H});
      if (y.moe) {
        const int64_t E = c_.n_expert, I = c_.n_ff_expert, S = c_.n_ff_shared;
        mat(Role::moe_router, l, {E, H});
        if (experts_fused_) {
          mat(Role::moe_gate_up, l, {E, 2 * I, H});
          mat(Role::moe_down_fused, l, {E, H, I});
        } else {
          // Per-expert HF tensors are stacked by the host into [E, ...]; GGUF stores them stacked.
          const uint32_t n = names_.per_expert(Role::moe_gate) ? c_.n_expert : 0u;
          mat(Role::moe_gate, l, {E, I, H}, n);
          mat(Role::moe_up, l, {E, I, H}, n);
          const Role down = names_.per_expert(Role::moe_down) ? Role::moe_down : Role::moe_down_fused;
          mat(down, l, {E, H, I}, names_.per_expert(Role::moe_down) ? c_.n_expert : 0u);
        }
        mat(Role::shexp_gate, l, {S, H});
        mat(Role::shexp_up, l, {S, H});
        mat(Role::shexp_down, l, {H, S});
        mat(Role::shexp_router, l,
            c_.format == KILN_CHECKPOINT_GGUF ? std::vector<int64_t>{H} : std::vector<int64_t>{1, H});
      } else {
        mat(Role::ffn_gate, l, {c_.n_ff, H});
        mat(Role::ffn_up, l, {c_.n_ff, H});
        mat(Role::ffn_down, l, {H, c_.n_ff});
      }
    }
    for (const auto& [n, shape] : mtp_)
      d.push_back({n, shape.size() >= 2 ? KILN_DTYPE_ANY : KILN_DTYPE_F32, shape, true, shape.size() < 2, 0,
                   shape.size() >= 2 ? KILN_TENSOR_HOST : 0u});
    return d;
  }

  kiln::LayerCache layer_cache(uint32_t l) const override {
    kiln::LayerCache lc;
    if (c_.layers[l].linear) {
      lc.kind = KILN_CACHE_RECURRENT;
      // The conv's last K-1 inputs and the delta rule's [H_v, d_k, d_v] matrix, both f32.
      lc.state_shapes = {{c_.conv_kernel - 1, c_.conv_dim()}, {c_.v_heads, c_.k_dim, c_.v_dim}};
      return lc;
    }
    lc.kind = KILN_CACHE_FULL_KV;
    lc.n_kv_heads = c_.n_head_kv;
    lc.head_dim_k = lc.head_dim_v = c_.head_dim;
    return lc;
  }

  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc& batch) override {
    (void)batch;  // every shape comes from the inputs
    const kiln_tensor tokens = g.input("tokens"), positions = g.input("positions");
    const kiln_tensor embd = weight(g, Role::token_embd, -1);
    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {embd, tokens});
    g.name(x, "hidden_state_0");
    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      const Layer& y = c_.layers[static_cast<size_t>(l)];
      const std::string pre = "layer_" + std::to_string(l) + ".";
      kiln_tensor h = g.rms_norm(x, weight(g, Role::attn_norm, l), c_.norm_eps, norm_mode_);
      const kiln_tensor mix = y.linear ? delta_net(g, h, l) : attention(g, h, l, positions);
      g.name(mix, pre + (y.linear ? "linear_attn_output" : "attention_output"));
      x = g.add(x, mix);
      h = g.rms_norm(x, weight(g, Role::ffn_norm, l), c_.norm_eps, norm_mode_);
      x = g.add(x, y.moe ? moe(g, h, l, pre)
                         : layers::glu_mlp(g, h, weight(g, Role::ffn_gate, l), weight(g, Role::ffn_up, l),
                                           weight(g, Role::ffn_down, l)));
      g.name(x, pre + "block_output");
    }
    layers::lm_head(g, x, weight(g, Role::output_norm, -1), c_.norm_eps, norm_mode_,
                    tied_ ? embd : weight(g, Role::output, -1));
  }

 private:
  std::string name(Role r, int l) const { return names_(r, l); }

  kiln_tensor weight(kiln::GraphBuilder& g, Role r, int l) const {
    const kiln_tensor t = g.weight(name(r, l));
    if (!t) throw kiln::Error(KILN_ERR_NOT_FOUND, "[qwen3_5] weight " + name(r, l) + " is not loaded");
    return t;
  }

  /** Gated full attention (§2.3): per-head [query | gate], q/k norms, partial RoPE, sigmoid gate. */
  kiln_tensor attention(kiln::GraphBuilder& g, kiln_tensor h, int l, kiln_tensor positions) const {
    const int64_t D = c_.head_dim, nh = c_.n_head, nkv = c_.n_head_kv;
    kiln_tensor qg = g.matmul(h, weight(g, Role::attn_q, l));
    kiln_tensor k = g.matmul(h, weight(g, Role::attn_k, l));
    kiln_tensor v = g.matmul(h, weight(g, Role::attn_v, l));
    kiln_tensor q = qg, gate = 0;
    if (c_.attn_gate) {
      qg = g.reshape(qg, {-1, nh, 2 * D});
      q = g.slice(qg, -1, 0, D);
      gate = g.reshape(g.slice(qg, -1, D, 2 * D), {-1, nh * D});
    }
    q = g.reshape(q, {-1, nh, D});
    k = g.reshape(k, {-1, nkv, D});
    v = g.reshape(v, {-1, nkv, D});
    const auto rope_dims = static_cast<int32_t>(c_.rope_dims);
    q = layers::norm_rope(g, q, weight(g, Role::attn_q_norm, l), c_.norm_eps, norm_mode_, positions, KILN_ROPE_NEOX,
                          c_.rope_theta, rope_dims);
    k = layers::norm_rope(g, k, weight(g, Role::attn_k_norm, l), c_.norm_eps, norm_mode_, positions, KILN_ROPE_NEOX,
                          c_.rope_theta, rope_dims);
    kiln_tensor o = g.reshape(layers::paged_attention(g, static_cast<uint32_t>(l), q, k, v), {-1, nh * D});
    if (gate) o = g.mul(o, g.unary(KILN_OP_SIGMOID, gate));
    return g.matmul(o, weight(g, Role::attn_output, l));
  }

  /** Gated DeltaNet (§2.5): projections, causal conv + SiLU, L2-normed q/k, gates, delta rule, gated norm. */
  kiln_tensor delta_net(kiln::GraphBuilder& g, kiln_tensor h, int l) const {
    const int64_t kd = c_.key_dim(), vd = c_.value_dim(), hk = c_.k_heads, hv = c_.v_heads;
    const int64_t dk = c_.k_dim, dv = c_.v_dim, R = hv / hk;
    kiln_tensor qkv, z, b, a;
    // Qwen3-Next groups the projections by key head: [q_g | k_g | v_g (R heads) | z_g (R heads)]
    // and [b_g (R) | a_g (R)]. Ungrouped here into Qwen3.5's order: q | k | v for the conv.
    if (fused_qkvz_) {
      const kiln_tensor all = g.reshape(g.matmul(h, weight(g, Role::lin_qkvz, l)), {-1, hk, 2 * dk + 2 * R * dv});
      const kiln_tensor q = g.reshape(g.slice(all, -1, 0, dk), {-1, kd});
      const kiln_tensor k = g.reshape(g.slice(all, -1, dk, 2 * dk), {-1, kd});
      const kiln_tensor v = g.reshape(g.slice(all, -1, 2 * dk, 2 * dk + R * dv), {-1, vd});
      z = g.reshape(g.slice(all, -1, 2 * dk + R * dv, 2 * dk + 2 * R * dv), {-1, vd});
      qkv = concat(g, concat(g, q, k, -1), v, -1);
    } else {
      qkv = g.matmul(h, weight(g, Role::lin_qkv, l));
      z = g.matmul(h, weight(g, Role::lin_z, l));
    }
    if (fused_ba_) {
      const kiln_tensor ba = g.reshape(g.matmul(h, weight(g, Role::lin_ba, l)), {-1, hk, 2 * R});
      b = g.reshape(g.slice(ba, -1, 0, R), {-1, hv});
      a = g.reshape(g.slice(ba, -1, R, 2 * R), {-1, hv});
    } else {
      b = g.matmul(h, weight(g, Role::lin_b, l));
      a = g.matmul(h, weight(g, Role::lin_a, l));
    }
    const kiln_tensor conv_w = g.reshape(weight(g, Role::lin_conv, l), {c_.conv_dim(), c_.conv_kernel});
    const kiln_tensor mixed = g.unary(KILN_OP_SILU, layers::causal_conv(g, static_cast<uint32_t>(l), qkv, conv_w));
    kiln_tensor q = g.reshape(g.slice(mixed, -1, 0, kd), {-1, hk, dk});
    kiln_tensor k = g.reshape(g.slice(mixed, -1, kd, 2 * kd), {-1, hk, dk});
    const kiln_tensor v = g.reshape(g.slice(mixed, -1, 2 * kd, 2 * kd + vd), {-1, hv, dv});
    q = g.scale(g.l2_norm(q, 1e-6f), 1.0f / std::sqrt(static_cast<float>(dk)));
    k = g.l2_norm(k, 1e-6f);
    if (c_.tiled_heads) {
      // llama.cpp's qwen35 GGUFs order value heads r·H_k + g (value head h reads key head h % H_k);
      // repeating q and k R times along the heads gives each value head its key head in that order.
      kiln_tensor qr = q, kr = k;
      for (int64_t r = 1; r < R; ++r) qr = concat(g, qr, q, 1), kr = concat(g, kr, k, 1);
      q = qr, k = kr;
    }
    const kiln_tensor beta = g.unary(KILN_OP_SIGMOID, b);
    // g = -exp(A_log) · softplus(a + dt_bias): the log decay per token and value head.
    const kiln_tensor a_log = weight(g, Role::lin_a_log, l);
    const kiln_tensor decay = c_.stored_decay ? a_log : g.scale(g.unary(KILN_OP_EXP, a_log), -1.0f);
    const kiln_tensor gate = g.mul(g.unary(KILN_OP_SOFTPLUS, g.add(a, weight(g, Role::lin_dt_bias, l))), decay);
    kiln_tensor o = layers::gated_delta(g, static_cast<uint32_t>(l), q, k, v, gate, beta);
    o = g.rms_norm(o, weight(g, Role::lin_norm, l), c_.norm_eps, KILN_NORM_GATED, g.reshape(z, {-1, hv, dv}));
    return g.matmul(g.reshape(o, {-1, vd}), weight(g, Role::lin_out, l));
  }

  /** GGUF: a tensor of an MTP block (blk.N with N past the trunk). */
  bool mtp_block(std::string_view n) const {
    if (c_.format != KILN_CHECKPOINT_GGUF || n.substr(0, 4) != "blk.") return false;
    return static_cast<uint32_t>(std::atoi(std::string(n.substr(4)).c_str())) >= c_.n_layers;
  }

  static kiln_tensor concat(kiln::GraphBuilder& g, kiln_tensor a, kiln_tensor b, int32_t axis) {
    kiln_op_params p{};
    p.axis = axis;
    return g.op(KILN_OP_CONCAT, {a, b}, p);
  }

  /** Sparse MoE (§2.7): routed experts plus the shared expert scaled by sigmoid(x · w_sg). */
  kiln_tensor moe(kiln::GraphBuilder& g, kiln_tensor h, int l, const std::string& pre) const {
    layers::MoeRouting r;
    r.top_k = static_cast<int32_t>(c_.n_expert_used);
    r.renormalize = c_.norm_topk;
    layers::MoeExperts e;
    e.inter = c_.n_ff_expert;
    if (experts_fused_) {
      e.gate_up = weight(g, Role::moe_gate_up, l);
      e.down = weight(g, Role::moe_down_fused, l);
    } else {
      e.gate = weight(g, Role::moe_gate, l);
      e.up = weight(g, Role::moe_up, l);
      e.down = weight(g, names_.per_expert(Role::moe_down) ? Role::moe_down : Role::moe_down_fused, l);
    }
    const kiln_tensor routed = layers::moe(g, h, weight(g, Role::moe_router, l), r, e, pre);
    const kiln_tensor shared = layers::glu_mlp(g, h, weight(g, Role::shexp_gate, l), weight(g, Role::shexp_up, l),
                                               weight(g, Role::shexp_down, l));
    const kiln_tensor router = g.reshape(weight(g, Role::shexp_router, l), {1, c_.n_embd});  // GGUF: [H]
    const kiln_tensor shared_gate = g.unary(KILN_OP_SIGMOID, g.matmul(h, router));
    return g.add(routed, g.mul(shared, shared_gate));
  }

  Config c_;
  kiln::NameTable<Role> names_;
  bool tied_ = false, fused_qkvz_ = false, fused_ba_ = false, experts_fused_ = false;
  kiln_norm_mode norm_mode_ = KILN_NORM_ONE_PLUS;
  std::vector<std::pair<std::string, std::vector<int64_t>>> mtp_;  ///< kept, not run
};

const char* const kModelTypes[] = {"qwen3_5",          "qwen3_5_text", "qwen3_5_moe",
                                   "qwen3_5_moe_text", "qwen3_next",   "qwen35",
                                   "qwen35moe",        "qwen3next",    nullptr};

}  // namespace

kiln_component model_component() {
  return kiln::model<Qwen35Model>("qwen3_5", kModelTypes, "Qwen3.5, Qwen3.5-MoE, Qwen3-Next (HF safetensors and GGUF)");
}

}  // namespace qwen3_5
