#include "model/model_host.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cache/layout.hpp"
#include "core/convert.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "graph/allocator.hpp"
#include "graph/graph.hpp"
#include "graph/lower.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/progress.hpp"
#include "plugin/registry.hpp"

namespace kiln::model {

using backend::TensorDesc;
using backend::TensorRef;

struct ModelHost::Weight {
  TensorDesc desc;
  backend::Buffer* buffer = nullptr;  ///< owned by weight_buffers_
  size_t offset = 0;
};

struct ModelHost::CacheTensors {
  TensorDesc k, v;
  std::unique_ptr<backend::Buffer> kbuf, vbuf;
  TensorDesc state[2];
  std::unique_ptr<backend::Buffer> sbuf[2];
};

namespace {

TensorDesc make_desc(DType t, const std::vector<int64_t>& shape) {
  TensorDesc d;
  d.dtype = t;
  d.ndim = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) d.ne[i] = shape[i];
  return d;
}

std::string kiln_error_text(const kiln_error& e, const char* what) {
  return e.message[0] ? std::string(e.message) : std::string(what) + " failed without a message";
}

void zero_buffer(backend::Buffer& b) {
  if (void* p = b.host_ptr()) {
    std::memset(p, 0, b.size());
    return;
  }
  std::vector<uint8_t> zeros(std::min<size_t>(b.size(), 16u << 20), 0);
  for (size_t off = 0; off < b.size(); off += zeros.size())
    b.upload(off, zeros.data(), std::min(zeros.size(), b.size() - off));
}

}  // namespace

std::unique_ptr<ModelHost> ModelHost::open(const std::string& path, const PluginRegistry& registry,
                                           const HostOptions& options) {
  Checkpoint ckpt = Checkpoint::open(path);
  const Component* c = registry.find_model_type(ckpt.model_type());
  if (!c) {
    std::string names;
    for (const auto& n : registry.names(KILN_COMPONENT_MODEL)) names += (names.empty() ? "" : ", ") + n;
    throw_error(
        "[model] no model plugin serves model type '{}' of {} (model plugins loaded: {}); build or load the "
        "plugin for it",
        ckpt.model_type(), path, names.empty() ? "none" : names);
  }
  return std::make_unique<ModelHost>(std::move(ckpt), *c, options);
}

ModelHost::ModelHost(Checkpoint ckpt, const Component& component, const HostOptions& options)
    : ckpt_(std::move(ckpt)), options_(options) {
  const auto t0 = std::chrono::steady_clock::now();
  vt_ = static_cast<const kiln_model_vtable*>(component.vtable);
  // The checkpoint's tensors, so the model can pick between spellings and refuse a layout at
  // creation. The names point into ckpt_, which outlives the call.
  std::vector<kiln_checkpoint_tensor> tensors;
  for (const TensorInfo& t : ckpt_.tensors()) {
    kiln_checkpoint_tensor c{};
    c.name = {t.name.data(), t.name.size()};
    c.dtype = to_kiln(t.dtype);
    c.ndim = static_cast<uint32_t>(std::min<size_t>(t.shape.size(), KILN_MAX_DIMS));
    for (uint32_t i = 0; i < c.ndim; ++i) c.shape[i] = t.shape[i];
    tensors.push_back(c);
  }
  kiln_model_create_info info{};
  info.struct_size = sizeof(info);
  info.format = ckpt_.format() == CheckpointFormat::gguf ? KILN_CHECKPOINT_GGUF : KILN_CHECKPOINT_HF;
  info.config_json = {ckpt_.config_json().data(), ckpt_.config_json().size()};
  info.model_type = {ckpt_.model_type().data(), ckpt_.model_type().size()};
  info.tensors = tensors.data();
  info.n_tensors = static_cast<uint32_t>(tensors.size());
  info.tensor_stride = sizeof(kiln_checkpoint_tensor);
  kiln_error err{};
  model_ = vt_->create(&info, &err);
  if (!model_)
    throw_error("[model] the '{}' plugin cannot create a model from {}: {}", component.name, ckpt_.path(),
                kiln_error_text(err, "create"));
  hp_.struct_size = sizeof(hp_);  // structs the plugin fills are sized by the host (ABI.md)
  if (vt_->hparams(model_, &hp_, &err) != KILN_OK)
    throw_error("[model] {}: hparams: {}", component.name, kiln_error_text(err, "hparams"));

  std::vector<WeightDecl> decls;
  const uint32_t n = vt_->tensor_count(model_);
  for (uint32_t i = 0; i < n; ++i) {
    kiln_tensor_decl d{};
    d.struct_size = sizeof(d);
    if (vt_->tensor_decl(model_, i, &d, &err) != KILN_OK)
      throw_error("[model] {}: tensor_decl {}: {}", component.name, i, kiln_error_text(err, "tensor_decl"));
    decls.push_back(WeightDecl::from_c(d));
  }
  device_ = &backend::Registry::instance().select({options.device, options.allow_cpu_fallback});
  load_weights(decls);
  make_cache(options);
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("[model] {} ({}) on {}: {} tensors, {} of weights ({} mapped without copy), {} of cache, loaded in {:.2f}s",
            ckpt_.path(), hp_.architecture ? hp_.architecture : "?", device_->info().name, stats_.n_tensors,
            human_bytes(stats_.weight_bytes), human_bytes(stats_.imported_bytes), human_bytes(stats_.cache_bytes),
            stats_.seconds);
}

