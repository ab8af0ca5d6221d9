// The model host's step side: graphs built once per batch shape (with their memory plan, input
// layout and one prepared executable per step slot), the checks a step must pass before anything
// runs, and the pipeline of up to two steps in flight with their cache transactions (committed when
// a step finishes, rolled back when it fails).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/ops.hpp"
#include "core/convert.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "graph/lower.hpp"
#include "model/host_parts.hpp"

namespace kiln::model {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point& t) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

/** Block tables and slots are per-group inputs, named "<name>.<group>"; a layer's cache names the bare one. */
bool per_group(std::string_view name) {
  return name == "block_table" || name == "slots";
}
std::string group_input(std::string_view name, size_t group) {
  return fmt::format("{}.{}", name, group);
}

/** The shape a graph depends on (ABI.md, "Graphs depend on shapes only"), and what it reads back. */
std::string shape_key(const cache::RaggedBatch& b, uint32_t candidates) {
  std::string k = fmt::format("{}/{}/{}", b.n_tokens, b.n_seqs, b.logits_rows.size());
  for (const auto& g : b.groups) k += fmt::format("/{}", g.max_blocks);
  if (candidates) k += fmt::format("/c{}", candidates);
  return k;
}

/** A tensor from a slot's readback buffer (host-visible: a copy in memory, no transfer), as f32. */
HostTensor read_back(const backend::Buffer& buf, size_t offset, const TensorDesc& d) {
  HostTensor h;
  h.shape.assign(d.ne.begin(), d.ne.begin() + d.ndim);
  const auto n = static_cast<size_t>(d.numel());
  h.data.resize(n);
  if (d.dtype == DType::i32) {
    std::vector<int32_t> ids(n);
    buf.download(offset, ids.data(), n * 4);
    for (size_t i = 0; i < n; ++i) h.data[i] = static_cast<float>(ids[i]);
  } else if (d.dtype == DType::f32) {
    buf.download(offset, h.data.data(), n * 4);
  } else {
    std::vector<uint8_t> raw(d.bytes());
    buf.download(offset, raw.data(), raw.size());
    to_f32(d.dtype, raw.data(), static_cast<int64_t>(n), h.data.data());
  }
  return h;
}

}  // namespace

/** The names a plugin may ask for while building a graph for one batch shape. */
class ModelHost::ShapeBindings : public graph::Bindings {
 public:
  ShapeBindings(ModelHost& host, const cache::RaggedBatch& b) : host_(host) {
    const auto N = static_cast<int64_t>(b.n_tokens), S = static_cast<int64_t>(b.n_seqs);
    add("tokens", make_desc(DType::i32, {N}));
    add("positions", make_desc(DType::i32, {N}));
    add("seqs", make_desc(DType::i32, {S, 4}));
    add("logits_rows", make_desc(DType::i32, {static_cast<int64_t>(b.logits_rows.size())}));
    for (size_t g = 0; g < b.groups.size(); ++g) {
      add(group_input("block_table", g), make_desc(DType::i32, {S, static_cast<int64_t>(b.groups[g].max_blocks)}));
      add(group_input("slots", g), make_desc(DType::i32, {N}));
    }
  }

  std::vector<InputSlot> take_inputs() { return std::move(inputs_); }

