// The llama family (llama, qwen2, qwen3, qwen3_moe) as a kiln model plugin: the three things every
// model plugin does — hyperparameters (llama_config.cpp), the tensor table (llama_names.cpp +
// tensors() below) and the forward graph for a ragged batch (build_graph) — plus the per-layer
// cache kinds. docs/model-host.md walks through this file as the SDK guide for model authors.
#include <kiln/plugin.hpp>
#include <string>
#include <vector>

#include "llama_config.hpp"
#include "llama_names.hpp"

namespace llama {
namespace {

class LlamaModel : public kiln::Model {
 public:
  explicit LlamaModel(const kiln::ModelInfo& info) : c_(parse_config(info)) {}

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
      const bool per_expert = is_per_expert(r, c_.format);
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
    const kiln_tensor seqs = g.input("seqs"), rows = g.input("logits_rows");
    const kiln_tensor embd = weight(g, Role::token_embd, -1);

    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {embd, tokens});
    g.name(x, "hidden_state_0");
    for (int l = 0; l < static_cast<int>(c_.n_layers); ++l) {
      const std::string pre = "layer_" + std::to_string(l) + ".";
      kiln_tensor h = norm(g, x, weight(g, Role::attn_norm, l));
      g.name(h, pre + "input_norm");
      kiln_tensor a = attention(g, h, l, positions, seqs, pre);
      g.name(a, pre + "attention_output");
      x = g.op(KILN_OP_ADD, {x, a});
      h = norm(g, x, weight(g, Role::ffn_norm, l));
      g.name(h, pre + "post_attention_norm");
      kiln_tensor f = c_.moe_layer[static_cast<size_t>(l)] ? moe(g, h, l, pre) : mlp(g, h, l);
      x = g.op(KILN_OP_ADD, {x, f});
      g.name(x, pre + "block_output");
    }
    // Only the rows whose logits are wanted go through the final norm and the output matrix.
    x = g.op(KILN_OP_GET_ROWS, {x, rows});
    x = norm(g, x, weight(g, Role::output_norm, -1));
    g.name(x, "final_norm");
    kiln_tensor out = c_.tied_embeddings ? 0 : g.weight(name(Role::output, -1));
    kiln_tensor logits = g.op(KILN_OP_MATMUL, {x, out ? out : embd});
    g.name(logits, "final_logits");
    g.output(logits);
  }

 private:
  std::string name(Role r, int layer) const { return tensor_name(r, layer, c_.format); }

  kiln_tensor weight(kiln::GraphBuilder& g, Role r, int layer) const {
    const kiln_tensor t = g.weight(name(r, layer));
    if (!t) throw kiln::Error(KILN_ERR_NOT_FOUND, "[llama] weight " + name(r, layer) + " is not loaded");
    return t;
  }

  kiln_tensor norm(kiln::GraphBuilder& g, kiln_tensor x, kiln_tensor w) const {
    kiln_op_params p{};
    p.eps = c_.norm_eps;
    p.mode = KILN_NORM_WEIGHT;
    return g.op(KILN_OP_RMS_NORM, {x, w}, p);
  }

  static kiln_tensor reshape(kiln::GraphBuilder& g, kiln_tensor x, std::initializer_list<int64_t> shape) {
    kiln_op_params p{};
    p.ndim = static_cast<uint32_t>(shape.size());
    size_t i = 0;
    for (int64_t s : shape) p.shape[i++] = s;
    return g.op(KILN_OP_RESHAPE, {x}, p);
  }

  kiln_tensor project(kiln::GraphBuilder& g, kiln_tensor x, Role w, Role bias, int l) const {
    kiln_tensor y = g.op(KILN_OP_MATMUL, {x, weight(g, w, l)});
    if (c_.qkv_bias) y = g.op(KILN_OP_ADD, {y, weight(g, bias, l)});
    return y;
  }

  kiln_tensor rope(kiln::GraphBuilder& g, kiln_tensor x, kiln_tensor positions) const {
    kiln_op_params p{};
    p.mode = c_.rope_mode;
    p.theta = c_.rope_theta;
    return g.op(KILN_OP_ROPE, {x, positions}, p);
  }