ModelHost::~ModelHost() {
  if (model_ && vt_) vt_->destroy(model_);
}

void ModelHost::load_weights(const std::vector<WeightDecl>& decls) {
  const auto resolved = check_weights(ckpt_, decls);
  uint64_t total = 0;
  for (const auto& pieces : resolved)
    for (const TensorInfo* t : pieces) total += t->nbytes;
  Progress bar("loading weights", total, options_.progress ? 256ull << 20 : UINT64_MAX);
  // Weights that are copied (not imported zero-copy) are packed in declaration order into arenas
  // of up to kArena bytes, each tensor 256-byte aligned. Consecutive tensors of a layer (a
  // plugin declares q/k/v and gate/up next to each other) then share one buffer, which lets the
  // backend run sibling matmuls as one dispatch (vulkan/ops/matmul.cpp), and there are a few
  // dozen allocations instead of hundreds.
  constexpr size_t kArena = size_t{256} << 20, kAlign = 256;
  struct Plan {
    std::unique_ptr<Weight> w;
    bool same = false;  ///< stored as in the file (no conversion)
    size_t arena = SIZE_MAX, offset = 0;
  };
  std::vector<Plan> plans(decls.size());
  std::vector<size_t> arena_bytes;
  for (size_t i = 0; i < decls.size(); ++i) {
    const WeightDecl& d = decls[i];
    const auto& pieces = resolved[i];
    if (pieces.empty()) continue;
    const TensorInfo& first = *pieces[0];
    const bool native = backend::is_weight_dtype(first.dtype);
    const DType stored = native ? first.dtype : DType::f32;
    DType target = stored;
    if (d.convert && d.dtype != KILN_DTYPE_ANY)
      target = dtype_from_kiln(d.dtype);
    else if (!native)
      target = DType::f32;  // F64 and the like: widen/narrow to f32
    std::vector<int64_t> shape = first.shape;
    if (d.stack) shape.insert(shape.begin(), static_cast<int64_t>(pieces.size()));
    Plan& p = plans[i];
    p.w = std::make_unique<Weight>();
    p.w->desc = make_desc(target, shape);
    if (is_quantized(target) && (shape.back() % kQuantBlock) != 0)
      throw_error("[model] tensor '{}' is {} with rows of {} values, not a multiple of 32", d.name, dtype_name(target),
                  shape.back());
    const size_t bytes = p.w->desc.bytes();
    p.same = native && target == stored;
    if (p.same && pieces.size() == 1) {
      auto imported = device_->import_host(const_cast<std::byte*>(first.data), first.nbytes);
      if (imported) {
        p.w->buffer = imported.get();
        weight_buffers_.push_back(std::move(imported));
        stats_.imported_bytes += bytes;
        continue;
      }
    }
    if (bytes > kArena || arena_bytes.empty() || arena_bytes.back() + bytes > kArena) arena_bytes.push_back(0);
    p.arena = arena_bytes.size() - 1;
    p.offset = arena_bytes.back();
    arena_bytes.back() = (p.offset + bytes + kAlign - 1) / kAlign * kAlign;
  }
  std::vector<backend::Buffer*> arenas;
  for (size_t bytes : arena_bytes) {
    weight_buffers_.push_back(device_->allocate(std::max<size_t>(bytes, kAlign), backend::BufferUsage::weights));
    arenas.push_back(weight_buffers_.back().get());
  }
  for (size_t i = 0; i < decls.size(); ++i) {
    Plan& p = plans[i];
    if (!p.w) continue;
    const auto& pieces = resolved[i];
    if (p.arena != SIZE_MAX) {
      p.w->buffer = arenas[p.arena];
      p.w->offset = p.offset;
      size_t off = p.offset;
      for (const TensorInfo* t : pieces) {
        if (p.same) {
          p.w->buffer->upload_weights(off, t->data, t->nbytes, p.w->desc.dtype);
          off += t->nbytes;
        } else {
          std::vector<float> f = tensor_to_f32(*t);
          std::vector<uint8_t> enc = encode_f32(f, p.w->desc.dtype);
          p.w->buffer->upload_weights(off, enc.data(), enc.size(), p.w->desc.dtype);
          off += enc.size();
        }
      }
    }
    for (const TensorInfo* t : pieces) bar.advance(t->nbytes);
    stats_.weight_bytes += p.w->desc.bytes();
    ++stats_.n_tensors;
    weights_.emplace(decls[i].name, std::move(p.w));
  }
  bar.finish();
}