  std::optional<TensorDesc> weight(std::string_view name) override {
    auto it = host_.weights_.find(name);
    if (it == host_.weights_.end()) return std::nullopt;
    return it->second->desc;
  }
  std::optional<TensorDesc> input(std::string_view name) override {
    for (const auto& in : inputs_)
      if (in.name == name) return in.desc;
    return std::nullopt;
  }
  std::optional<TensorDesc> cache(uint32_t layer, std::string_view name) override {
    if (layer >= host_.layer_cache_.size()) return std::nullopt;
    const auto& L = host_.cache_->layout();
    const int32_t group = L.layer_group[layer];
    if (per_group(name)) {
      if (group < 0) return std::nullopt;
      return input(group_input(name, static_cast<size_t>(group)));
    }
    const CacheTensors* c = host_.layer_cache_[static_cast<size_t>(L.layer_source[layer])].get();
    if (!c) return std::nullopt;
    if (name == "k" && c->kbuf) return c->k;
    if (name == "v" && c->vbuf) return c->v;
    if (name == "state0" && c->sbuf[0]) return c->state[0];
    if (name == "state1" && c->sbuf[1]) return c->state[1];
    return std::nullopt;
  }
  bool host_resident(std::string_view name) override {
    auto it = host_.weights_.find(name);
    return it != host_.weights_.end() && it->second->host;
  }
  std::optional<std::string> host_gather(std::string_view table, std::string_view ids) override {
    auto it = host_.weights_.find(table);
    if (it == host_.weights_.end() || !it->second->host) return std::nullopt;
    // The host gathers by the per-token and per-row id lists it keeps: tokens, positions, logits_rows.
    const InputSlot* id = nullptr;
    if (ids == "tokens" || ids == "positions" || ids == "logits_rows")
      for (const auto& in : inputs_)
        if (in.name == ids) id = &in;
    if (!id)
      throw_error(
          "[model] GET_ROWS of host-resident '{}' by '{}': the host gathers rows by \"tokens\", "
          "\"positions\" or \"logits_rows\" only",
          table, ids.empty() ? "an intermediate" : std::string(ids));
    const std::string name = fmt::format("rows of {} by {}", table, ids);
    if (!input(name)) {
      std::vector<int64_t> shape(it->second->desc.ne.begin(), it->second->desc.ne.begin() + it->second->desc.ndim);
      shape[0] = id->desc.ne[0];
      InputSlot in;
      in.name = name;
      in.desc = make_desc(DType::f32, shape);
      in.gather_table = std::string(table);
      in.gather_ids = std::string(ids);
      inputs_.push_back(std::move(in));
    }
    return name;
  }

 private:
  void add(std::string name, TensorDesc desc) { inputs_.push_back({std::move(name), desc, 0, {}, {}}); }
  ModelHost& host_;
  std::vector<InputSlot> inputs_;
};

std::shared_ptr<ModelHost::Graph> ModelHost::graph_for(const cache::RaggedBatch& b, uint32_t candidates,
                                                       StepTimings* tm) {
  const std::string key = shape_key(b, candidates);
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    lru_.erase(std::find(lru_.begin(), lru_.end(), key));
    lru_.push_back(key);
    return it->second;
  }
  auto t = Clock::now();
  auto g = std::make_shared<Graph>();
  g->key = key;
  ShapeBindings bindings(*this, b);
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
  g->graph = std::move(builder.graph());
  const auto outputs = g->graph.outputs();
  if (outputs.empty()) throw_error("[model] the plugin's graph marks no output");
  g->logits = outputs.front();
  const TensorDesc& ld = g->graph.tensor(g->logits).desc;
  if (ld.ndim != 2 || ld.ne[0] != static_cast<int64_t>(b.logits_rows.size()))
    throw_error("[model] the graph's output has shape {}; expected [{}, n_vocab]", ld.str(), b.logits_rows.size());
  for (const auto& name : options_.dump)
    if (uint32_t id = g->graph.find(name)) {
      g->graph.mark_output(id);
      g->dumps.emplace_back(name, id);
    }
  if (candidates && ld.dtype == DType::f32) {
    // The sampler's candidates are the step's last node: the logits stay on the device. (Logits in
    // another dtype are read back whole; the caller sees candidates == 0 in the result.)
    kiln_op_params p{};
    p.k = static_cast<int32_t>(std::min<int64_t>(candidates, ld.ne[1]));
    p.mode = kTopKValues;
    const uint32_t src[] = {g->logits};
    g->candidates = static_cast<uint32_t>(p.k);
    g->candidate_tensor = g->graph.add_op(KILN_OP_TOP_K, src, p);
    g->graph.mark_output(g->candidate_tensor);
  }
  tm->build += seconds_since(t);
  g->plan = graph::plan_memory(g->graph);
  g->readback.emplace_back(g->candidates ? g->candidate_tensor : g->logits, 0);
  for (const auto& [name, id] : g->dumps) g->readback.emplace_back(id, 0);
  for (auto& [t, off] : g->readback) {
    off = g->readback_bytes;
    g->readback_bytes += (g->graph.tensor(t).desc.bytes() + 255) / 256 * 256;
  }
  g->inputs = bindings.take_inputs();
  for (auto& in : g->inputs) {
    in.offset = g->input_bytes;
    g->input_bytes += (in.desc.bytes() + 255) / 256 * 256;
  }
  tm->plan += seconds_since(t);
  graphs_.emplace(key, g);
  lru_.push_back(key);
  // The least recently used shapes go (a prefill shape seen once must not pin an executable
  // forever); a step in flight keeps its graph alive through its own reference.
  while (lru_.size() > std::max<uint32_t>(options_.graph_cache, 2)) {
    graphs_.erase(lru_.front());
    lru_.pop_front();
  }
  return g;
}

