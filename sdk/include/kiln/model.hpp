/**
 * @file model.hpp
 * @brief C++ wrapper for model plugins: hyperparameters, tensor table, per-layer cache kinds and a
 *        graph builder over the host's op table. Included by kiln/plugin.hpp.
 */
#pragma once

#include <kiln/kiln_plugin.h>
#include <kiln/plugin.hpp>

#include <array>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kiln {

struct TensorDecl {
  std::string name;            ///< checkpoint name; with stack > 0 a pattern containing "{}"
  kiln_dtype dtype = KILN_DTYPE_ANY;
  std::vector<int64_t> shape;  ///< outermost first; -1 = any
  bool optional = false;
  bool convert = false;        ///< host converts any float storage to `dtype` (norm weights: F32)
  uint32_t stack = 0;          ///< >0: stack name{0..stack-1} along a new outer dim (per-expert tensors)
};

/** What the host tells a model at creation (C++ view of kiln_model_create_info). */
struct ModelInfo {
  std::string_view config_json;
  std::string_view model_type;
  kiln_checkpoint_format format = KILN_CHECKPOINT_HF;
};

struct LayerCache {
  kiln_cache_kind kind = KILN_CACHE_FULL_KV;
  uint32_t n_kv_heads = 0, head_dim_k = 0, head_dim_v = 0;
  uint32_t window = 0;      ///< SLIDING_KV
  int32_t shares_with = -1; ///< reuse another layer's KV
  std::vector<std::vector<int64_t>> state_shapes;  ///< RECURRENT (at most 2)
  std::vector<kiln_dtype> state_dtypes;
};

struct ModelHparams {
  uint32_t n_layers = 0, n_vocab = 0, n_embd = 0, max_context = 0;
  uint32_t bos_token = UINT32_MAX;
  const char* architecture = "";  ///< static storage
};

/** Thin C++ face of kiln_host_ops. Every method throws kiln::Error on failure. */
class GraphBuilder {
 public:
  explicit GraphBuilder(const kiln_host_ops* ops) : ops_(ops) {}
  kiln_tensor weight(const std::string& name) const { return ops_->weight(ops_->ctx, name.c_str()); }
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

 private:
  const kiln_host_ops* ops_;
};

/**
 * Base class of model plugins. Constructed from a ModelInfo (or, for older plugins, from the
 * config.json text and model_type).
 */
class Model {
 public:
  virtual ~Model() = default;
  virtual ModelHparams hparams() const = 0;
  virtual std::vector<TensorDecl> tensors() const = 0;
  virtual LayerCache layer_cache(uint32_t layer) const = 0;
  virtual void build_graph(GraphBuilder& g, const kiln_batch_desc& batch) = 0;
};

