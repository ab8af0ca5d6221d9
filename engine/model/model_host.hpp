// The model host: loads a checkpoint for a model plugin onto a backend device (weights checked
// against the plugin's declarations, converted/stacked where declared, uploaded or imported; tables
// a plugin marks host-resident stay in the mapped file), owns the caches, and runs ragged-batch
// steps for a scheduler:
//
//   check(steps)   what a step would take, nothing changes (limits, blocks per cache group)
//   submit(steps)  starts the step on the device and returns (its cache changes are tentative)
//   finish(ticket) waits, downloads the logits and commits; a failure rolls the step back
//
// A graph is built once per batch shape (tokens, sequences, output rows, block-table columns) and
// kept with its memory plan and its prepared executable (Vulkan: the recorded command buffer), so
// a steady decode step builds and records nothing. Two steps may be in flight: each has its own
// inputs and activation arena, and the device runs them in order. Sequences can start from blocks
// held by something else (a prefix-tree node) and from recurrent-state snapshots.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "cache/kv_cache.hpp"
#include "cache/ragged_batch.hpp"
#include "core/config.hpp"
#include "model/checkpoint.hpp"

namespace kiln {
class PluginRegistry;
struct Component;
namespace graph {
struct Tensor;
}
}  // namespace kiln

namespace kiln::model {

struct HostOptions {
  std::string device;  ///< "" / "auto", "cpu", "reference", "vulkan", "vulkan:1" (KILN_DEVICE overrides)
  bool allow_cpu_fallback = true;
  CacheConfig cache;                    ///< block_tokens, memory (bytes or fraction of device memory), kv_dtype
  uint32_t max_context = 0;             ///< 0: the model's, capped at 8192
  uint32_t max_seqs = kDefaultMaxSeqs;  ///< sequences alive at once
  uint32_t max_batch_tokens = kDefaultMaxBatchTokens;
  uint32_t snapshot_slots = 0;  ///< recurrent-state slots beyond max_seqs, for snapshots
  /** Also as many snapshot slots as cache.snapshot_memory_bytes holds (a tenth of the budget when 0): a prefix cache's.
   */
  bool prefix_snapshots = false;
  uint32_t graph_cache = 64;       ///< batch shapes whose graphs are kept (least recently used go)
  bool free_out_of_window = true;  ///< sliding-window layers return old blocks (off: keep; tests)
  std::vector<std::string> dump;   ///< named intermediates to return from each step
  bool progress = true;            ///< progress bar on a TTY for big checkpoints
};

/** What a step may hold; a scheduler plans within these (the host refuses anything beyond). */
struct HostLimits {
  uint32_t n_vocab = 0;           ///< token ids are in [0, n_vocab)
  uint32_t max_batch_tokens = 0;  ///< tokens in one step
  uint32_t max_batch_seqs = 0;    ///< sequences in one step (the host's max_seqs and the device's)
  uint32_t max_seqs = 0;          ///< sequences alive at once
  uint32_t max_context = 0;       ///< tokens per sequence (the device's attention limit included)
  uint32_t block_tokens = 0;      ///< tokens per cache block (a shared partly filled block is copied before a write)
  uint32_t snapshot_slots = 0;    ///< recurrent-state snapshots that can exist at once
  /** The chunk of the model's chunked delta rule (0: none): a step boundary at a multiple of it
   *  changes no bits, so snapshots taken there resume exactly. */
  uint32_t state_chunk = 0;
  bool recurrent = false;  ///< the model has recurrent layers (resuming needs a state snapshot)
};

struct LoadStats {
  double seconds = 0;
  uint64_t weight_bytes = 0;    ///< on the device (imported or uploaded)
  uint64_t imported_bytes = 0;  ///< of which mapped without a copy
  uint64_t host_bytes = 0;      ///< host-resident tables (KILN_TENSOR_HOST), gathered on the host
  uint64_t cache_bytes = 0;
  uint32_t n_tensors = 0;
  /** The weights' formats as they sit on the device, most bytes first: "q4_K 98 (3.1 MiB), ...". */
  std::string formats;
};

/** An intermediate or output brought back to the host, as f32 (ids converted). */
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/** Where one step's wall time went, in seconds (host work, then the device's). */
struct StepTimings {
  double build = 0;     ///< the plugin's build_graph (0 when the shape's graph was cached)
  double plan = 0;      ///< memory planning (0 when cached)
  double bind = 0;      ///< placing tensors in buffers and preparing the executable (0 when cached)
  double upload = 0;    ///< the batch inputs (one upload), block and state copies
  double compute = 0;   ///< from the submit to the end of the device's run
  double download = 0;  ///< logits and dumps
};

/** What a step brings back to the host besides its cache changes (ModelHost::submit). */
struct StepOutputs {
  /** 0: every logits row, n_vocab floats each. k > 0: instead of the rows, each row's k best ids
   *  with their logits, value descending and ties to the lower id (the device's TOP_K): a sampler
   *  that needs no more reads kilobytes per step, not n_vocab floats per row. At most n_vocab. */
  uint32_t candidates = 0;
};

struct StepResult {
  StepTimings timings;
  std::vector<float> logits;  ///< [rows, n_vocab], rows in batch.logits_rows order (empty with candidates)
  uint32_t rows = 0;
  uint32_t candidates = 0;              ///< k per row when the step asked for candidates
  std::vector<int32_t> candidate_ids;   ///< [rows, candidates], best first
  std::vector<float> candidate_logits;  ///< [rows, candidates], their logits
  uint64_t readback_bytes = 0;          ///< brought to the host for this step (logits or candidates, dumps)
  uint32_t kernels = 0;                 ///< kernel launches of this step's run (Vulkan dispatches; CPU devices: nodes)
  uint32_t barriers = 0;                ///< Vulkan pipeline barriers between them
  std::vector<uint64_t> row_seq;        ///< the sequence of each logits row (rows in the steps' order)
  std::map<std::string, HostTensor> dumps;
  bool graph_cached = false;  ///< this step's shape had a graph already
};

/** Why a step or a sequence operation cannot run as asked (nothing changed), or ok. */
struct StepStatus {
  cache::Status status = cache::Status::ok;
  std::optional<uint64_t> seq;  ///< the sequence at fault, when one is
  std::string message;          ///< what, and what to do
  bool ok() const { return status == cache::Status::ok; }
  bool operator==(cache::Status s) const { return status == s; }
};

/** A recurrent state copied aside at a sequence's length (a state slot of its own). */
struct StateSnapshot {
  int32_t slot = -1;
  uint32_t length = 0;
  explicit operator bool() const { return slot >= 0; }
};

/** A submitted step (ModelHost::submit); finish it with ModelHost::finish, in submission order. */
struct StepTicket {
  uint64_t id = 0;
};

class ModelHost {
 public:
  /** Opens `path`, finds the plugin serving its model type in `registry`, loads onto a device. */
  static std::unique_ptr<ModelHost> open(const std::string& path, const PluginRegistry& registry,
                                         const HostOptions& options);
  ModelHost(Checkpoint ckpt, const Component& component, const HostOptions& options);
  ~ModelHost();
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  const Checkpoint& checkpoint() const { return ckpt_; }
  const kiln_model_hparams& hparams() const { return hp_; }
  backend::Device& device() const { return *device_; }
  const LoadStats& stats() const { return stats_; }
  const HostLimits& limits() const { return limits_; }
  const cache::KvCache& cache() const { return *cache_; }