void ModelHost::probe_graph() {
  cache::RaggedBatch b;
  b.n_tokens = b.n_seqs = 1;
  b.logits_rows = {0};
  b.groups.resize(cache_->layout().groups.size());
  for (auto& g : b.groups) g.max_blocks = 1;
  StepTimings tm;
  const auto g = graph_for(b, 0, &tm);
  for (const graph::GraphNode& n : g->graph.nodes())
    if (n.op == KILN_OP_GATED_DELTA)
      limits_.state_chunk = n.params.chunk > 0 ? static_cast<uint32_t>(n.params.chunk) : 64;
}

void ModelHost::write_inputs(const Graph& g, const cache::RaggedBatch& b, Slot& slot) {
  std::vector<uint8_t> bytes(g.input_bytes, 0);
  auto put = [&](const std::string& name, const std::vector<int32_t>& v) {
    const InputSlot* in = g.input(name);
    if (in && !v.empty()) std::memcpy(bytes.data() + in->offset, v.data(), v.size() * 4);
  };
  put("tokens", b.tokens);
  put("positions", b.positions);
  put("seqs", b.seqs);
  put("logits_rows", b.logits_rows);
  for (size_t gr = 0; gr < b.groups.size(); ++gr) {
    put(group_input("block_table", gr), b.groups[gr].block_table);
    put(group_input("slots", gr), b.groups[gr].slots);
  }
  for (const InputSlot& in : g.inputs) {
    if (in.gather_table.empty()) continue;
    // Rows of a host-resident table: read from the mapped file and widened to f32 here.
    const TensorInfo& t = *weights_.find(in.gather_table)->second->host;
    const std::vector<int32_t>& ids = in.gather_ids == "tokens"      ? b.tokens
                                      : in.gather_ids == "positions" ? b.positions
                                                                     : b.logits_rows;
    if (static_cast<int64_t>(ids.size()) != in.desc.ne[0])
      throw_error("[model] internal error: {} ids for the {} rows of '{}'", ids.size(), in.desc.ne[0], in.name);
    const int64_t cols = t.numel() / t.shape[0];
    const size_t row = row_bytes(t.dtype, cols);
    auto* out = reinterpret_cast<float*>(bytes.data() + in.offset);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= t.shape[0])
        throw_error("[model] row {} of host-resident '{}' asked for; it has {} rows", ids[i], t.name, t.shape[0]);
      to_f32(t.dtype, t.data + static_cast<size_t>(ids[i]) * row, cols, out + static_cast<int64_t>(i) * cols);
    }
  }
  slot.inputs->upload(0, bytes.data(), bytes.size());  // one upload per step
}

