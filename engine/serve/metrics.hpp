// Server metrics in Prometheus' text format (GET /metrics). Counters and histograms are updated from
// HTTP threads and engine threads; one mutex guards them (updates are a few per request and step).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  /** Appends `name_bucket`, `name_sum`, `name_count` lines with `labels` ("" or `model="x"`). */
  void write(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

/** What an engine reports after each step (gauges). */
struct EngineGauges {
  uint64_t waiting = 0, running = 0;
  uint64_t kv_blocks_used = 0, kv_blocks_free = 0;
  uint64_t kv_token_capacity = 0, kv_bytes_per_token = 0;  ///< what the chosen KV formats fit in the budget
  uint64_t preemptions = 0;
  uint64_t prefix_lookups = 0, prefix_hits = 0, cached_tokens = 0;  ///< prefix cache (counters)
  uint64_t queried_tokens = 0;  ///< tokens of the sequences that looked the prefix cache up
  double kv_usage = 0;          ///< 0-1, blocks only the prefix cache holds counted free (vLLM's)
  uint32_t block_tokens = 0;
  uint64_t cached_blocks = 0, evicted_blocks = 0, snapshots = 0, snapshot_bytes = 0, evicted_snapshots = 0;
  uint64_t steps = 0;
  double step_seconds = 0, host_seconds = 0;  ///< totals over every step
  uint64_t readback_bytes = 0;                ///< brought back from the device over every step
  uint64_t candidate_steps = 0;               ///< steps that read back candidates instead of logits rows
  uint64_t kernels = 0, barriers = 0;         ///< of the last step (Vulkan dispatches and barriers; CPU: nodes)
};

class Metrics {
 public:
  void request_done(const std::string& model, int status);
  void tokens(const std::string& model, uint64_t prompt, uint64_t generated);
  void first_token(const std::string& model, double seconds);
  void per_output_token(const std::string& model, double seconds);
  void step(const std::string& model, double step_seconds, double host_seconds);
  void gauges(const std::string& model, const EngineGauges& g);
  void cancelled(const std::string& model);
  void in_flight(int delta);
  /**
   * The Prometheus text exposition; with `vllm_names`, also the gauges and counters routers read
   * under vLLM's names (label model_name), `queued` giving each model's sequences admitted but not
   * running yet (Engine::queued, read now rather than at the last step).
   */
  std::string render(bool vllm_names = false, const std::map<std::string, uint64_t>& queued = {}) const;

 private:
  struct PerModel {
    std::map<int, uint64_t> requests_by_status;
    uint64_t prompt_tokens = 0, generated_tokens = 0, cancelled = 0;
    Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
    Histogram step{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};
    EngineGauges gauges;
  };
  PerModel& of(const std::string& model) { return models_[model]; }

  mutable std::mutex mu_;
  std::map<std::string, PerModel> models_;
  int64_t in_flight_ = 0;
};

}  // namespace kiln::serve
