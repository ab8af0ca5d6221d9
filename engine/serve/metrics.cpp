#include "serve/metrics.hpp"

#include <fmt/format.h>

namespace kiln::serve {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, n_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, n_);
}

void Metrics::request_done(const std::string& model, int status) {
  std::lock_guard lock(mu_);
  ++of(model).requests_by_status[status];
}
void Metrics::tokens(const std::string& model, uint64_t prompt, uint64_t generated) {
  std::lock_guard lock(mu_);
  of(model).prompt_tokens += prompt;
  of(model).generated_tokens += generated;
}
void Metrics::first_token(const std::string& model, double seconds) {
  std::lock_guard lock(mu_);
  of(model).ttft.observe(seconds);
}
void Metrics::per_output_token(const std::string& model, double seconds) {
  std::lock_guard lock(mu_);
  of(model).tpot.observe(seconds);
}
void Metrics::step(const std::string& model, double step_seconds, double) {
  std::lock_guard lock(mu_);
  of(model).step.observe(step_seconds);
}
void Metrics::gauges(const std::string& model, const EngineGauges& g) {
  std::lock_guard lock(mu_);
  of(model).gauges = g;
}
void Metrics::cancelled(const std::string& model) {
  std::lock_guard lock(mu_);
  ++of(model).cancelled;
}
void Metrics::in_flight(int delta) {
  std::lock_guard lock(mu_);
  in_flight_ += delta;
}