StepStatus ModelHost::check(cache::Steps steps, cache::StepNeeds* needs) const {
  auto fail = [](cache::Status st, std::optional<uint64_t> seq, std::string msg) {
    return StepStatus{st, seq, std::move(msg)};
  };
  size_t tokens = 0, rows = 0, seqs = 0;
  for (const auto& s : steps) {
    if (!cache_->has(s.seq))
      return fail(cache::Status::unknown_sequence, s.seq, fmt::format("unknown sequence {}", s.seq));
    if (poisoned_.count(s.seq))
      return fail(cache::Status::sequence_failed, s.seq,
                  fmt::format("sequence {}: {}", s.seq, cache::status_message(cache::Status::sequence_failed)));
    for (int32_t t : s.tokens)
      if (t < 0 || static_cast<uint32_t>(t) >= limits_.n_vocab)
        return fail(
            cache::Status::invalid_token, s.seq,
            fmt::format("sequence {}: token id {} is outside the vocabulary [0, {})", s.seq, t, limits_.n_vocab));
    if (s.tokens.empty()) continue;
    tokens += s.tokens.size();
    rows += s.logits_all ? s.tokens.size() : s.logits ? 1 : 0;
    ++seqs;
    if (uint64_t{cache_->length(s.seq)} + s.tokens.size() > limits_.max_context)
      return fail(cache::Status::too_long, s.seq,
                  fmt::format("sequence {}: {} + {} tokens exceed the context limit of {}", s.seq,
                              cache_->length(s.seq), s.tokens.size(), limits_.max_context));
  }
  if (!tokens || !rows)
    return fail(cache::Status::empty_step, std::nullopt, cache::status_message(cache::Status::empty_step));
  if (tokens > limits_.max_batch_tokens)
    return fail(cache::Status::too_many_tokens, std::nullopt,
                fmt::format("{} tokens in one step; at most {} (max_batch_tokens)", tokens, limits_.max_batch_tokens));
  if (seqs > limits_.max_batch_seqs)
    return fail(cache::Status::too_many_seqs, std::nullopt,
                fmt::format("{} sequences in one step; at most {} on '{}'", seqs, limits_.max_batch_seqs,
                            device_->info().name));
  const cache::Status st = cache_->check(cache::step_appends(steps), needs);
  if (st != cache::Status::ok) {
    std::optional<uint64_t> culprit;
    if (st == cache::Status::repeated_in_step) {
      std::vector<uint64_t> seen;
      for (const auto& s : steps)
        if (!s.tokens.empty() && std::find(seen.begin(), seen.end(), s.seq) != seen.end())
          culprit = s.seq;
        else
          seen.push_back(s.seq);
    }
    return fail(st, culprit, cache::status_message(st));
  }
  return {};
}

TensorRef ModelHost::resolve(const Graph& g, const Slot& slot, const graph::Tensor& x) const {
  switch (x.kind) {
    case graph::TensorKind::weight: {
      const Weight& w = *weights_.find(x.name)->second;
      if (w.host)
        throw_error(
            "[model] weight '{}' is host-resident (KILN_TENSOR_HOST): only GET_ROWS by a batch input may read it",
            x.name);
      return {w.buffer, w.offset, w.desc};
    }
    case graph::TensorKind::input: {
      const InputSlot* in = g.input(x.name);
      return {slot.inputs.get(), in->offset, in->desc};
    }
    case graph::TensorKind::cache: {
      const auto& L = cache_->layout();
      if (per_group(x.name)) {
        const InputSlot* in = g.input(group_input(x.name, static_cast<size_t>(L.layer_group[x.layer])));
        return {slot.inputs.get(), in->offset, in->desc};
      }
      const CacheTensors& c = *layer_cache_[static_cast<size_t>(L.layer_source[x.layer])];
      if (x.name == "k") return {c.kbuf.get(), 0, c.k};
      if (x.name == "v") return {c.vbuf.get(), 0, c.v};
      const int s = x.name == "state0" ? 0 : 1;
      return {c.sbuf[s].get(), 0, c.state[s]};
    }
    default:
      throw_error("[model] internal error: {} is not an external tensor", x.name);
  }
}

bool ModelHost::in_flight(uint64_t seq) const {
  for (const auto& f : flight_)
    if (f->failed.empty() && std::find(f->seq_ids.begin(), f->seq_ids.end(), seq) != f->seq_ids.end()) return true;
  return false;
}

