// The llama family (llama, qwen2, qwen3, qwen3_moe) as a kiln model plugin: the three things every
// model plugin does — hyperparameters (llama_config.cpp), the tensor table (llama_names.cpp +
// tensors() below) and the forward graph for a ragged batch (build_graph, composed from the SDK's
// kiln/layers.hpp) — plus the per-layer cache kinds. docs/model-host.md walks through this file as
// the SDK guide for model authors.
#include <kiln/layers.hpp>
#include <kiln/plugin.hpp>
#include <string>
#include <vector>

#include "llama_config.hpp"
#include "llama_names.hpp"

namespace llama {
namespace {

class LlamaModel : public kiln::Model {
 public:
  explicit LlamaModel(const kiln::ModelInfo& info) : c_(parse_config(info)), names_(name_table(c_.format)) {}

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
    const int64_t D = c_.n_embd, V = c_.n_vocab, Dh = c_.head_dim;
    const int64_t q_out = c_.n_head * Dh, kv_out = c_.n_head_kv * Dh;
    // Matrices accept any stored dtype (the kernels dequantize); vectors read elementwise are F32,
    // converted by the host at load.
    auto mat = [&](Role r, int l, std::vector<int64_t> shape, bool optional = false) {
      d.push_back({name(r, l), KILN_DTYPE_ANY, std::move(shape), optional, false, 0});
    };
    auto vec = [&](Role r, int l, int64_t n, bool optional = false) {
      d.push_back({name(r, l), KILN_DTYPE_F32, {n}, optional, true, 0});
    };
    auto experts = [&](Role r, int l, std::vector<int64_t> shape) {
      const bool per_expert = names_.per_expert(r);
      if (name(r, l).empty()) return;
      // Either the fused or the per-expert form is present; build_graph uses whichever exists.
      d.push_back({name(r, l), KILN_DTYPE_ANY, std::move(shape), true, false, per_expert ? c_.n_expert : 0u});
    };
    mat(Role::token_embd, -1, {V, D});
    vec(Role::output_norm, -1, D);
    // Tied checkpoints reuse the embedding; GGUF files omit output.weight when tied.
    if (!c_.tied_embeddings) mat(Role::output, -1, {V, D}, c_.format == KILN_CHECKPOINT_GGUF);
    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      vec(Role::attn_norm, l, D);
      mat(Role::attn_q, l, {q_out, D});
      mat(Role::attn_k, l, {kv_out, D});
      mat(Role::attn_v, l, {kv_out, D});
      mat(Role::attn_output, l, {D, q_out});
      if (c_.qkv_bias) {
        vec(Role::attn_q_bias, l, q_out);
        vec(Role::attn_k_bias, l, kv_out);
        vec(Role::attn_v_bias, l, kv_out);
      }
      if (c_.qk_norm) {
        vec(Role::attn_q_norm, l, Dh);
        vec(Role::attn_k_norm, l, Dh);
      }
      vec(Role::ffn_norm, l, D);
      if (c_.moe_layer[static_cast<size_t>(l)]) {
        const int64_t E = c_.n_expert, I = c_.n_ff_expert;
        mat(Role::moe_router, l, {E, D});
        experts(Role::moe_gate_up, l, {E, 2 * I, D});
        experts(Role::moe_down_fused, l, {E, D, I});
        experts(Role::moe_gate, l, {E, I, D});
        experts(Role::moe_up, l, {E, I, D});
        experts(Role::moe_down, l, {E, D, I});
      } else {
        mat(Role::ffn_gate, l, {static_cast<int64_t>(c_.n_ff), D});
        mat(Role::ffn_up, l, {static_cast<int64_t>(c_.n_ff), D});
        mat(Role::ffn_down, l, {D, static_cast<int64_t>(c_.n_ff)});
      }
    }
    return d;
  }