  kiln_tensor attention(kiln::GraphBuilder& g, kiln_tensor h, int l, kiln_tensor positions, kiln_tensor seqs,
                        const std::string& pre) const {
    const int64_t Dh = c_.head_dim;
    kiln_tensor q = reshape(g, project(g, h, Role::attn_q, Role::attn_q_bias, l), {-1, c_.n_head, Dh});
    kiln_tensor k = reshape(g, project(g, h, Role::attn_k, Role::attn_k_bias, l), {-1, c_.n_head_kv, Dh});
    kiln_tensor v = reshape(g, project(g, h, Role::attn_v, Role::attn_v_bias, l), {-1, c_.n_head_kv, Dh});
    // Qwen3: RMSNorm over each head before RoPE. Each norm right before its RoPE: a backend may
    // run the pair as one dispatch.
    if (c_.qk_norm) q = norm(g, q, weight(g, Role::attn_q_norm, l));
    q = rope(g, q, positions);
    if (c_.qk_norm) k = norm(g, k, weight(g, Role::attn_k_norm, l));
    k = rope(g, k, positions);
    g.name(q, pre + "query_rope");
    g.name(k, pre + "key_rope");
    // Write this step's K/V into the layer's cache blocks, then attend over the cache.
    const auto layer = static_cast<uint32_t>(l);
    const kiln_tensor slots = g.cache(layer, "slots");
    const kiln_tensor kc = g.op(KILN_OP_SET_ROWS, {g.cache(layer, "k"), k, slots});
    const kiln_tensor vc = g.op(KILN_OP_SET_ROWS, {g.cache(layer, "v"), v, slots});
    kiln_op_params p{};
    p.window = static_cast<int32_t>(c_.window[static_cast<size_t>(l)]);
    kiln_tensor o = g.op(KILN_OP_ATTENTION, {q, kc, vc, g.cache(layer, "block_table"), seqs}, p);
    o = reshape(g, o, {-1, c_.n_head * Dh});
    return g.op(KILN_OP_MATMUL, {o, weight(g, Role::attn_output, l)});
  }

  kiln_tensor mlp(kiln::GraphBuilder& g, kiln_tensor h, int l) const {
    // gate and up back to back: a backend may run sibling matmuls (same input) as one dispatch.
    kiln_tensor gate = g.op(KILN_OP_MATMUL, {h, weight(g, Role::ffn_gate, l)});
    kiln_tensor up = g.op(KILN_OP_MATMUL, {h, weight(g, Role::ffn_up, l)});
    return g.op(KILN_OP_MATMUL, {g.op(KILN_OP_MUL, {g.op(KILN_OP_SILU, {gate}), up}), weight(g, Role::ffn_down, l)});
  }

  kiln_tensor moe(kiln::GraphBuilder& g, kiln_tensor h, int l, const std::string& pre) const {
    const int64_t I = c_.n_ff_expert;
    kiln_tensor logits = g.op(KILN_OP_MATMUL, {h, weight(g, Role::moe_router, l)});
    g.name(logits, pre + "router_logits");
    kiln_op_params pk{};
    pk.k = static_cast<int32_t>(c_.n_expert_used);
    kiln_tensor ids = g.op(KILN_OP_TOP_K, {logits}, pk);  // top-k of logits = top-k of softmax
    g.name(ids, pre + "selected_experts");
    kiln_op_params pw{};
    pw.mode = c_.norm_topk ? static_cast<int32_t>(KILN_MOE_RENORMALIZE) : 0;
    kiln_tensor w = g.op(KILN_OP_MOE_WEIGHTS, {logits, ids}, pw);
    g.name(w, pre + "routing_weights");

    kiln_tensor gate, up;
    if (kiln_tensor gu = g.weight(name(Role::moe_gate_up, l))) {
      kiln_tensor both = g.op(KILN_OP_MOE_MATMUL, {h, gu, ids});  // [N, k, 2I]: gate half, then up half
      kiln_op_params s{};
      s.axis = -1;
      s.begin = 0;
      s.end = I;
      gate = g.op(KILN_OP_SLICE, {both}, s);
      s.begin = I;
      s.end = 2 * I;
      up = g.op(KILN_OP_SLICE, {both}, s);
    } else {
      gate = g.op(KILN_OP_MOE_MATMUL, {h, expert_weight(g, Role::moe_gate, l), ids});
      up = g.op(KILN_OP_MOE_MATMUL, {h, expert_weight(g, Role::moe_up, l), ids});
    }
    kiln_tensor act = g.op(KILN_OP_MUL, {g.op(KILN_OP_SILU, {gate}), up});
    kiln_tensor down = g.weight(name(Role::moe_down_fused, l));
    if (!down) down = expert_weight(g, Role::moe_down, l);
    kiln_tensor y = g.op(KILN_OP_MOE_MATMUL, {act, down, ids});  // [N, k, D]
    kiln_tensor out = g.op(KILN_OP_MOE_SUM, {y, w});
    g.name(out, pre + "moe_output");
    return out;
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
};

const char* const kModelTypes[] = {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3moe", nullptr};

}  // namespace
}  // namespace llama

KILN_PLUGIN(llama, "0.1.0",
            kiln::model<llama::LlamaModel>("llama", llama::kModelTypes,
                                           "llama, qwen2, qwen3, qwen3_moe (HF safetensors and GGUF)"))