  // ---- sequences
  /** Starts an empty sequence (status out_of_slots at max_seqs). */
  cache::Status add_sequence(uint64_t seq);
  /**
   * Starts a sequence at `prefix.length` on held blocks (each held once more; a partly filled last
   * block is copied before the sequence writes into it). A model with recurrent layers needs the
   * state at that length: `state` from snapshot(), copied into the sequence's own slot.
   */
  cache::Status add_sequence(uint64_t seq, const cache::BlockSpan& prefix, const StateSnapshot* state = nullptr);
  /** Frees the sequence's blocks and slot (after its step in flight, if it has one, finishes). */
  void release(uint64_t seq);
  /** Shortens `seq` to `length`; a model with recurrent layers needs the state there (`state`). */
  cache::Status truncate(uint64_t seq, uint32_t length, const StateSnapshot* state = nullptr);
  uint32_t length(uint64_t seq) const { return cache_->length(seq); }

  // ---- sharing
  /** Holds the blocks of positions [0, length) of `seq` for something other than a sequence. */
  cache::BlockSpan hold(uint64_t seq, uint32_t length);
  void drop(cache::BlockSpan& span) { cache_->drop(span); }
  /**
   * A copy of `seq`'s recurrent state at its length (nullopt when no snapshot slot is free). A
   * sequence whose state a failure lost is refused (HostError): its prefix must not be cached.
   */
  std::optional<StateSnapshot> snapshot(uint64_t seq);
  void release_snapshot(StateSnapshot& s);

