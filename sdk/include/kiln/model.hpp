/**
 * @file model.hpp
 * @brief C++ wrapper for model plugins: what the host tells a model at creation (config, format,
 *        the checkpoint's tensors), hyperparameters, the tensor table, per-layer cache kinds, and
 *        build_graph over a GraphBuilder. Included by kiln/plugin.hpp.
 */
#pragma once

#include <kiln/kiln_plugin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <kiln/graph.hpp>
#include <kiln/plugin.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace kiln {

struct TensorDecl {
  std::string name;  ///< checkpoint name; with stack > 0 a pattern containing "{}"
  kiln_dtype dtype = KILN_DTYPE_ANY;
  std::vector<int64_t> shape;  ///< outermost first; -1 = any
  bool optional = false;
  bool convert = false;  ///< host converts any float storage to `dtype` (norm weights: F32)
  uint32_t stack = 0;    ///< >0: stack name{0..stack-1} along a new outer dim (per-expert tensors)
  uint32_t flags = 0;    ///< KILN_TENSOR_*
};

/** One tensor of the checkpoint (kiln_checkpoint_tensor). */
struct CheckpointTensor {
  std::string_view name;
  kiln_dtype dtype = KILN_DTYPE_ANY;  ///< KILN_DTYPE_ANY for storage-only types (integers, f64)
  std::vector<int64_t> shape;
  const void* data = nullptr;  ///< the stored bytes (hosts of ABI 2.1 on; null before)
  uint64_t nbytes = 0;
};

/**
 * What the host tells a model at creation (C++ view of kiln_model_create_info). The views point
 * into host memory that is valid only while the model's constructor runs: copy what you keep.
 */
struct ModelInfo {
  std::string_view config_json;
  std::string_view model_type;
  kiln_checkpoint_format format = KILN_CHECKPOINT_HF;
  std::vector<CheckpointTensor> tensors;  ///< every tensor of the checkpoint

  /** The checkpoint's tensor `name`, or nullptr. */
  const CheckpointTensor* find(std::string_view name) const {
    if (index_.size() != tensors.size()) {
      index_.clear();
      for (size_t i = 0; i < tensors.size(); ++i) index_.emplace(tensors[i].name, i);
    }
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors[it->second];
  }
  bool has(std::string_view name) const { return find(name) != nullptr; }
  /** Whether any tensor name starts with `prefix` ("model.language_model."). */
  bool has_prefix(std::string_view prefix) const {
    return std::any_of(tensors.begin(), tensors.end(),
                       [&](const CheckpointTensor& t) { return t.name.substr(0, prefix.size()) == prefix; });
  }

  static ModelInfo from_c(const kiln_model_create_info* info) {
    ModelInfo mi;
    mi.config_json = view(info->config_json);
    mi.model_type = view(info->model_type);
    mi.format = info->format == KILN_CHECKPOINT_GGUF ? KILN_CHECKPOINT_GGUF : KILN_CHECKPOINT_HF;
    if (KILN_FITS(info, kiln_model_create_info, tensor_stride) && info->tensors) {
      const auto* base = reinterpret_cast<const char*>(info->tensors);
      for (uint32_t i = 0; i < info->n_tensors; ++i) {
        const auto* t = reinterpret_cast<const kiln_checkpoint_tensor*>(base + size_t{i} * info->tensor_stride);
        CheckpointTensor c;
        c.name = view(t->name);
        c.dtype = static_cast<kiln_dtype>(t->dtype);
        c.shape.assign(t->shape, t->shape + std::min<uint32_t>(t->ndim, KILN_MAX_DIMS));
        if (info->tensor_stride >= offsetof(kiln_checkpoint_tensor, nbytes) + sizeof(t->nbytes)) {
          c.data = t->data;
          c.nbytes = t->nbytes;
        }
        mi.tensors.push_back(std::move(c));
      }
    }
    return mi;
  }

 private:
  mutable std::unordered_map<std::string_view, size_t> index_;
};

struct LayerCache {
  kiln_cache_kind kind = KILN_CACHE_FULL_KV;
  uint32_t n_kv_heads = 0, head_dim_k = 0, head_dim_v = 0;
  uint32_t window = 0;                             ///< SLIDING_KV
  int32_t shares_with = -1;                        ///< reuse another layer's KV
  std::vector<std::vector<int64_t>> state_shapes;  ///< RECURRENT (at most 2), f32
  /** KV layers: keep this layer at 16 bits when the cache is quantized (KILN_LAYER_KV_SENSITIVE). */
  bool kv_sensitive = false;
};

struct ModelHparams {
  uint32_t n_layers = 0, n_vocab = 0, n_embd = 0, max_context = 0;
  uint32_t bos_token = UINT32_MAX;
  const char* architecture = "";  ///< static storage
};

