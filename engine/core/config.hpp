// kiln's serving configuration (YAML). One schema; sections a command does not use may be absent.
// Every error names file:line:column and the expected form (ConfigError). yaml-cpp stays out of
// this header on purpose: it is included widely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int line, int column, const std::string& message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }      ///< 1-based, 0 when unknown
  int column() const { return column_; }  ///< 1-based, 0 when unknown

 private:
  std::string file_;
  int line_, column_;
};

/** Defaults shared by the YAML schema, the model host and the cache (one place, so they agree). */
inline constexpr int kDefaultMaxSeqs = 64;
inline constexpr int kDefaultMaxBatchTokens = 2048;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;  ///< empty: no authentication
  uint64_t max_request_bytes = 8ull << 20;
  int max_concurrent_requests = 256;
  int request_timeout_s = 600;
  int read_timeout_s = 30;     ///< a client must send its request (headers and body) within this
  int max_connections = 1024;  ///< open client connections; the longest idle beyond it are cut
  int drain_timeout_s = 30;    ///< SIGTERM: requests in progress get this long to finish
  /**
   * Regular expressions (ECMAScript); lines of a /v1/messages system prompt matching one are removed
   * before the template renders it. For text that changes every request and would defeat prefix
   * caching (Claude Code's `x-anthropic-billing-header: ...` line). Empty: nothing removed.
   */
  std::vector<std::string> strip_system_lines;
  /** The Responses API's stored responses (previous_response_id, GET): the least recently used
   *  go first beyond either bound. */
  struct ResponseStore {
    int max_responses = 1024;
    uint64_t max_bytes = 64ull << 20;
  } response_store;
  /** Metrics also under vLLM's names (vllm:num_requests_running, vllm:kv_cache_usage_perc, ...),
   *  which routers (llm-d's endpoint picker) scrape. */
  bool vllm_metrics = true;
  /** GET /debug/kv_blocks: the announced prefix-cache blocks (for tests of event subscribers). */
  bool debug_endpoints = false;
  /** KV-cache events in vLLM's format and with its KVEventsConfig names (docs/deployment.md). */
  struct KvEvents {
    bool enabled = false;
    std::string publisher = "zmq";
    /** Bound when it has '*', '::', ipc:// or inproc://, else connected (vLLM's rule). */
    std::string endpoint = "tcp://*:5557";
    std::string replay_endpoint;  ///< "" none: a ROUTER bound here serves past batches
    /** "" -> "kv@{host}:{port}@{model}" ({host}, {port} the HTTP listener's, {model} the served name). */
    std::string topic;
    int buffer_steps = 10000;     ///< batches kept for replay
    int hwm = 100000;             ///< the PUB socket's high-water mark
    int max_queue_size = 100000;  ///< batches waiting for the publisher thread; beyond it, a reset
  } kv_events;
  /** What one request may ask for; beyond each, a 400 naming the field and the limit. */
  struct Limits {
    int max_messages = 1024;
    int max_prompt_tokens = 0;  ///< 0: the model's context
    int max_tokens = 0;         ///< the largest max_tokens a request may ask for; 0: the context
    int max_n = 16;
    int max_stop = 16;  ///< stop strings (and stop_token_ids)
    int max_tools = 128;
    uint64_t max_tools_bytes = 256ull << 10;  ///< the tools array as JSON (schemas included)
  } limits;
};

struct BackendConfig {
  std::string kind = "auto";       ///< auto (a hardware GPU, else cpu) | vulkan | cpu | reference
  std::string device;              ///< Vulkan device index or name substring; empty = best
  bool allow_cpu_fallback = true;  ///< auto: may pick the native CPU backend when no GPU exists
};

struct PluginsConfig {
  std::vector<std::string> paths;  ///< absolute, resolved against the config file's folder
};

struct SamplingConfig {
  std::optional<double> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int> top_k, max_tokens;
  std::optional<uint64_t> seed;
};

struct CacheConfig {
  int block_tokens = 16;
  uint64_t memory_bytes = 0;     ///< explicit size; 0 when a fraction is given
  double memory_fraction = 0.5;  ///< of device memory, when memory_bytes == 0
  bool prefix_caching = true;
  /** Recurrent-state snapshots of the prefix cache (hybrid models), from the cache memory; 0: a tenth of it. */
  uint64_t snapshot_memory_bytes = 0;
  /** Hybrid models' prefills take a snapshot every this many tokens (a hit resumes at one). */
  int snapshot_interval = 512;
  /** f32 | f16 | bf16 | q8 | q4 (q8 / q4: docs/backend.md, "Quantized KV cache"). With q8 / q4 the
   *  last layer and layers the model marks sensitive stay f16 unless kv_layers names them. */
  std::string kv_dtype = "f32";
  /** Per-layer dtypes that override kv_dtype (negative indices count from the last layer). */
  std::map<int, std::string> kv_layers;
};

struct ModelConfig {
  std::string name;
  std::string path;           ///< resolved against the config file's folder
  std::string arch = "auto";  ///< auto: config.json model_type / GGUF architecture
  int max_context = 0;        ///< 0: the model's own limit
  int max_batch_tokens = kDefaultMaxBatchTokens;
  int max_seqs = kDefaultMaxSeqs;
  CacheConfig cache;
  std::string tool_parser;       ///< registry name, empty = none
  std::string reasoning_parser;  ///< registry name, empty = none
  std::string chat_template;     ///< file overriding the model's template, empty = model's
  /** true: control tokens written in chat request text are recognised (Hugging Face's and vLLM's
   *  behaviour); false (default): they are text, only the template makes control tokens. */
  bool parse_special_in_content = false;
  std::string description;  ///< shown in /v1/models beside the model type and path
  SamplingConfig sampling;
  /** More names requests may use for this model: exact names, or globs with * and ? ("claude-*",
   *  "gpt-4o*"; "*" takes any name no model or exact alias has). Coding agents send their own. */
  std::vector<std::string> aliases;
  /** JSON under response_format / guided_json: "compact" (separators ", " and ": ", no other
   *  whitespace) or "flexible" (whitespace between tokens, bounded); a request's json_whitespace
   *  overrides it. */
  std::string json_whitespace = "compact";
};

struct Config {
  std::string file;  ///< where it came from ("<string>" for text)
  std::optional<std::string> log_level;
  std::optional<ServerConfig> server;
  std::optional<BackendConfig> backend;
  std::optional<PluginsConfig> plugins;
  std::vector<ModelConfig> models;

  /** Parses and validates; throws ConfigError. */
  static Config load_file(const std::string& path);
  static Config load_string(const std::string& yaml, const std::string& name = "<string>");

  /** The effective configuration (defaults filled in) as YAML text. */
  std::string to_yaml() const;
};

/** "4GiB", "512MiB", "1.5G", "1048576" -> bytes. Returns false on malformed input. */
bool parse_byte_size(const std::string& text, uint64_t* out);

}  // namespace kiln
