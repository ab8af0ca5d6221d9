// The model host's loading side: the plugin's model, weights (device arenas, zero-copy imports,
// host-resident tables), caches sized from the budget, the limits a scheduler plans within, and
// the sequence operations (start from held blocks and snapshots, truncate, release). Steps:
// host_step.cpp.
#include "model/model_host.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_set>

#include "cache/layout.hpp"
#include "core/bytes.hpp"
#include "core/convert.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/host_parts.hpp"
#include "model/progress.hpp"
#include "plugin/registry.hpp"

namespace kiln::model {

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
    c.data = t.data;
    c.nbytes = t.nbytes;
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
  // A constructor that throws runs no destructor: the plugin's model is destroyed here then.
  struct DestroyOnThrow {
    const kiln_model_vtable* vt;
    void*& model;
    bool armed = true;
    ~DestroyOnThrow() {
      if (armed && model) vt->destroy(model);
      if (armed) model = nullptr;
    }
  } guard{vt_, model_};
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
  for (int i = 0; i < 2; ++i) slots_.push_back(std::make_unique<Slot>());
  // A graph for the smallest batch, built (not run) now: a plugin that cannot build its graph for
  // this checkpoint fails here, at load, naming what is wrong, rather than at the first request.
  probe_graph();
  guard.armed = false;
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(
      "[model] {} ({}) on {}: {} tensors, {} of weights ({} mapped without copy, {} kept on the host), {} of cache, "
      "loaded in {:.2f}s; weights as {}",
      ckpt_.path(), hp_.architecture ? hp_.architecture : "?", device_->info().name, stats_.n_tensors,
      format_bytes(stats_.weight_bytes), format_bytes(stats_.imported_bytes), format_bytes(stats_.host_bytes),
      format_bytes(stats_.cache_bytes), stats_.seconds, stats_.formats);
}

ModelHost::~ModelHost() {
  // Steps and copies still on the device use the buffers freed below: let them end first.
  try {
    device_->sync();
  } catch (...) {
  }
  flight_.clear();
  graphs_.clear();
  if (model_ && vt_) vt_->destroy(model_);
}