/**
 * Base class of model plugins, constructed from a ModelInfo. build_graph must depend only on the
 * batch's shapes (kiln_batch_desc): the host builds a graph once per shape and reuses it.
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

/**
 * Writes `local` into `out`, a struct the host allocated and sized: only the bytes that fit in the
 * struct_size the host set, which stays as it was.
 */
template <class T>
void fill_host_struct(T* out, const T& local) {
  const size_t n = std::min<size_t>(out->struct_size, sizeof(T));
  constexpr size_t head = sizeof(uint32_t);  // struct_size
  if (n > head)
    std::memcpy(reinterpret_cast<char*>(out) + head, reinterpret_cast<const char*>(&local) + head, n - head);
}

template <class T>
struct ModelAdapter {
  struct Instance {
    T model;
    std::vector<TensorDecl> decls;
    explicit Instance(const kiln_model_create_info* info) : model(ModelInfo::from_c(info)), decls(model.tensors()) {}
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
      kiln_model_hparams c{};
      c.n_layers = h.n_layers;
      c.n_vocab = h.n_vocab;
      c.n_embd = h.n_embd;
      c.max_context = h.max_context;
      c.bos_token = h.bos_token;
      c.architecture = h.architecture;
      fill_host_struct(out, c);
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
      kiln_tensor_decl c{};
      c.dtype = d.dtype;
      c.name = d.name.c_str();
      c.ndim = static_cast<uint32_t>(d.shape.size());
      c.optional = d.optional;
      c.convert = d.convert;
      c.stack = d.stack;
      c.flags = d.flags;
      for (size_t k = 0; k < d.shape.size(); ++k) c.shape[k] = d.shape[k];
      fill_host_struct(out, c);
    });
  }
  static kiln_status layer_cache(void* self, uint32_t layer, kiln_layer_cache_desc* out, kiln_error* err) noexcept {
    return guarded(err, [&] {
      LayerCache lc = static_cast<Instance*>(self)->model.layer_cache(layer);
      kiln_layer_cache_desc c{};
      c.kind = lc.kind;
      c.n_kv_heads = lc.n_kv_heads;
      c.head_dim_k = lc.head_dim_k;
      c.head_dim_v = lc.head_dim_v;
      c.window = lc.window;
      c.shares_with = lc.shares_with;
      if (lc.state_shapes.size() > 2) throw Error(KILN_ERR_INVALID_ARGUMENT, "at most 2 recurrent states");
      c.n_state = static_cast<uint32_t>(lc.state_shapes.size());
      for (size_t s = 0; s < lc.state_shapes.size(); ++s) {
        if (lc.state_shapes[s].size() > KILN_MAX_DIMS)
          throw Error(KILN_ERR_INVALID_ARGUMENT, "a recurrent state has more than 4 dims");
        for (size_t k = 0; k < lc.state_shapes[s].size(); ++k) c.state_shape[s][k] = lc.state_shapes[s][k];
        c.state_dtype[s] = KILN_DTYPE_F32;
      }
      c.flags = lc.kv_sensitive ? KILN_LAYER_KV_SENSITIVE : 0u;
      fill_host_struct(out, c);
    });
  }
  static kiln_status build_graph(void* self, const kiln_host_ops* ops, const kiln_batch_desc* batch,
                                 kiln_error* err) noexcept {
    return guarded(err, [&] {
      GraphBuilder g(ops);
      kiln_batch_desc b{};  // the host's struct may be older (smaller): read what fits
      std::memcpy(&b, batch, std::min<size_t>(batch->struct_size, sizeof(b)));
      static_cast<Instance*>(self)->model.build_graph(g, b);
    });
  }
  static const kiln_model_vtable* vtable() {
    static const kiln_model_vtable vt = {sizeof(kiln_model_vtable),
                                         0,
                                         &create,
                                         &destroy,
                                         &hparams,
                                         &tensor_count,
                                         &tensor_decl,
                                         &layer_cache,
                                         &build_graph,
                                         {}};
    return &vt;
  }
};
}  // namespace detail

/**
 * Registers model class T (derived from kiln::Model, constructible from a ModelInfo) for the
 * NULL-terminated list of model_types it serves (config.json `model_type`s and GGUF
 * `general.architecture`s).
 */
template <class T>
kiln_component model(const char* name, const char* const* model_types, const char* description = "") {
  static_assert(std::is_base_of_v<Model, T>, "T must derive from kiln::Model");
  static_assert(std::is_constructible_v<T, const ModelInfo&>, "T must be constructible from const ModelInfo&");
  return detail::component(KILN_COMPONENT_MODEL, name, description, detail::ModelAdapter<T>::vtable(), model_types);
}

}  // namespace kiln
