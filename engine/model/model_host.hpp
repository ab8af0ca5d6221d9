// The model host: loads a checkpoint for a model plugin onto a backend device (weights checked
// against the plugin's declarations, converted/stacked where declared, uploaded or imported), owns
// the caches, and runs one ragged-batch step: the plugin builds the graph through kiln_host_ops,
// the graph is planned and bound, the device computes, logits (and any named intermediates asked
// for) come back.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cache/kv_cache.hpp"
#include "cache/ragged_batch.hpp"
#include "core/config.hpp"
#include "model/checkpoint.hpp"

namespace kiln {
class PluginRegistry;
struct Component;
}  // namespace kiln

namespace kiln::model {

struct HostOptions {
  std::string device;  ///< "" / "auto", "cpu", "vulkan", "vulkan:1" (KILN_DEVICE overrides)
  bool allow_cpu_fallback = true;
  CacheConfig cache;  ///< block_tokens and memory (bytes or fraction of device memory)
  uint32_t kv_dtype = KILN_DTYPE_F32;
  uint32_t max_context = 0;  ///< 0: the model's, capped at 8192
  uint32_t max_seqs = 8;
  uint32_t max_batch_tokens = 2048;
  bool free_out_of_window = true;  ///< sliding-window layers return old blocks (off: keep; tests)
  std::vector<std::string> dump;   ///< named intermediates to return from each step
  bool progress = true;            ///< progress bar on a TTY for big checkpoints
};

struct LoadStats {
  double seconds = 0;
  uint64_t weight_bytes = 0;    ///< on the device (imported or uploaded)
  uint64_t imported_bytes = 0;  ///< of which mapped without a copy
  uint64_t cache_bytes = 0;
  uint32_t n_tensors = 0;
};

/** An intermediate or output brought back to the host, as f32 (ids converted). */
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/** Where one step's wall time went, in seconds (host work, then the device's). */
struct StepTimings {
  double build = 0;     ///< the plugin's build_graph
  double plan = 0;      ///< memory planning
  double bind = 0;      ///< placing tensors in buffers
  double upload = 0;    ///< the batch inputs
  double compute = 0;   ///< Device::compute: recording, submitting, waiting for the device
  double download = 0;  ///< logits and dumps
};

struct StepResult {
  StepTimings timings;
  std::vector<float> logits;  ///< [rows, n_vocab], rows in batch.logits_rows order
  uint32_t rows = 0;
  std::vector<uint64_t> row_seq;  ///< the sequence of each logits row
  std::map<std::string, HostTensor> dumps;
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
  cache::KvCache& cache() { return *cache_; }

  /** Starts a sequence (cache status, e.g. out_of_slots). */
  cache::Status add_sequence(uint64_t seq) { return cache_->add(seq); }
  void release(uint64_t seq) { cache_->release(seq); }
  /**
   * Runs one step. A cache status other than ok means nothing ran and nothing changed (the
   * scheduler queues or preempts). Graph or device failures throw HostError; the sequences of that
   * step should then be released.
   */
  cache::Status step(const std::vector<cache::SeqStep>& steps, StepResult* out);

 private:
  struct Weight;
  struct CacheTensors;
  class StepBindings;
  void load_weights(const std::vector<WeightDecl>& decls);
  void make_cache(const HostOptions& options);

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
  std::unique_ptr<backend::Buffer> arena_, inputs_;
  LoadStats stats_;
};

}  // namespace kiln::model