StepStatus ModelHost::submit(cache::Steps steps, StepTicket* ticket, const StepOutputs& outputs) {
  if (flight_.size() >= slots_.size())
    throw_error("[model] {} steps are in flight already; finish the oldest first", flight_.size());
  if (StepStatus st = check(steps); !st.ok()) return st;
  size_t k = 0;
  while (slots_[k]->busy) ++k;
  Slot& slot = *slots_[k];
  auto f = std::make_unique<Flight>();
  auto t = Clock::now();
  if (cache::Status st = cache_->begin(cache::step_appends(steps), &f->tx); st != cache::Status::ok)
    return {st, std::nullopt, cache::status_message(st)};
  const cache::RaggedBatch b = cache::describe_batch(*cache_, f->tx, steps);
  try {
    f->graph_cached = graphs_.count(shape_key(b, outputs.candidates)) != 0;
    f->graph = graph_for(b, outputs.candidates, &f->timings);
    Graph& g = *f->graph;
    seconds_since(t);
    // The slot's buffers grow to the largest graph seen; executables bound to replaced buffers go.
    auto grow = [&](std::unique_ptr<backend::Buffer>& buf, size_t need, backend::BufferUsage usage) {
      if (buf && buf->size() >= need) return;
      for (auto& [key, other] : graphs_) other->exe[k].reset();
      g.exe[k].reset();
      buf.reset();
      buf = device_->allocate(std::max<size_t>(need, 4096), usage);
      ++slot.generation;
    };
    grow(slot.arena, g.plan.arena_bytes, backend::BufferUsage::activations);
    grow(slot.inputs, g.input_bytes, backend::BufferUsage::inputs);
    grow(slot.readback, g.readback_bytes, backend::BufferUsage::readback);
    if (!g.exe[k] || g.generation[k] != slot.generation) {
      const graph::ExternalResolver ext = [&](uint32_t, const graph::Tensor& x) { return resolve(g, slot, x); };
      backend::BoundGraph bound = graph::bind(g.graph, g.plan, *slot.arena, ext);
      // The logits and dumps are copied into host-visible memory within the run, so finishing a
      // step reads them without a transfer that would queue behind the next step.
      for (const auto& [t, off] : g.readback) {
        const TensorRef r = graph::locate(g.graph, g.plan, *slot.arena, ext, t);
        bound.copies_after.push_back({r.buffer, r.offset, slot.readback.get(), off, r.desc.bytes()});
      }
      g.exe[k] = device_->prepare(bound);
      g.generation[k] = slot.generation;
      f->timings.bind += seconds_since(t);
    }
    copy_blocks(f->tx.copies);  // shared partly filled blocks, before the graph writes into the copies
    write_inputs(g, b, slot);
    f->timings.upload += seconds_since(t);
    f->submitted = Clock::now();
    device_->submit(*g.exe[k]);
  } catch (const std::exception& e) {
    cache_->rollback(f->tx);
    throw HostError(e.what());
  }
  f->id = next_ticket_++;
  f->slot = k;
  f->seq_ids = b.seq_ids;
  for (int32_t row : b.logits_rows)
    for (size_t s = 0; s < b.seq_ids.size(); ++s)
      if (row >= b.seqs[s * 4] && row < b.seqs[s * 4] + b.seqs[s * 4 + 1]) f->row_seq.push_back(b.seq_ids[s]);
  slot.busy = true;
  *ticket = StepTicket{f->id};
  flight_.push_back(std::move(f));
  return {};
}

void ModelHost::fail_from(size_t first, const std::string& why, bool device_ran) {
  // Later steps ran (or run) after the failed one on the device: let them end, then undo them
  // latest first, down to the failed one.
  for (size_t i = first; i < flight_.size(); ++i) {
    Flight& f = *flight_[i];
    if (auto& exe = f.graph->exe[f.slot]) try {
        device_->wait(*exe);
      } catch (...) {
      }
  }
  for (size_t i = flight_.size(); i-- > first;) {
    Flight& f = *flight_[i];
    if (!f.failed.empty()) continue;
    cache_->rollback(f.tx);
    slots_[f.slot]->busy = false;
    // The in-place state updates of recurrent layers cannot be undone.
    if (device_ran && limits_.recurrent)
      for (uint64_t s : f.seq_ids) poisoned_[s] = true;
    f.failed = i == first ? why : "an earlier step failed and this one was rolled back with it: " + why;
  }
}