void ModelHost::load_weights(const std::vector<WeightDecl>& decls) {
  const auto resolved = check_weights(ckpt_, decls);
  uint64_t total = 0;
  std::unordered_set<const TensorInfo*> used;
  for (const auto& pieces : resolved)
    for (const TensorInfo* t : pieces) total += t->nbytes, used.insert(t);
  // What the model leaves out (a multimodal wrapper's vision and audio towers, unused duplicates)
  // is said once, so a missing feature is not mistaken for a loading bug.
  if (used.size() < ckpt_.tensors().size()) {
    std::string examples;
    uint64_t n = 0, bytes = 0;
    for (const TensorInfo& t : ckpt_.tensors())
      if (!used.count(&t)) {
        if (n++ < 3) examples += (examples.empty() ? "" : ", ") + t.name;
        bytes += t.nbytes;
      }
    log::info("[model] {} of the checkpoint's tensors ({}) are not used by this model and are skipped: {}{}", n,
              format_bytes(bytes), examples, n > 3 ? ", ..." : "");
  }
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
  std::vector<const std::byte*> in_place;  // checkpoint bytes read where they are (imported, host-resident)
  std::vector<size_t> arena_bytes;
  for (size_t i = 0; i < decls.size(); ++i) {
    const WeightDecl& d = decls[i];
    const auto& pieces = resolved[i];
    if (pieces.empty()) continue;
    const TensorInfo& first = *pieces[0];
    if (d.host) {
      // Kept in the mapped file; the host gathers the rows a step needs (host_step.cpp).
      if (d.stack || pieces.size() != 1 || !backend::is_weight_dtype(first.dtype) || first.shape.size() < 2)
        throw_error(
            "[model] tensor '{}' is declared host-resident (KILN_TENSOR_HOST): that takes one floating-point "
            "checkpoint tensor of at least 2 dims, not {} {}",
            d.name, dtype_name(first.dtype), shape_str(first.shape));
      plans[i].w = std::make_unique<Weight>();
      plans[i].w->desc = make_desc(first.dtype, first.shape);
      plans[i].w->host = &first;
      in_place.push_back(first.data);
      stats_.host_bytes += first.nbytes;
      continue;
    }
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
    if (shape.back() % quant_block(target) != 0)
      throw_error("[model] tensor '{}' is {} with rows of {} values, not a multiple of its {}-value block", d.name,
                  dtype_name(target), shape.back(), quant_block(target));
    const size_t bytes = p.w->desc.bytes();
    p.same = native && target == stored;
    if (p.same && pieces.size() == 1) {
      auto imported = device_->import_host(const_cast<std::byte*>(first.data), first.nbytes);
      if (imported) {
        in_place.push_back(first.data);
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
  std::map<DType, std::pair<uint64_t, uint64_t>> by_format;  // tensors and bytes per stored format
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
    if (!p.w->host) stats_.weight_bytes += p.w->desc.bytes();
    ++stats_.n_tensors;
    if (!p.w->host) {  // the formats on the device; host-resident tables are counted in host_bytes
      auto& [count, bytes] = by_format[p.w->desc.dtype];
      ++count, bytes += p.w->desc.bytes();
    }
    weights_.emplace(decls[i].name, std::move(p.w));
  }
  bar.finish();
  ckpt_.release_unpacked(in_place);  // the device has its copies of the rest
  std::vector<std::pair<DType, std::pair<uint64_t, uint64_t>>> formats(by_format.begin(), by_format.end());
  std::stable_sort(formats.begin(), formats.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  for (const auto& [t, cb] : formats)
    stats_.formats += fmt::format("{}{} {} ({})", stats_.formats.empty() ? "" : ", ", dtype_name(t), cb.first,
                                  format_bytes(cb.second));
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
  const auto kv_dtype = [](const std::string& name) {
    const std::optional<DType> t = kv_dtype_from_name(name);
    if (!t) throw_error("[model] cache KV dtype '{}' is not one of f32, f16, bf16, q8, q4", name);
    return static_cast<uint32_t>(to_kiln(*t));
  };
  co.kv_dtype = kv_dtype(o.cache.kv_dtype);
  for (const auto& [layer, name] : o.cache.kv_layers) {
    const int64_t l = layer < 0 ? int64_t{hp_.n_layers} + layer : layer;
    if (l < 0 || l >= hp_.n_layers)
      throw_error("[model] cache.kv_layers names layer {}; the model has {} layers (0..{}, or -1..-{} from the end)",
                  layer, hp_.n_layers, int64_t{hp_.n_layers} - 1, hp_.n_layers);
    if (!co.kv_layers.emplace(static_cast<uint32_t>(l), kv_dtype(name)).second)
      throw_error("[model] cache.kv_layers names layer {} twice (as {} and {})", l, layer, l - hp_.n_layers);
  }
  co.max_seqs = o.max_seqs;
  co.snapshot_slots = o.snapshot_slots;
  co.max_context = o.max_context ? o.max_context : std::min<uint32_t>(hp_.max_context ? hp_.max_context : 8192, 8192);
  co.max_batch_tokens = o.max_batch_tokens;
  co.free_out_of_window = o.free_out_of_window;
  // What the device takes is part of the limits: a head dim its attention kernels lack refuses the
  // model now; a context longer than one query may attend to there is capped (and logged).
  const backend::DeviceLimits dl = device_->limits(co.block_tokens);
  bool attention = false;
  for (uint32_t l = 0; l < specs.size(); ++l) {
    const auto& sp = specs[l];
    if (sp.kind != KILN_CACHE_FULL_KV && sp.kind != KILN_CACHE_SLIDING_KV) continue;
    attention = true;
    if (std::max(sp.head_dim_k, sp.head_dim_v) > dl.max_head_dim)
      throw_error("[model] layer {}: attention head dims {}/{} exceed what device '{}' runs ({}); use another device",
                  l, sp.head_dim_k, sp.head_dim_v, device_->info().name, dl.max_head_dim);
  }
  if (attention && co.max_context > dl.max_attention_keys) {
    log::warn("[model] max_context {} capped at {}: a query on '{}' attends to at most that many keys", co.max_context,
              dl.max_attention_keys, device_->info().name);
    co.max_context = dl.max_attention_keys;
  }
  const backend::MemoryInfo mem = device_->memory();
  co.budget_bytes = cache::budget_from_config(o.cache, mem.total, mem.free);
  // The prefix cache's recurrent-state snapshots come out of the same budget.
  if (o.prefix_snapshots)
    co.snapshot_bytes = o.cache.snapshot_memory_bytes ? o.cache.snapshot_memory_bytes : co.budget_bytes / 10;
  cache::CacheLayout layout = cache::plan_layout(specs, co);
  const uint32_t bt = layout.block_tokens;
  // Caches start zeroed (the zero-state rule): one device-side fill, not host uploads.
  std::vector<backend::CopyRegion> zero;
  auto zeroed = [&zero](std::unique_ptr<backend::Buffer> b) {
    zero.push_back({nullptr, 0, b.get(), 0, b->size()});
    return b;
  };
  layer_cache_.resize(specs.size());
  for (size_t g = 0; g < layout.groups.size(); ++g)
    for (uint32_t l : layout.groups[g].layers) {
      const auto& s = specs[l];
      auto c = std::make_unique<CacheTensors>();
      const int64_t nb = std::max<int64_t>(layout.groups[g].n_blocks, 1);
      const DType kv = dtype_from_kiln(layout.layer_kv_dtype[l]);
      c->k = make_desc(kv, {nb, bt, s.n_kv_heads, s.head_dim_k});
      c->v = make_desc(kv, {nb, bt, s.n_kv_heads, s.head_dim_v});
      c->kbuf = zeroed(device_->allocate(c->k.bytes(), backend::BufferUsage::state));
      c->vbuf = zeroed(device_->allocate(c->v.bytes(), backend::BufferUsage::state));
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
      c->sbuf[k] = zeroed(device_->allocate(c->state[k].bytes(), backend::BufferUsage::state));
      stats_.cache_bytes += c->state[k].bytes();
    }
    layer_cache_[l] = std::move(c);
  }
  device_->copy(zero);
  device_->sync();
  if (!layout.groups.empty())
    log::info("[model] KV cache: {}; {} bytes per token, {} tokens fit", layout.describe_kv_dtypes(),
              layout.bytes_per_token(), layout.token_capacity());
  limits_.n_vocab = hp_.n_vocab;
  limits_.max_batch_tokens = co.max_batch_tokens;
  limits_.max_batch_seqs = std::min(co.max_seqs, dl.max_batch_seqs);
  limits_.max_seqs = co.max_seqs;
  limits_.max_context = co.max_context;
  limits_.block_tokens = layout.block_tokens;
  limits_.recurrent = layout.has_recurrent();
  limits_.snapshot_slots = layout.has_recurrent() ? layout.n_state_slots - co.max_seqs : 0;
  cache_ = std::make_unique<cache::KvCache>(std::move(layout), co);
}

// ------------------------------------------------------------------------------------------------
// Sequences and sharing. A sequence with a step in flight may be released (it goes when the step
// finishes) but not otherwise changed.

cache::Status ModelHost::add_sequence(uint64_t seq) {
  const cache::Status st = cache_->add(seq);
  if (st == cache::Status::ok) poisoned_.erase(seq);  // a new sequence under a released id
  return st;
}

cache::Status ModelHost::add_sequence(uint64_t seq, const cache::BlockSpan& prefix, const StateSnapshot* state) {
  if (limits_.recurrent && prefix.length > 0 && (!state || !*state || state->length != prefix.length))
    return cache::Status::prefix_unusable;  // the recurrent layers would start from a wrong state
  if (cache::Status st = cache_->add(seq, prefix); st != cache::Status::ok) return st;
  poisoned_.erase(seq);
  if (limits_.recurrent && prefix.length > 0) restore_state(seq, *state);
  return cache::Status::ok;
}

void ModelHost::release(uint64_t seq) {
  if (in_flight(seq)) {
    release_after_.push_back(seq);
    return;
  }
  cache_->release(seq);
  poisoned_.erase(seq);
}

cache::Status ModelHost::truncate(uint64_t seq, uint32_t length, const StateSnapshot* state) {
  if (in_flight(seq)) return cache::Status::busy;
  if (!cache_->has(seq)) return cache::Status::unknown_sequence;
  const uint32_t now = cache_->length(seq);
  if (length == now) return cache::Status::ok;
  if (limits_.recurrent && length > 0 && (!state || !*state || state->length != length))
    return cache::Status::prefix_unusable;  // the state cannot be rolled back; it must be restored
  if (cache::Status st = cache_->truncate(seq, length); st != cache::Status::ok) return st;
  if (limits_.recurrent && length > 0) restore_state(seq, *state);
  return cache::Status::ok;
}

void ModelHost::restore_state(uint64_t seq, const StateSnapshot& state) {
  try {
    copy_state(state.slot, cache_->state_slot(seq));
  } catch (...) {
    poisoned_[seq] = true;  // the blocks changed but the state did not follow (a lost device)
    throw;
  }
}

cache::BlockSpan ModelHost::hold(uint64_t seq, uint32_t length) {
  if (in_flight(seq)) throw_error("[model] hold: sequence {} has a step in flight; finish it first", seq);
  return cache_->hold(seq, length);
}

std::optional<StateSnapshot> ModelHost::snapshot(uint64_t seq) {
  if (in_flight(seq)) throw_error("[model] snapshot: sequence {} has a step in flight; finish it first", seq);
  if (!cache_->has(seq)) throw_error("[model] snapshot: unknown sequence {}", seq);
  if (!limits_.recurrent) throw_error("[model] snapshot: the model has no recurrent state (hold() its blocks instead)");
  if (poisoned_.count(seq))
    throw_error(
        "[model] snapshot: sequence {}'s recurrent state was lost with a failed step; its prefix cannot be "
        "cached",
        seq);
  const int32_t slot = cache_->take_slot();
  if (slot < 0) return std::nullopt;
  try {
    copy_state(cache_->state_slot(seq), slot);
  } catch (...) {
    cache_->free_slot(slot);
    throw;
  }
  return StateSnapshot{slot, cache_->length(seq)};
}

void ModelHost::release_snapshot(StateSnapshot& s) {
  if (s.slot >= 0) cache_->free_slot(s.slot);
  s = {};
}

void ModelHost::copy_state(int32_t from, int32_t to) {
  std::vector<backend::CopyRegion> regions;
  for (const auto& c : layer_cache_) {
    if (!c) continue;
    for (int k = 0; k < 2; ++k) {
      if (!c->sbuf[k]) continue;
      const size_t bytes = c->state[k].bytes() / static_cast<size_t>(c->state[k].ne[0]);
      regions.push_back({c->sbuf[k].get(), static_cast<size_t>(from) * bytes, c->sbuf[k].get(),
                         static_cast<size_t>(to) * bytes, bytes});
    }
  }
  if (!regions.empty()) device_->copy(regions);
}

void ModelHost::copy_blocks(const std::vector<cache::BlockCopy>& copies) {
  std::vector<backend::CopyRegion> regions;
  const auto& L = cache_->layout();
  for (const cache::BlockCopy& c : copies)
    for (uint32_t l : L.groups[c.group].layers) {
      const CacheTensors& t = *layer_cache_[l];
      for (const auto& [buf, desc] : {std::pair{t.kbuf.get(), t.k}, std::pair{t.vbuf.get(), t.v}}) {
        const size_t bytes = desc.bytes() / static_cast<size_t>(desc.ne[0]);  // one block
        regions.push_back({buf, static_cast<size_t>(c.src) * bytes, buf, static_cast<size_t>(c.dst) * bytes, bytes});
      }
    }
  if (!regions.empty()) device_->copy(regions);
}

}  // namespace kiln::model