void ModelHost::make_cache(const HostOptions& o) {
  std::vector<cache::LayerSpec> specs;
  kiln_error err{};
  for (uint32_t l = 0; l < hp_.n_layers; ++l) {
    kiln_layer_cache_desc d{};
    d.struct_size = sizeof(d);
    if (vt_->layer_cache(model_, l, &d, &err) != KILN_OK)
      throw_error("[model] layer_cache({}): {}", l, kiln_error_text(err, "layer_cache"));
    specs.push_back(cache::LayerSpec::from_c(d));
  }
  cache::CacheOptions co;
  co.block_tokens = static_cast<uint32_t>(o.cache.block_tokens);
  co.kv_dtype = o.kv_dtype;
  co.max_seqs = o.max_seqs;
  co.max_context = o.max_context ? o.max_context : std::min<uint32_t>(hp_.max_context ? hp_.max_context : 8192, 8192);
  co.max_batch_tokens = o.max_batch_tokens;
  co.free_out_of_window = o.free_out_of_window;
  const backend::MemoryInfo mem = device_->memory();
  co.budget_bytes = cache::budget_from_config(o.cache, mem.total, mem.free);
  cache::CacheLayout layout = cache::plan_layout(specs, co);
  const uint32_t bt = layout.block_tokens;
  const DType kv = dtype_from_kiln(layout.kv_dtype);
  layer_cache_.resize(specs.size());
  for (size_t g = 0; g < layout.groups.size(); ++g)
    for (uint32_t l : layout.groups[g].layers) {
      const auto& s = specs[l];
      auto c = std::make_unique<CacheTensors>();
      const int64_t nb = std::max<int64_t>(layout.groups[g].n_blocks, 1);
      c->k = make_desc(kv, {nb, bt, s.n_kv_heads, s.head_dim_k});
      c->v = make_desc(kv, {nb, bt, s.n_kv_heads, s.head_dim_v});
      c->kbuf = device_->allocate(c->k.bytes(), backend::BufferUsage::state);
      c->vbuf = device_->allocate(c->v.bytes(), backend::BufferUsage::state);
      zero_buffer(*c->kbuf);
      zero_buffer(*c->vbuf);
      stats_.cache_bytes += c->k.bytes() + c->v.bytes();
      layer_cache_[l] = std::move(c);
    }
  for (size_t l = 0; l < specs.size(); ++l) {
    if (specs[l].kind != KILN_CACHE_RECURRENT) continue;
    auto c = std::make_unique<CacheTensors>();
    for (size_t k = 0; k < specs[l].state_shapes.size(); ++k) {
      std::vector<int64_t> shape = specs[l].state_shapes[k];
      shape.insert(shape.begin(), std::max<int64_t>(layout.n_state_slots, 1));
      c->state[k] = make_desc(DType::f32, shape);
      c->sbuf[k] = device_->allocate(c->state[k].bytes(), backend::BufferUsage::state);
      zero_buffer(*c->sbuf[k]);
      stats_.cache_bytes += c->state[k].bytes();
    }
    layer_cache_[l] = std::move(c);
  }
  cache_ = std::make_unique<cache::KvCache>(std::move(layout), co);
}

// ------------------------------------------------------------------------------------------------
// One step.