  // ---- steps
  /** What the step would take, checked against every limit; nothing changes. */
  StepStatus check(cache::Steps steps, cache::StepNeeds* needs = nullptr) const;
  /**
   * Starts a step and returns without waiting for the device. A status other than ok: nothing ran
   * and nothing changed (the scheduler queues, splits or drops the sequence named). Graph or device
   * failures throw HostError, after rolling the step back. At most two steps are in flight.
   */
  StepStatus submit(cache::Steps steps, StepTicket* ticket, const StepOutputs& outputs = {});
  /**
   * Waits for the oldest step in flight, downloads its logits and commits its cache changes. A
   * device failure throws HostError after rolling back this step and every later one (those
   * then throw from their finish): KV is as before the steps; sequences of a model with recurrent
   * layers lose their state (sequence_failed) and must be released.
   */
  void finish(const StepTicket& ticket, StepResult* out);
  /** submit() and finish(), with no other step in flight (HostError otherwise). */
  StepStatus step(cache::Steps steps, StepResult* out, const StepOutputs& outputs = {});
  size_t in_flight() const { return flight_.size(); }
  size_t cached_graphs() const { return graphs_.size(); }

 private:
  struct Weight;
  struct CacheTensors;
  struct Graph;
  struct Slot;
  struct Flight;
  class ShapeBindings;
  void load_weights(const std::vector<WeightDecl>& decls);
  void make_cache(const HostOptions& options);
  void probe_graph();
  std::shared_ptr<Graph> graph_for(const cache::RaggedBatch& b, uint32_t candidates, StepTimings* tm);
  /** Where an external tensor (weight, input, cache) of `g` lives with the buffers of `slot`. */
  backend::TensorRef resolve(const Graph& g, const Slot& slot, const graph::Tensor& x) const;
  void write_inputs(const Graph& g, const cache::RaggedBatch& b, Slot& slot);
  void copy_blocks(const std::vector<cache::BlockCopy>& copies);
  void copy_state(int32_t from, int32_t to);
  /** Copies a snapshot into `seq`'s slot; if that fails the sequence is marked failed. */
  void restore_state(uint64_t seq, const StateSnapshot& state);
  bool in_flight(uint64_t seq) const;
  void fail_from(size_t first, const std::string& why, bool device_ran);

  Checkpoint ckpt_;
  HostOptions options_;
  const kiln_model_vtable* vt_ = nullptr;
  void* model_ = nullptr;
  kiln_model_hparams hp_{};
  backend::Device* device_ = nullptr;
  std::map<std::string, std::unique_ptr<Weight>, std::less<>> weights_;
  /** Device buffers holding the weights: arenas of consecutive tensors, or one imported file range. */
  std::vector<std::unique_ptr<backend::Buffer>> weight_buffers_;
  std::unique_ptr<cache::KvCache> cache_;
  std::vector<std::unique_ptr<CacheTensors>> layer_cache_;  ///< per layer with own storage, else null
  HostLimits limits_;
  LoadStats stats_;
  // Graphs by shape, least recently used at the front of lru_.
  std::unordered_map<std::string, std::shared_ptr<Graph>> graphs_;
  std::deque<std::string> lru_;
  std::vector<std::unique_ptr<Slot>> slots_;  ///< two: inputs and arena per step in flight
  std::deque<std::unique_ptr<Flight>> flight_;
  uint64_t next_ticket_ = 1;
  std::unordered_map<uint64_t, bool> poisoned_;  ///< sequences whose recurrent state a failure lost
  std::vector<uint64_t> release_after_;          ///< released while in flight
};

}  // namespace kiln::model