std::string Metrics::render(bool vllm_names, const std::map<std::string, uint64_t>& queued) const {
  // A copy under the lock, formatted outside it: the engine thread takes the lock every step, and a
  // scrape (a router polls every 50 ms or so) must not hold it up for the formatting.
  std::map<std::string, PerModel> models;
  int64_t in_flight = 0;
  {
    std::lock_guard lock(mu_);
    models = models_;
    in_flight = in_flight_;
  }
  std::string o;
  const auto head = [&](const char* name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  head("kiln_requests_in_flight", "gauge", "HTTP generation requests being served now.");
  o += fmt::format("kiln_requests_in_flight {}\n", in_flight);
  head("kiln_requests_total", "counter", "Finished generation requests by HTTP status.");
  for (const auto& [m, p] : models)
    for (const auto& [status, n] : p.requests_by_status)
      o += fmt::format("kiln_requests_total{{model=\"{}\",status=\"{}\"}} {}\n", m, status, n);
  const auto counter = [&](const char* name, const char* help, auto get) {
    head(name, "counter", help);
    for (const auto& [m, p] : models) o += fmt::format("{}{{model=\"{}\"}} {}\n", name, m, get(p));
  };
  const auto gauge = [&](const char* name, const char* help, auto get) {
    head(name, "gauge", help);
    for (const auto& [m, p] : models) o += fmt::format("{}{{model=\"{}\"}} {}\n", name, m, get(p));
  };
  counter("kiln_prompt_tokens_total", "Prompt tokens of admitted requests.",
          [](const PerModel& p) { return p.prompt_tokens; });
  counter("kiln_generated_tokens_total", "Tokens generated.", [](const PerModel& p) { return p.generated_tokens; });
  counter("kiln_requests_cancelled_total", "Generation requests whose client went away before the end (HTTP 499).",
          [](const PerModel& p) { return p.cancelled; });
  counter("kiln_preemptions_total", "Sequences preempted (recomputed later) because the KV cache was full.",
          [](const PerModel& p) { return p.gauges.preemptions; });
  counter("kiln_prefix_cache_lookups_total", "Sequence starts that looked up the prefix cache.",
          [](const PerModel& p) { return p.gauges.prefix_lookups; });
  counter("kiln_prefix_cache_hits_total", "Sequence starts that reused a cached prefix.",
          [](const PerModel& p) { return p.gauges.prefix_hits; });
  counter("kiln_prefix_cache_tokens_total", "Prompt tokens whose KV came from the prefix cache.",
          [](const PerModel& p) { return p.gauges.cached_tokens; });
  counter("kiln_prefix_cache_evicted_blocks_total", "Prefix-cache blocks evicted (least recently used).",
          [](const PerModel& p) { return p.gauges.evicted_blocks; });
  counter("kiln_prefix_cache_evicted_snapshots_total", "Recurrent-state snapshots evicted from the prefix cache.",
          [](const PerModel& p) { return p.gauges.evicted_snapshots; });
  gauge("kiln_prefix_cache_blocks", "Token blocks the prefix cache holds.",
        [](const PerModel& p) { return p.gauges.cached_blocks; });
  gauge("kiln_prefix_cache_snapshots", "Recurrent-state snapshots the prefix cache holds.",
        [](const PerModel& p) { return p.gauges.snapshots; });
  gauge("kiln_prefix_cache_snapshot_bytes", "Memory of those snapshots.",
        [](const PerModel& p) { return p.gauges.snapshot_bytes; });
  counter("kiln_steps_total", "Engine steps run.", [](const PerModel& p) { return p.gauges.steps; });
  counter("kiln_step_seconds_total", "Wall time of engine steps.",
          [](const PerModel& p) { return p.gauges.step_seconds; });
  counter("kiln_step_host_seconds_total", "Host share of step time: scheduling, sampling and emitting.",
          [](const PerModel& p) { return p.gauges.host_seconds; });
  counter("kiln_step_readback_bytes_total", "Bytes steps brought back from the device (logits rows or candidates).",
          [](const PerModel& p) { return p.gauges.readback_bytes; });
  gauge("kiln_step_kernels", "Kernel launches of the last step (Vulkan dispatches; CPU devices: graph nodes).",
        [](const PerModel& p) { return p.gauges.kernels; });
  gauge("kiln_step_barriers", "Vulkan pipeline barriers of the last step (0 on CPU devices).",
        [](const PerModel& p) { return p.gauges.barriers; });
  counter("kiln_candidate_steps_total",
          "Steps whose samplers picked from each row's best ids read back from the device, not whole rows.",
          [](const PerModel& p) { return p.gauges.candidate_steps; });
  gauge("kiln_queue_depth", "Sequences waiting to start (or to resume after preemption).",
        [](const PerModel& p) { return p.gauges.waiting; });
  gauge("kiln_running_sequences", "Sequences in the KV cache.", [](const PerModel& p) { return p.gauges.running; });
  gauge("kiln_kv_blocks_used", "KV cache blocks in use.", [](const PerModel& p) { return p.gauges.kv_blocks_used; });
  gauge("kiln_kv_blocks_free", "KV cache blocks free.", [](const PerModel& p) { return p.gauges.kv_blocks_free; });
  gauge("kiln_kv_cache_tokens", "Tokens the KV cache holds over all sequences (cache.kv_dtype and kv_layers formats).",
        [](const PerModel& p) { return p.gauges.kv_token_capacity; });
  gauge("kiln_kv_cache_bytes_per_token", "KV cache bytes one token takes over every layer with storage.",
        [](const PerModel& p) { return p.gauges.kv_bytes_per_token; });
  const auto hist = [&](const char* name, const char* help, auto get) {
    head(name, "histogram", help);
    for (const auto& [m, p] : models) get(p).write(o, name, fmt::format("model=\"{}\"", m));
  };
  hist("kiln_time_to_first_token_seconds", "From arrival to the first generated token.",
       [](const PerModel& p) -> const Histogram& { return p.ttft; });
  hist("kiln_time_per_output_token_seconds", "Mean time between generated tokens of a request.",
       [](const PerModel& p) -> const Histogram& { return p.tpot; });
  hist("kiln_step_seconds", "Wall time of one engine step.",
       [](const PerModel& p) -> const Histogram& { return p.step; });
  if (!vllm_names) return o;
  // vLLM's names, for routers that score replicas by them (llm-d's endpoint picker): sequences
  // running and waiting (those still being prepared count as waiting), cache usage with blocks
  // only the prefix cache holds counted free, the prefix cache's queries and hits in tokens.
  const auto vllm = [&](const char* name, const char* type, const char* help, auto get) {
    head(name, type, help);
    for (const auto& [m, p] : models) o += fmt::format("{}{{model_name=\"{}\"}} {}\n", name, m, get(m, p));
  };
  vllm("vllm:num_requests_running", "gauge", "Sequences in the model's running batch.",
       [](const std::string&, const PerModel& p) { return p.gauges.running; });
  vllm("vllm:num_requests_waiting", "gauge", "Sequences admitted and not running: being prepared or queued.",
       [&](const std::string& m, const PerModel& p) {
         const auto q = queued.find(m);
         return p.gauges.waiting + (q == queued.end() ? 0 : q->second);
       });
  vllm("vllm:kv_cache_usage_perc", "gauge",
       "KV cache usage, 0 to 1: blocks held by a running sequence (only prefix-cached ones count free).",
       [](const std::string&, const PerModel& p) { return p.gauges.kv_usage; });
  vllm("vllm:gpu_cache_usage_perc", "gauge", "The same under its older name (routers before vLLM 0.10 read it).",
       [](const std::string&, const PerModel& p) { return p.gauges.kv_usage; });
  vllm("vllm:prefix_cache_queries_total", "counter", "Tokens of sequences that looked the prefix cache up.",
       [](const std::string&, const PerModel& p) { return p.gauges.queried_tokens; });
  vllm("vllm:prefix_cache_hits_total", "counter", "Of those, tokens whose KV came from the prefix cache.",
       [](const std::string&, const PerModel& p) { return p.gauges.cached_tokens; });
  vllm("vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
       [](const std::string&, const PerModel& p) { return p.prompt_tokens; });
  vllm("vllm:generation_tokens_total", "counter", "Tokens generated.",
       [](const std::string&, const PerModel& p) { return p.generated_tokens; });
  vllm("vllm:num_preemptions_total", "counter", "Sequences preempted because the KV cache was full.",
       [](const std::string&, const PerModel& p) { return p.gauges.preemptions; });
  head("vllm:cache_config_info", "gauge", "The KV cache's configuration, in labels.");
  for (const auto& [m, p] : models) {
    const uint64_t bt = p.gauges.block_tokens ? p.gauges.block_tokens : 1;
    o += fmt::format("vllm:cache_config_info{{model_name=\"{}\",block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1\n", m,
                     p.gauges.block_tokens, p.gauges.kv_token_capacity / bt);
  }
  head("vllm:time_to_first_token_seconds", "histogram", "From arrival to the first generated token.");
  for (const auto& [m, p] : models)
    p.ttft.write(o, "vllm:time_to_first_token_seconds", fmt::format("model_name=\"{}\"", m));
  return o;
}

}  // namespace kiln::serve