namespace detail {
template <class T>
struct ModelAdapter {
  struct Instance {
    T model;
    std::vector<TensorDecl> decls;
    explicit Instance(const kiln_model_create_info* info) : model(make(info)), decls(model.tensors()) {}
    static T make(const kiln_model_create_info* info) {
      if constexpr (std::is_constructible_v<T, const ModelInfo&>) {
        ModelInfo mi;
        mi.config_json = view(info->config_json);
        mi.model_type = view(info->model_type);
        mi.format = info->format == KILN_CHECKPOINT_GGUF ? KILN_CHECKPOINT_GGUF : KILN_CHECKPOINT_HF;
        return T(mi);
      } else {
        return T(view(info->config_json), view(info->model_type));
      }
    }
  };
  static void* create(const kiln_model_create_info* info, kiln_error* err) noexcept {
    Instance* obj = nullptr;
    guarded(err, [&] { obj = new Instance(info); });
    return obj;
  }
  static void destroy(void* self) noexcept { delete static_cast<Instance*>(self); }
  static kiln_status hparams(void* self, kiln_model_hparams* out, kiln_error* err) noexcept {
    return guarded(err, [&] {
      ModelHparams h = static_cast<Instance*>(self)->model.hparams();
      *out = kiln_model_hparams{};
      out->struct_size = sizeof(*out);
      out->n_layers = h.n_layers;
      out->n_vocab = h.n_vocab;
      out->n_embd = h.n_embd;
      out->max_context = h.max_context;
      out->bos_token = h.bos_token;
      out->architecture = h.architecture;
    });
  }
  static uint32_t tensor_count(void* self) noexcept {
    return static_cast<uint32_t>(static_cast<Instance*>(self)->decls.size());
  }
  static kiln_status tensor_decl(void* self, uint32_t i, kiln_tensor_decl* out, kiln_error* err) noexcept {
    return guarded(err, [&] {
      const auto& decls = static_cast<Instance*>(self)->decls;
      if (i >= decls.size()) throw Error(KILN_ERR_NOT_FOUND, "tensor index out of range");
      const TensorDecl& d = decls[i];
      if (d.shape.size() > KILN_MAX_DIMS) throw Error(KILN_ERR_INVALID_ARGUMENT, "too many dims: " + d.name);
      *out = kiln_tensor_decl{};
      out->struct_size = sizeof(*out);
      out->dtype = d.dtype;
      out->name = d.name.c_str();
      out->ndim = static_cast<uint32_t>(d.shape.size());
      out->optional = d.optional;
      out->convert = d.convert;
      out->stack = d.stack;
      for (size_t k = 0; k < d.shape.size(); ++k) out->shape[k] = d.shape[k];
    });
  }
  static kiln_status layer_cache(void* self, uint32_t layer, kiln_layer_cache_desc* out, kiln_error* err) noexcept {
    return guarded(err, [&] {
      LayerCache c = static_cast<Instance*>(self)->model.layer_cache(layer);
      *out = kiln_layer_cache_desc{};
      out->struct_size = sizeof(*out);
      out->kind = c.kind;
      out->n_kv_heads = c.n_kv_heads;
      out->head_dim_k = c.head_dim_k;
      out->head_dim_v = c.head_dim_v;
      out->window = c.window;
      out->shares_with = c.shares_with;
      if (c.state_shapes.size() > 2) throw Error(KILN_ERR_INVALID_ARGUMENT, "at most 2 recurrent states");
      out->n_state = static_cast<uint32_t>(c.state_shapes.size());
      for (size_t s = 0; s < c.state_shapes.size(); ++s) {
        for (size_t k = 0; k < c.state_shapes[s].size() && k < KILN_MAX_DIMS; ++k)
          out->state_shape[s][k] = c.state_shapes[s][k];
        out->state_dtype[s] = s < c.state_dtypes.size() ? c.state_dtypes[s] : KILN_DTYPE_F32;
      }
    });
  }
  static kiln_status build_graph(void* self, const kiln_host_ops* ops, const kiln_batch_desc* batch,
                                 kiln_error* err) noexcept {
    return guarded(err, [&] {
      GraphBuilder g(ops);
      static_cast<Instance*>(self)->model.build_graph(g, *batch);
    });
  }
  static const kiln_model_vtable* vtable() {
    static const kiln_model_vtable vt = {sizeof(kiln_model_vtable), 0,           &create,      &destroy,
                                         &hparams,                  &tensor_count, &tensor_decl, &layer_cache,
                                         &build_graph,              {}};
    return &vt;
  }
};
}  // namespace detail

/**
 * Registers model class T (derived from kiln::Model, constructible from a ModelInfo or from
 * (config_json, model_type) string views) for the NULL-terminated list of model_types it serves
 * (config.json `model_type`s and GGUF `general.architecture`s).
 */
template <class T>
kiln_component model(const char* name, const char* const* model_types, const char* description = "") {
  static_assert(std::is_base_of_v<Model, T>, "T must derive from kiln::Model");
  return detail::component(KILN_COMPONENT_MODEL, name, description, detail::ModelAdapter<T>::vtable(), model_types);
}

}  // namespace kiln
