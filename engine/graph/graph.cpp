// Graph bookkeeping and the C shims of kiln_host_ops (exceptions become kiln_error here).
#include "graph/graph.hpp"

#include <fmt/format.h>

#include "backend/ops.hpp"
#include "core/error.hpp"
#include "graph/infer.hpp"

namespace kiln::graph {

uint32_t Graph::add_external(TensorKind kind, std::string name, const TensorDesc& desc, uint32_t layer) {
  Tensor t;
  t.desc = desc;
  t.kind = kind;
  t.name = std::move(name);
  t.layer = layer;
  tensors_.push_back(std::move(t));
  return static_cast<uint32_t>(tensors_.size() - 1);
}

uint32_t Graph::add_op(kiln_op op, std::span<const uint32_t> srcs, const kiln_op_params& params) {
  std::vector<TensorDesc> descs;
  for (size_t i = 0; i < srcs.size(); ++i) {
    if (!valid(srcs[i])) throw_error("[graph] {}: source {} is an invalid tensor handle ({})", op_name(op), i, srcs[i]);
    descs.push_back(tensors_[srcs[i]].desc);
  }
  const TensorDesc out = infer(op, params, descs);
  const int8_t writes = op_traits(op).writes_src;
  if (writes >= 0) {
    const Tensor& w = tensors_[base(srcs[static_cast<size_t>(writes)])];
    if (w.kind == TensorKind::weight || w.kind == TensorKind::input)
      throw_error("[graph] {}: source {} ('{}') is read-only; in-place writes go to cache tensors or intermediates",
                  op_name(op), writes, w.name);
  }
  Tensor t;
  t.desc = out;
  t.node = static_cast<int32_t>(nodes_.size());
  if (op_is_view(op)) t.alias = srcs[0];
  if (op == KILN_OP_SET_ROWS) t.alias = srcs[0];
  tensors_.push_back(std::move(t));
  const auto id = static_cast<uint32_t>(tensors_.size() - 1);
  nodes_.push_back(GraphNode{op, params, std::vector<uint32_t>(srcs.begin(), srcs.end()), id});
  return id;
}

void Graph::set_name(uint32_t t, std::string name) {
  if (valid(t)) tensors_[t].name = std::move(name);
}

void Graph::mark_output(uint32_t t) {
  if (!valid(t)) throw_error("[graph] output: invalid tensor handle {}", t);
  tensors_[t].output = true;
}

uint32_t Graph::base(uint32_t t) const {
  while (valid(t) && tensors_[t].alias) t = tensors_[t].alias;
  return t;
}

std::vector<uint32_t> Graph::outputs() const {
  std::vector<uint32_t> out;
  for (uint32_t t = 1; t < tensors_.size(); ++t)
    if (tensors_[t].output) out.push_back(t);
  return out;
}

uint32_t Graph::find(std::string_view name) const {
  for (uint32_t t = 1; t < tensors_.size(); ++t)
    if (tensors_[t].name == name) return t;
  return 0;
}

// ------------------------------------------------------------------------------------------------

namespace {

Builder* self(void* ctx) {
  return static_cast<Builder*>(ctx);
}

template <class F>
kiln_tensor guarded(F f) noexcept {
  try {
    return f();
  } catch (...) {
    return 0;
  }
}

}  // namespace

Builder::Builder(Bindings& bindings) : bindings_(bindings) {
  ops_.struct_size = sizeof(kiln_host_ops);
  ops_.abi_minor = KILN_ABI_MINOR;
  ops_.ctx = this;
  ops_.weight = [](void* ctx, const char* name) {
    return guarded([&] { return self(ctx)->weight(name ? name : ""); });
  };
  ops_.input = [](void* ctx, const char* name) { return guarded([&] { return self(ctx)->input(name ? name : ""); }); };
  ops_.cache = [](void* ctx, uint32_t layer, const char* name) {
    return guarded([&] { return self(ctx)->cache(layer, name ? name : ""); });
  };
  ops_.op = [](void* ctx, uint32_t op, const kiln_tensor* srcs, uint32_t n_srcs, const kiln_op_params* params,
               kiln_error* err) -> kiln_tensor {
    Builder* b = self(ctx);
    try {
      if (n_srcs > KILN_OP_MAX_SRCS || (n_srcs && !srcs))
        throw_error("[graph] {}: {} sources (at most {})", op_name(op), n_srcs, KILN_OP_MAX_SRCS);
      // Checked before the cast: an out-of-range enum value is undefined behaviour.
      if (!op_traits(op).name)
        throw_error("[graph] unknown op {} (this host knows ops up to {})", op, KILN_OP_COUNT - 1);
      const kiln_op_params p = params ? *params : kiln_op_params{};
      b->last_error_.clear();
      if (op == KILN_OP_GET_ROWS && n_srcs == 2)
        if (uint32_t gathered = b->host_gather(srcs[0], srcs[1])) return gathered;
      for (uint32_t i = 0; i < n_srcs; ++i)
        if (b->graph_.valid(srcs[i]) && b->graph_.tensor(srcs[i]).kind == TensorKind::weight &&
            b->bindings_.host_resident(b->graph_.tensor(srcs[i]).name))
          throw_error(
              "[graph] {}: '{}' is kept in host memory (KILN_TENSOR_HOST); only GET_ROWS by a batch input "
              "(\"tokens\") may read it",
              op_name(op), b->graph_.tensor(srcs[i]).name);
      return b->graph_.add_op(static_cast<kiln_op>(op), std::span<const uint32_t>(srcs, n_srcs), p);
    } catch (const std::exception& e) {
      b->last_error_ = e.what();
      kiln_error_set(err, op_traits(op).name ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_UNSUPPORTED, e.what());
      return 0;
    }
  };
  ops_.name = [](void* ctx, kiln_tensor t, const char* name) { self(ctx)->graph_.set_name(t, name ? name : ""); };
  ops_.output = [](void* ctx, kiln_tensor t) {
    Builder* b = self(ctx);
    if (b->graph_.valid(t)) b->graph_.mark_output(t);
  };
  ops_.shape = [](void* ctx, kiln_tensor t, int64_t* shape) -> uint32_t {
    const Graph& g = self(ctx)->graph_;
    if (!g.valid(t) || !shape) return 0;
    const TensorDesc& d = g.tensor(t).desc;
    for (uint32_t i = 0; i < KILN_MAX_DIMS; ++i) shape[i] = i < d.ndim ? d.ne[i] : 0;
    return d.ndim;
  };
  ops_.dtype = [](void* ctx, kiln_tensor t) -> uint32_t {
    const Graph& g = self(ctx)->graph_;
    return g.valid(t) ? static_cast<uint32_t>(g.tensor(t).desc.dtype) : static_cast<uint32_t>(KILN_DTYPE_ANY);
  };
}

uint32_t Builder::weight(std::string_view name) {
  const std::string key(name);
  if (auto it = weights_.find(key); it != weights_.end()) return it->second;
  auto d = bindings_.weight(name);
  return d ? weights_[key] = graph_.add_external(TensorKind::weight, key, *d) : 0;
}

uint32_t Builder::input(std::string_view name) {
  const std::string key(name);
  if (auto it = inputs_.find(key); it != inputs_.end()) return it->second;
  auto d = bindings_.input(name);
  return d ? inputs_[key] = graph_.add_external(TensorKind::input, key, *d) : 0;
}

uint32_t Builder::host_gather(uint32_t table, uint32_t ids) {
  if (!graph_.valid(table) || graph_.tensor(table).kind != TensorKind::weight) return 0;
  const std::string table_name = graph_.tensor(table).name;
  const Tensor* id = graph_.valid(ids) ? &graph_.tensor(ids) : nullptr;
  const std::string ids_name = id && id->kind == TensorKind::input ? id->name : std::string();
  const auto gathered = bindings_.host_gather(table_name, ids_name);  // throws for ids it cannot gather by
  if (!gathered) return 0;
  const uint32_t t = input(*gathered);
  if (!t) throw_error("[graph] internal error: the host named no input for the rows of '{}'", table_name);
  return t;
}

uint32_t Builder::cache(uint32_t layer, std::string_view name) {
  const std::string key = std::to_string(layer) + "/" + std::string(name);
  if (auto it = caches_.find(key); it != caches_.end()) return it->second;
  auto d = bindings_.cache(layer, name);
  return d ? caches_[key] = graph_.add_external(TensorKind::cache, std::string(name), *d, layer) : 0;
}

}  // namespace kiln::graph