/** Names the plugin may ask for during one step, and where each lives once bound. */
class ModelHost::StepBindings : public graph::Bindings {
 public:
  StepBindings(ModelHost& host, const cache::RaggedBatch& b) : host_(host) {
    const auto N = static_cast<int64_t>(b.n_tokens), S = static_cast<int64_t>(b.n_seqs);
    add("tokens", make_desc(DType::i32, {N}), b.tokens.data());
    add("positions", make_desc(DType::i32, {N}), b.positions.data());
    add("seqs", make_desc(DType::i32, {S, 4}), b.seqs.data());
    add("logits_rows", make_desc(DType::i32, {static_cast<int64_t>(b.logits_rows.size())}), b.logits_rows.data());
    for (size_t g = 0; g < b.groups.size(); ++g) {
      add("block_table." + std::to_string(g), make_desc(DType::i32, {S, static_cast<int64_t>(b.groups[g].max_blocks)}),
          b.groups[g].block_table.data());
      add("slots." + std::to_string(g), make_desc(DType::i32, {N}), b.groups[g].slots.data());
    }
  }

  /** Uploads every input into one buffer (grown when too small). */
  void upload(std::unique_ptr<backend::Buffer>& buf) {
    size_t total = 0;
    for (auto& in : inputs_) {
      in.offset = total;
      total += (in.desc.bytes() + 255) / 256 * 256;
    }
    if (!buf || buf->size() < total)
      buf = host_.device_->allocate(std::max<size_t>(total, 4096) * 2, backend::BufferUsage::activations);
    for (const auto& in : inputs_)
      if (in.desc.bytes()) buf->upload(in.offset, in.data, in.desc.bytes());
    buffer_ = buf.get();
  }

  std::optional<TensorDesc> weight(std::string_view name) override {
    auto it = host_.weights_.find(name);
    if (it == host_.weights_.end()) return std::nullopt;
    return it->second->desc;
  }
  std::optional<TensorDesc> input(std::string_view name) override {
    const Input* in = find(name);
    return in ? std::optional<TensorDesc>(in->desc) : std::nullopt;
  }
  std::optional<TensorDesc> cache(uint32_t layer, std::string_view name) override {
    if (layer >= host_.layer_cache_.size()) return std::nullopt;
    const auto& L = host_.cache_->layout();
    const int32_t group = L.layer_group[layer];
    if (name == "block_table" || name == "slots") {
      if (group < 0) return std::nullopt;
      return input(std::string(name) + "." + std::to_string(group));
    }
    const CacheTensors* c = host_.layer_cache_[static_cast<size_t>(L.layer_source[layer])].get();
    if (!c) return std::nullopt;
    if (name == "k" && c->kbuf) return c->k;
    if (name == "v" && c->vbuf) return c->v;
    if (name == "state0" && c->sbuf[0]) return c->state[0];
    if (name == "state1" && c->sbuf[1]) return c->state[1];
    return std::nullopt;
  }

  TensorRef resolve(const graph::Tensor& t) const {
    switch (t.kind) {
      case graph::TensorKind::weight: {
        const Weight& w = *host_.weights_.find(t.name)->second;
        return {w.buffer, w.offset, w.desc};
      }
      case graph::TensorKind::input: {
        const Input* in = find(t.name);
        return {buffer_, in->offset, in->desc};
      }
      case graph::TensorKind::cache: {
        const auto& L = host_.cache_->layout();
        if (t.name == "block_table" || t.name == "slots") {
          const Input* in = find(t.name + "." + std::to_string(L.layer_group[t.layer]));
          return {buffer_, in->offset, in->desc};
        }
        const CacheTensors& c = *host_.layer_cache_[static_cast<size_t>(L.layer_source[t.layer])];
        if (t.name == "k") return {c.kbuf.get(), 0, c.k};
        if (t.name == "v") return {c.vbuf.get(), 0, c.v};
        const int s = t.name == "state0" ? 0 : 1;
        return {c.sbuf[s].get(), 0, c.state[s]};
      }
      default:
        throw_error("[model] internal error: {} is not an external tensor", t.name);
    }
  }

 private:
  struct Input {
    std::string name;
    TensorDesc desc;
    const void* data;
    size_t offset = 0;
  };
  void add(std::string name, TensorDesc desc, const void* data) { inputs_.push_back({std::move(name), desc, data}); }
  const Input* find(std::string_view name) const {
    for (const auto& in : inputs_)
      if (in.name == name) return &in;
    return nullptr;
  }