void ModelHost::finish(const StepTicket& ticket, StepResult* out) {
  if (flight_.empty() || flight_.front()->id != ticket.id)
    throw_error("[model] finish: step {} is not the oldest in flight; finish steps in the order submitted", ticket.id);
  Flight& f = *flight_.front();
  auto drain_releases = [&] {
    std::vector<uint64_t> later;
    for (uint64_t s : release_after_)
      if (in_flight(s))
        later.push_back(s);
      else
        cache_->release(s), poisoned_.erase(s);
    release_after_ = std::move(later);
  };
  if (!f.failed.empty()) {
    const std::string why = f.failed;
    flight_.pop_front();
    drain_releases();
    throw HostError(why);
  }
  Graph& g = *f.graph;
  StepResult r;
  r.timings = f.timings;
  r.graph_cached = f.graph_cached;
  try {
    device_->wait(*g.exe[f.slot]);
    auto t = Clock::now();
    r.timings.compute = std::chrono::duration<double>(t - f.submitted).count();
    // The run copied the logits (or candidates) and dumps into the slot's host-visible readback
    // buffer: read them there, no second transfer.
    const backend::Buffer& rb = *slots_[f.slot]->readback;
    const auto& [out_tensor, out_off] = g.readback.front();
    const TensorDesc& od = g.graph.tensor(out_tensor).desc;
    r.rows = static_cast<uint32_t>(od.ne[0]);
    if (g.candidates) {
      const size_t k = g.candidates, n = size_t{r.rows} * k;
      std::vector<int32_t> raw(2 * n);
      rb.download(out_off, raw.data(), raw.size() * 4);
      r.candidates = g.candidates;
      r.candidate_ids.resize(n);
      r.candidate_logits.resize(n);
      for (size_t row = 0; row < r.rows; ++row) {
        std::memcpy(r.candidate_ids.data() + row * k, raw.data() + row * 2 * k, k * 4);
        std::memcpy(r.candidate_logits.data() + row * k, raw.data() + row * 2 * k + k, k * 4);
      }
    } else {
      r.logits = read_back(rb, out_off, od).data;
    }
    r.readback_bytes = od.bytes();
    const backend::ExecStats es = g.exe[f.slot]->stats();
    r.kernels = es.kernels;
    r.barriers = es.barriers;
    for (size_t i = 0; i < g.dumps.size(); ++i) {
      const auto& [t_id, off] = g.readback[i + 1];
      const TensorDesc& d = g.graph.tensor(t_id).desc;
      r.dumps[g.dumps[i].first] = read_back(rb, off, d);
      r.readback_bytes += d.bytes();
    }
    r.timings.download = seconds_since(t);
  } catch (const std::exception& e) {
    const std::string why = fmt::format("[model] step failed on '{}': {}", device_->info().name, e.what());
    fail_from(0, why, true);
    flight_.pop_front();
    drain_releases();
    throw HostError(why);
  }
  r.row_seq = std::move(f.row_seq);
  cache_->commit(f.tx);
  slots_[f.slot]->busy = false;
  flight_.pop_front();
  drain_releases();
  *out = std::move(r);
}

StepStatus ModelHost::step(cache::Steps steps, StepResult* out, const StepOutputs& outputs) {
  if (!flight_.empty())
    throw_error("[model] step: {} step(s) in flight; finish them first (or use submit / finish)", flight_.size());
  StepTicket ticket;
  StepStatus st = submit(steps, &ticket, outputs);
  if (!st.ok()) return st;
  finish(ticket, out);
  return st;
}

}  // namespace kiln::model
