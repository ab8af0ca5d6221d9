/**
 * @file graph.hpp
 * @brief GraphBuilder: the C++ face of the host's op table (kiln_host_ops) that a model's
 *        build_graph receives, with one-line helpers for the ops every model uses. Included by
 *        kiln/model.hpp; the larger building blocks (attention over the paged cache, GLU MLPs, MoE)
 *        are in kiln/layers.hpp.
 */
#pragma once

#include <kiln/kiln_plugin.h>

#include <array>
#include <initializer_list>
#include <kiln/error.hpp>
#include <string>
#include <vector>

namespace kiln {

/** Thin C++ face of kiln_host_ops. Every method that builds throws kiln::Error on failure. */
class GraphBuilder {
 public:
  explicit GraphBuilder(const kiln_host_ops* ops) : ops_(ops) {}
  /** A declared checkpoint tensor by name; 0 when it is optional and absent. */
  kiln_tensor weight(const std::string& name) const { return ops_->weight(ops_->ctx, name.c_str()); }
  /** weight(), or a kiln::Error naming the tensor when it is absent. */
  kiln_tensor required(const std::string& name) const {
    const kiln_tensor t = weight(name);
    if (!t) throw Error(KILN_ERR_NOT_FOUND, "weight " + name + " is not loaded");
    return t;
  }
  /** A batch input: "tokens", "positions", "seqs", "logits_rows" (kiln_host_ops.input). */
  kiln_tensor input(const char* name) const { return ops_->input(ops_->ctx, name); }
  /** A layer's cache tensor ("k", "v", "block_table", "slots", "state0", "state1"); 0 when none. */
  kiln_tensor cache(uint32_t layer, const char* name) const { return ops_->cache(ops_->ctx, layer, name); }
  kiln_tensor op(kiln_op op, std::initializer_list<kiln_tensor> srcs, const kiln_op_params& p = {}) const {
    kiln_error err{};
    kiln_tensor t = ops_->op(ops_->ctx, op, srcs.begin(), static_cast<uint32_t>(srcs.size()), &p, &err);
    if (!t) throw Error(err.status ? err.status : KILN_ERR_UNSUPPORTED, err.message);
    return t;
  }
  void name(kiln_tensor t, const std::string& n) const { ops_->name(ops_->ctx, t, n.c_str()); }
  void output(kiln_tensor t) const { ops_->output(ops_->ctx, t); }
  std::vector<int64_t> shape(kiln_tensor t) const {
    std::array<int64_t, KILN_MAX_DIMS> s{};
    uint32_t n = ops_->shape(ops_->ctx, t, s.data());
    return std::vector<int64_t>(s.begin(), s.begin() + n);
  }
  kiln_dtype dtype(kiln_tensor t) const { return static_cast<kiln_dtype>(ops_->dtype(ops_->ctx, t)); }
  const kiln_host_ops* raw() const { return ops_; }

  // One-liners for the common ops.
  kiln_tensor add(kiln_tensor a, kiln_tensor b) const { return op(KILN_OP_ADD, {a, b}); }
  kiln_tensor mul(kiln_tensor a, kiln_tensor b) const { return op(KILN_OP_MUL, {a, b}); }
  /** x · wᵀ (w [out, in], any weight dtype). */
  kiln_tensor matmul(kiln_tensor x, kiln_tensor w) const { return op(KILN_OP_MATMUL, {x, w}); }
  kiln_tensor unary(kiln_op o, kiln_tensor x) const { return op(o, {x}); }
  /** x · scale + bias. */
  kiln_tensor scale(kiln_tensor x, float scale, float bias = 0.0f) const {
    kiln_op_params p{};
    p.scale = scale;
    p.bias = bias;
    return op(KILN_OP_SCALE, {x}, p);
  }
  /** The same data seen with another shape (one dim may be -1). */
  kiln_tensor reshape(kiln_tensor x, std::initializer_list<int64_t> shape) const {
    kiln_op_params p{};
    p.ndim = static_cast<uint32_t>(shape.size());
    size_t i = 0;
    for (int64_t s : shape) p.shape[i++] = s;
    return op(KILN_OP_RESHAPE, {x}, p);
  }
  /** [begin, end) of `axis` (negative axes count from the end). */
  kiln_tensor slice(kiln_tensor x, int32_t axis, int64_t begin, int64_t end) const {
    kiln_op_params p{};
    p.axis = axis;
    p.begin = begin;
    p.end = end;
    return op(KILN_OP_SLICE, {x}, p);
  }
  /** RMS norm over the last dim; `w` 0 for KILN_NORM_NONE, `z` only for KILN_NORM_GATED. */
  kiln_tensor rms_norm(kiln_tensor x, kiln_tensor w, float eps, kiln_norm_mode mode = KILN_NORM_WEIGHT,
                       kiln_tensor z = 0) const {
    kiln_op_params p{};
    p.eps = eps;
    p.mode = mode;
    if (mode == KILN_NORM_GATED) return op(KILN_OP_RMS_NORM, {x, w, z}, p);
    if (mode == KILN_NORM_NONE) return op(KILN_OP_RMS_NORM, {x}, p);
    return op(KILN_OP_RMS_NORM, {x, w}, p);
  }
  kiln_tensor l2_norm(kiln_tensor x, float eps) const {
    kiln_op_params p{};
    p.eps = eps;
    return op(KILN_OP_L2_NORM, {x}, p);
  }
  /**
   * RoPE over x [N, H, D] at `positions`: `n_dims` rotated dims (0: all), `n_freq` pairs with a
   * non-zero frequency (0: all) — see kiln_rope_mode.
   */
  kiln_tensor rope(kiln_tensor x, kiln_tensor positions, kiln_rope_mode mode, float theta, int32_t n_dims = 0,
                   int32_t n_freq = 0) const {
    kiln_op_params p{};
    p.mode = mode;
    p.theta = theta;
    p.n_dims = n_dims;
    p.n_freq = n_freq;
    return op(KILN_OP_ROPE, {x, positions}, p);
  }

 private:
  const kiln_host_ops* ops_;
};

}  // namespace kiln