  ModelHost& host_;
  std::vector<Input> inputs_;
  backend::Buffer* buffer_ = nullptr;
};

namespace {

HostTensor download(const TensorRef& r) {
  HostTensor h;
  h.shape.assign(r.desc.ne.begin(), r.desc.ne.begin() + r.desc.ndim);
  const auto n = static_cast<size_t>(r.desc.numel());
  h.data.resize(n);
  if (r.desc.dtype == DType::i32) {
    std::vector<int32_t> ids(n);
    r.buffer->download(r.offset, ids.data(), n * 4);
    for (size_t i = 0; i < n; ++i) h.data[i] = static_cast<float>(ids[i]);
  } else if (r.desc.dtype == DType::f32) {
    r.buffer->download(r.offset, h.data.data(), n * 4);
  } else {
    std::vector<uint8_t> raw(r.desc.bytes());
    r.buffer->download(r.offset, raw.data(), raw.size());
    to_f32(r.desc.dtype, raw.data(), static_cast<int64_t>(n), h.data.data());
  }
  return h;
}

}  // namespace

cache::Status ModelHost::step(const std::vector<cache::SeqStep>& steps, StepResult* out) {
  StepTimings tm;
  auto t = std::chrono::steady_clock::now();
  auto lap = [&](double& into) {
    const auto now = std::chrono::steady_clock::now();
    into += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  cache::RaggedBatch b;
  if (cache::Status st = cache::plan_batch(*cache_, steps, &b); st != cache::Status::ok) return st;
  if (b.n_tokens == 0 || b.logits_rows.empty())
    throw_error("[model] a step needs at least one token and one logits row");

  StepBindings bindings(*this, b);
  graph::Builder builder(bindings);
  kiln_batch_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.n_tokens = b.n_tokens;
  desc.n_seqs = b.n_seqs;
  desc.n_outputs = static_cast<uint32_t>(b.logits_rows.size());
  kiln_error err{};
  if (vt_->build_graph(model_, builder.host_ops(), &desc, &err) != KILN_OK)
    throw_error("[model] {} build_graph: {}", hp_.architecture ? hp_.architecture : "model",
                builder.last_error().empty() ? kiln_error_text(err, "build_graph") : builder.last_error());
  graph::Graph& graph = builder.graph();
  lap(tm.build);
  const auto outputs = graph.outputs();
  if (outputs.empty()) throw_error("[model] the plugin's graph marks no output");
  const uint32_t logits_id = outputs.front();
  std::vector<std::pair<std::string, uint32_t>> dumps;
  for (const auto& name : options_.dump)
    if (uint32_t id = graph.find(name)) {
      graph.mark_output(id);
      dumps.emplace_back(name, id);
    }

  const graph::Plan plan = graph::plan_memory(graph);
  if (!arena_ || arena_->size() < plan.arena_bytes)
    arena_ = device_->allocate(std::max<size_t>(plan.arena_bytes, 4096), backend::BufferUsage::activations);
  lap(tm.plan);
  bindings.upload(inputs_);
  lap(tm.upload);
  const graph::ExternalResolver ext = [&](uint32_t, const graph::Tensor& t) { return bindings.resolve(t); };
  const backend::BoundGraph bound = graph::bind(graph, plan, *arena_, ext);
  lap(tm.bind);
  device_->compute(bound);
  lap(tm.compute);

  StepResult r;
  HostTensor logits = download(graph::locate(graph, plan, *arena_, ext, logits_id));
  if (logits.shape.size() != 2 || logits.shape[0] != static_cast<int64_t>(b.logits_rows.size()))
    throw_error("[model] the graph's output has shape {}; expected [{}, n_vocab]", shape_str(logits.shape),
                b.logits_rows.size());
  r.rows = static_cast<uint32_t>(logits.shape[0]);
  r.logits = std::move(logits.data);
  for (int32_t row : b.logits_rows)
    for (uint32_t s = 0; s < b.n_seqs; ++s)
      if (row >= b.seqs[s * 4] && row < b.seqs[s * 4] + b.seqs[s * 4 + 1]) r.row_seq.push_back(b.seq_ids[s]);
  for (const auto& [name, id] : dumps) r.dumps[name] = download(graph::locate(graph, plan, *arena_, ext, id));
  lap(tm.download);
  r.timings = tm;
  *out = std::move(r);
  return cache::Status::ok;
}

}  // namespace kiln::model
