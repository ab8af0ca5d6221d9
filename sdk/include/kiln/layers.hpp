/**
 * @file layers.hpp
 * @brief Building blocks for model plugins' graphs: attention over the host's paged cache, GLU
 *        MLPs, mixture-of-experts routing and experts, the recurrent ops with their state, and the
 *        output head. Each emits its ops in the order the Vulkan backend fuses (docs/model-host.md,
 *        "Fusion order"), so a plugin composing them gets those fusions without knowing them.
 *
 * Every function takes the GraphBuilder of build_graph and returns the result tensor; names given
 * in `name` (for golden dumps) are optional.
 */
#pragma once

#include <kiln/kiln_plugin.h>

#include <kiln/graph.hpp>
#include <string>

namespace kiln::layers {

/** Element-wise activation of a GLU's gate. */
enum class Activation { silu, gelu_tanh };

inline kiln_op activation_op(Activation a) {
  return a == Activation::silu ? KILN_OP_SILU : KILN_OP_GELU_TANH;
}

// ------------------------------------------------------------------------------------------------
// Attention over the paged KV cache.

struct AttentionOptions {
  float scale = 0.0f;    ///< 0: 1/sqrt(Dk) (Gemma 4: 1.0)
  float softcap = 0.0f;  ///< logit softcap (0: none)
  int32_t window = 0;    ///< sliding-window layers: keys a query sees, itself included (0: all)
  /** The layer reads another layer's cache (LayerCache::shares_with): k and v are not written. */
  bool shared_kv = false;
};

/**
 * This step's keys and values into `layer`'s cache blocks, then attention of `q` over the cache:
 * q [N, Hq, Dk], k [N, Hkv, Dk], v [N, Hkv, Dv] (RoPE and norms applied) -> [N, Hq, Dv]. The two
 * cache writes come back to back (one dispatch on Vulkan), and the attention reads their results,
 * which orders the write before the read.
 */
inline kiln_tensor paged_attention(GraphBuilder& g, uint32_t layer, kiln_tensor q, kiln_tensor k, kiln_tensor v,
                                   const AttentionOptions& o = {}) {
  kiln_tensor kc = g.cache(layer, "k"), vc = g.cache(layer, "v");
  if (!kc || !vc) throw Error(KILN_ERR_NOT_FOUND, "layer " + std::to_string(layer) + " has no KV cache");
  if (!o.shared_kv) {
    const kiln_tensor slots = g.cache(layer, "slots");
    kc = g.op(KILN_OP_SET_ROWS, {kc, k, slots});
    vc = g.op(KILN_OP_SET_ROWS, {vc, v, slots});
  }
  kiln_op_params p{};
  p.scale = o.scale;
  p.cap = o.softcap;
  p.window = o.window;
  return g.op(KILN_OP_ATTENTION, {q, kc, vc, g.cache(layer, "block_table"), g.input("seqs")}, p);
}

/**
 * RMS norm over each head (Qwen3's and Gemma 4's q/k norms) followed by RoPE, back to back so the
 * backend runs the pair as one dispatch. For q and k, call it for q, then for k: two such pairs in
 * a row are one dispatch too. `w` 0 with mode KILN_NORM_NONE (Gemma 4's v norm has no RoPE: use
 * GraphBuilder::rms_norm).
 */
inline kiln_tensor norm_rope(GraphBuilder& g, kiln_tensor x, kiln_tensor w, float eps, kiln_norm_mode mode,
                             kiln_tensor positions, kiln_rope_mode rope_mode, float theta, int32_t n_dims = 0,
                             int32_t n_freq = 0) {
  return g.rope(g.rms_norm(x, w, eps, mode), positions, rope_mode, theta, n_dims, n_freq);
}

// ------------------------------------------------------------------------------------------------
// MLPs.

/** down(act(x·gateᵀ) ⊙ x·upᵀ): gate and up back to back (sibling matmuls, one dispatch). */
inline kiln_tensor glu_mlp(GraphBuilder& g, kiln_tensor x, kiln_tensor gate, kiln_tensor up, kiln_tensor down,
                           Activation act = Activation::silu) {
  const kiln_tensor a = g.matmul(x, gate), b = g.matmul(x, up);
  return g.matmul(g.mul(g.unary(activation_op(act), a), b), down);
}

/** glu_mlp with gate and up fused in one [2I, D] matrix, gate rows first. */
inline kiln_tensor glu_mlp_fused(GraphBuilder& g, kiln_tensor x, kiln_tensor gate_up, kiln_tensor down, int64_t inter,
                                 Activation act = Activation::silu) {
  const kiln_tensor both = g.matmul(x, gate_up);
  const kiln_tensor a = g.slice(both, -1, 0, inter), b = g.slice(both, -1, inter, 2 * inter);
  return g.matmul(g.mul(g.unary(activation_op(act), a), b), down);
}

// ------------------------------------------------------------------------------------------------
// Mixture of experts.

struct MoeRouting {
  int32_t top_k = 0;
  bool renormalize = true;       ///< the top-k weights sum to 1 (Qwen3, Qwen3.5); false: plain softmax
  kiln_tensor expert_scale = 0;  ///< f32 [E] multiplied into each chosen weight (Gemma 4), or 0
};

struct MoeRoute {
  kiln_tensor ids = 0;      ///< i32 [N, k]: chosen experts, best first (ties to the lower index)
  kiln_tensor weights = 0;  ///< f32 [N, k]
};

/**
 * Top-k experts of router `logits` [N, E] and their weights: softmax over all E in f32, the chosen
 * k gathered, renormalized and scaled as `r` says. Named `<name>selected_experts` and
 * `<name>routing_weights` when `name` is given.
 */
inline MoeRoute moe_route(GraphBuilder& g, kiln_tensor logits, const MoeRouting& r, const std::string& name = "") {
  kiln_op_params pk{};
  pk.k = r.top_k;
  MoeRoute out;
  out.ids = g.op(KILN_OP_TOP_K, {logits}, pk);  // top-k of the logits = top-k of their softmax
  kiln_op_params pw{};
  pw.mode = r.renormalize ? static_cast<int32_t>(KILN_MOE_RENORMALIZE) : 0;
  out.weights = r.expert_scale ? g.op(KILN_OP_MOE_WEIGHTS, {logits, out.ids, r.expert_scale}, pw)
                               : g.op(KILN_OP_MOE_WEIGHTS, {logits, out.ids}, pw);
  if (!name.empty()) {
    g.name(out.ids, name + "selected_experts");
    g.name(out.weights, name + "routing_weights");
  }
  return out;
}

/** Expert matrices: gate and up fused as [E, 2I, D] (gate rows first) or apart as [E, I, D]. */
struct MoeExperts {
  kiln_tensor gate_up = 0;
  kiln_tensor gate = 0, up = 0;
  kiln_tensor down = 0;  ///< [E, D, I]
  int64_t inter = 0;     ///< I
  Activation act = Activation::silu;
};

/** Σ_j w[n, j] · down_e(act(gate_e x) ⊙ up_e x) over the chosen experts e = ids[n, j]. */
inline kiln_tensor moe_experts(GraphBuilder& g, kiln_tensor x, const MoeExperts& e, const MoeRoute& route) {
  kiln_tensor a, b;
  if (e.gate_up) {
    const kiln_tensor both = g.op(KILN_OP_MOE_MATMUL, {x, e.gate_up, route.ids});  // [N, k, 2I]
    a = g.slice(both, -1, 0, e.inter);
    b = g.slice(both, -1, e.inter, 2 * e.inter);
  } else {
    if (!e.gate || !e.up) throw Error(KILN_ERR_NOT_FOUND, "moe_experts: neither fused gate_up nor gate and up");
    a = g.op(KILN_OP_MOE_MATMUL, {x, e.gate, route.ids});
    b = g.op(KILN_OP_MOE_MATMUL, {x, e.up, route.ids});
  }
  const kiln_tensor y = g.op(KILN_OP_MOE_MATMUL, {g.mul(g.unary(activation_op(e.act), a), b), e.down, route.ids});
  return g.op(KILN_OP_MOE_SUM, {y, route.weights});
}

/** Router matmul, routing and experts: a whole sparse MoE block (`name` prefixes the dump names). */
inline kiln_tensor moe(GraphBuilder& g, kiln_tensor x, kiln_tensor router, const MoeRouting& r, const MoeExperts& e,
                       const std::string& name = "") {
  const kiln_tensor logits = g.matmul(x, router);
  if (!name.empty()) g.name(logits, name + "router_logits");
  const kiln_tensor out = moe_experts(g, x, e, moe_route(g, logits, r, name));
  if (!name.empty()) g.name(out, name + "moe_output");
  return out;
}

// ------------------------------------------------------------------------------------------------
// Recurrent layers (the host keeps each sequence's state; declare them with LayerCache
// RECURRENT: state0 the convolution's last K-1 inputs [K-1, C], state1 the delta rule's [Hv, Dk, Dv]).

/** Depthwise causal convolution of x [N, C] with w [C, K] over each sequence, state carried. */
inline kiln_tensor causal_conv(GraphBuilder& g, uint32_t layer, kiln_tensor x, kiln_tensor w) {
  return g.op(KILN_OP_CONV1D_CAUSAL, {x, w, g.cache(layer, "state0"), g.input("seqs")});
}

/**
 * The gated delta rule over q, k [N, Hk, Dk], v [N, Hv, Dv] with log decay `gate` and `beta`
 * [N, Hv], state carried: chunked for prefills, recurrent for decode (KILN_DELTA_AUTO), chunks of
 * `chunk` tokens aligned to absolute positions.
 */
inline kiln_tensor gated_delta(GraphBuilder& g, uint32_t layer, kiln_tensor q, kiln_tensor k, kiln_tensor v,
                               kiln_tensor gate, kiln_tensor beta, int32_t chunk = 64,
                               kiln_delta_mode mode = KILN_DELTA_AUTO) {
  kiln_op_params p{};
  p.mode = mode;
  p.chunk = chunk;
  return g.op(KILN_OP_GATED_DELTA, {q, k, v, gate, beta, g.cache(layer, "state1"), g.input("seqs")}, p);
}

// ------------------------------------------------------------------------------------------------
// Output.

/**
 * The logits of the rows the host asks for ("logits_rows"): only those rows go through the final
 * norm and the vocabulary matrix `w` (tied embeddings pass the embedding), then an optional logit
 * softcap. Marks the result as the graph's output, named "final_logits".
 */
inline kiln_tensor lm_head(GraphBuilder& g, kiln_tensor x, kiln_tensor norm_w, float eps, kiln_norm_mode mode,
                           kiln_tensor w, float softcap = 0.0f) {
  x = g.op(KILN_OP_GET_ROWS, {x, g.input("logits_rows")});
  x = g.rms_norm(x, norm_w, eps, mode);
  g.name(x, "final_norm");
  kiln_tensor logits = g.matmul(x, w);
  if (softcap > 0.0f) {
    kiln_op_params p{};
    p.cap = softcap;
    logits = g.op(KILN_OP_SOFTCAP, {logits}, p);
  }
  g.name(logits, "final_logits");
  g.output(logits);
  return logits;
}

}  // namespace kiln::layers