  kiln::LayerCache layer_cache(uint32_t layer) const override {
    kiln::LayerCache lc;
    const uint32_t w = layer < c_.window.size() ? c_.window[layer] : 0;
    lc.kind = w ? KILN_CACHE_SLIDING_KV : KILN_CACHE_FULL_KV;
    lc.window = w;
    lc.n_kv_heads = c_.n_head_kv;
    lc.head_dim_k = lc.head_dim_v = c_.head_dim;
    return lc;
  }

  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc& batch) override {
    (void)batch;  // every shape comes from the inputs; nothing here depends on the batch contents
    const kiln_tensor tokens = g.input("tokens"), positions = g.input("positions");
    const kiln_tensor embd = weight(g, Role::token_embd, -1);

    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {embd, tokens});
    g.name(x, "hidden_state_0");
    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      const std::string pre = "layer_" + std::to_string(l) + ".";
      kiln_tensor h = g.rms_norm(x, weight(g, Role::attn_norm, l), c_.norm_eps);
      g.name(h, pre + "input_norm");
      kiln_tensor a = attention(g, h, l, positions, pre);
      g.name(a, pre + "attention_output");
      x = g.add(x, a);  // the residual add and the next norm run as one dispatch
      h = g.rms_norm(x, weight(g, Role::ffn_norm, l), c_.norm_eps);
      g.name(h, pre + "post_attention_norm");
      kiln_tensor f = c_.moe_layer[static_cast<size_t>(l)]
                          ? moe(g, h, l, pre)
                          : kiln::layers::glu_mlp(g, h, weight(g, Role::ffn_gate, l), weight(g, Role::ffn_up, l),
                                                  weight(g, Role::ffn_down, l));
      x = g.add(x, f);
      g.name(x, pre + "block_output");
    }
    const kiln_tensor out = c_.tied_embeddings ? 0 : g.weight(name(Role::output, -1));
    kiln::layers::lm_head(g, x, weight(g, Role::output_norm, -1), c_.norm_eps, KILN_NORM_WEIGHT, out ? out : embd);
  }

 private:
  std::string name(Role r, int layer) const { return names_(r, layer); }

  kiln_tensor weight(kiln::GraphBuilder& g, Role r, int layer) const {
    const kiln_tensor t = g.weight(name(r, layer));
    if (!t) throw kiln::Error(KILN_ERR_NOT_FOUND, "[llama] weight " + name(r, layer) + " is not loaded");
    return t;
  }

  kiln_tensor project(kiln::GraphBuilder& g, kiln_tensor x, Role w, Role bias, int l) const {
    kiln_tensor y = g.matmul(x, weight(g, w, l));
    if (c_.qkv_bias) y = g.add(y, weight(g, bias, l));
    return y;
  }

  kiln_tensor attention(kiln::GraphBuilder& g, kiln_tensor h, int l, kiln_tensor positions,
                        const std::string& pre) const {
    const int64_t Dh = c_.head_dim;
    kiln_tensor q = g.reshape(project(g, h, Role::attn_q, Role::attn_q_bias, l), {-1, c_.n_head, Dh});
    kiln_tensor k = g.reshape(project(g, h, Role::attn_k, Role::attn_k_bias, l), {-1, c_.n_head_kv, Dh});
    kiln_tensor v = g.reshape(project(g, h, Role::attn_v, Role::attn_v_bias, l), {-1, c_.n_head_kv, Dh});
    // Qwen3: RMSNorm over each head before RoPE (q's pair, then k's: one dispatch on Vulkan).
    if (c_.qk_norm) {
      q = kiln::layers::norm_rope(g, q, weight(g, Role::attn_q_norm, l), c_.norm_eps, KILN_NORM_WEIGHT, positions,
                                  c_.rope_mode, c_.rope_theta);
      k = kiln::layers::norm_rope(g, k, weight(g, Role::attn_k_norm, l), c_.norm_eps, KILN_NORM_WEIGHT, positions,
                                  c_.rope_mode, c_.rope_theta);
    } else {
      q = g.rope(q, positions, c_.rope_mode, c_.rope_theta);
      k = g.rope(k, positions, c_.rope_mode, c_.rope_theta);
    }
    g.name(q, pre + "query_rope");
    g.name(k, pre + "key_rope");
    kiln::layers::AttentionOptions o;
    o.window = static_cast<int32_t>(c_.window[static_cast<size_t>(l)]);
    kiln_tensor out = kiln::layers::paged_attention(g, static_cast<uint32_t>(l), q, k, v, o);
    out = g.reshape(out, {-1, c_.n_head * Dh});
    return g.matmul(out, weight(g, Role::attn_output, l));
  }

  kiln_tensor moe(kiln::GraphBuilder& g, kiln_tensor h, int l, const std::string& pre) const {
    kiln::layers::MoeRouting r;
    r.top_k = static_cast<int32_t>(c_.n_expert_used);
    r.renormalize = c_.norm_topk;
    kiln::layers::MoeExperts e;
    e.inter = c_.n_ff_expert;
    e.gate_up = g.weight(name(Role::moe_gate_up, l));
    if (!e.gate_up) {
      e.gate = expert_weight(g, Role::moe_gate, l);
      e.up = expert_weight(g, Role::moe_up, l);
    }
    e.down = g.weight(name(Role::moe_down_fused, l));
    if (!e.down) e.down = expert_weight(g, Role::moe_down, l);
    return kiln::layers::moe(g, h, weight(g, Role::moe_router, l), r, e, pre);
  }

  kiln_tensor expert_weight(kiln::GraphBuilder& g, Role r, int l) const {
    const kiln_tensor t = name(r, l).empty() ? 0 : g.weight(name(r, l));
    if (!t)
      throw kiln::Error(KILN_ERR_NOT_FOUND,
                        "[llama] layer " + std::to_string(l) + ": the checkpoint has neither fused expert tensors (" +
                            name(Role::moe_gate_up, l) + ") nor per-expert ones (" + name(r, l) + ")");
    return t;
  }

  Config c_;
  kiln::NameTable<Role> names_;
};

}  // namespace

const char* const kModelTypes[] = {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3moe", nullptr};

}  // namespace llama

KILN_PLUGIN(llama, "0.1.0",
            kiln::model<llama::LlamaModel>("llama", llama::kModelTypes,
                                           "llama, qwen2, qwen3, qwen3_moe (HF safetensors and GGUF)"))
