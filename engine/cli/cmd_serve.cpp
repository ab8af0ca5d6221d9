// kiln serve: the HTTP server (OpenAI and Anthropic APIs) for one model given by flags, or the models
// of a YAML configuration.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <csignal>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "core/log.hpp"
#include "serve/http_server.hpp"
#include "serve/served_model.hpp"

namespace kiln::cli {
namespace {

/** The everyday model settings as flags: --model serves one model without a YAML file. */
const std::vector<std::string> kModelFlags = {"--name",        "--tool-parser", "--reasoning-parser", "--chat-template",
                                              "--max-context", "--max-seqs",    "--max-batch-tokens", "--cache-memory"};

/** A flag's positive integer into `out`; the usage error naming the flag otherwise. */
std::optional<std::string> positive(const Args& args, const char* flag, int* out) {
  if (!args.has(flag)) return std::nullopt;
  const std::string v = args.value(flag);
  try {
    size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == v.size() && n > 0 && n <= INT32_MAX) {
      *out = static_cast<int>(n);
      return std::nullopt;
    }
  } catch (...) {
  }
  return fmt::format("{} takes a positive integer (got '{}')", flag, v);
}

/** The served name of a model path: its folder's or file's name, without .gguf. */
std::string name_of(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec).lexically_normal();  // "." and "dir/"
  if (!p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

/**
 * --model / --name / ... applied to `config`: --model replaces the YAML's models with one; the other
 * model flags set the one model (the YAML's, when it has exactly one). Returns a usage error.
 */
std::optional<std::string> apply_model_flags(const Args& args, Config& config) {
  if (args.has("--model")) {
    const std::string path = args.value("--model");
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return fmt::format("--model: nothing at '{}' (give a Hugging Face model folder or a GGUF file)", path);
    ModelConfig m;
    m.path = path;
    m.name = name_of(path);
    // Clients that send the path as the model (vLLM's name for it), with or without a final slash.
    std::string bare = path;
    while (bare.size() > 1 && bare.back() == '/') bare.pop_back();
    for (const std::string& a : {path, bare})
      if (a != m.name && std::find(m.aliases.begin(), m.aliases.end(), a) == m.aliases.end()) m.aliases.push_back(a);
    config.models = {m};
  }
  const std::string* given = nullptr;
  for (const std::string& f : kModelFlags)
    if (args.has(f)) given = &f;
  if (!given) return std::nullopt;
  if (config.models.size() != 1)
    return fmt::format(
        "{} sets one model's setting; give --model PATH, or set it in the YAML for each of the {} "
        "models of {}",
        *given, config.models.size(), config.file);
  ModelConfig& m = config.models[0];
  if (args.has("--name")) {
    if (args.value("--name").empty()) return std::string("--name takes a non-empty name");
    m.name = args.value("--name");
  }
  if (args.has("--tool-parser")) m.tool_parser = args.value("--tool-parser");
  if (args.has("--reasoning-parser")) m.reasoning_parser = args.value("--reasoning-parser");
  if (args.has("--chat-template")) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(args.value("--chat-template"), ec))
      return fmt::format("--chat-template: no file at '{}'", args.value("--chat-template"));
    m.chat_template = args.value("--chat-template");
  }
  for (auto [flag, field] : {std::pair{"--max-context", &m.max_context}, std::pair{"--max-seqs", &m.max_seqs},
                             std::pair{"--max-batch-tokens", &m.max_batch_tokens}})
    if (auto e = positive(args, flag, field)) return e;
  if (args.has("--cache-memory") && !parse_byte_size(args.value("--cache-memory"), &m.cache.memory_bytes))
    return fmt::format("--cache-memory takes a size such as 4GiB, 512MiB or 1073741824 (got '{}')",
                       args.value("--cache-memory"));
  return std::nullopt;
}

/** A parser flag that names no loaded parser: the usage error listing those there are. */
std::optional<std::string> check_parser(const PluginRegistry& registry, const Args& args, const char* flag,
                                        kiln_component_kind kind) {
  if (!args.has(flag) || registry.find(kind, args.value(flag))) return std::nullopt;
  const auto names = registry.names(kind);
  return fmt::format("{}: no parser named '{}'; loaded: {}", flag, args.value(flag),
                     names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
}

int run(const std::vector<std::string>& argv) {
  std::vector<std::string> values = {"--config", "--host", "--port", "--model", "--device", "--api-key"};
  values.insert(values.end(), kModelFlags.begin(), kModelFlags.end());
  Args args(argv, values, {"--render-only"});
  if (!args.ok()) return usage_error("serve", args.error());
  if (!args.positionals().empty())
    return usage_error(
        "serve", fmt::format("unexpected argument '{}' (the model is given with --model PATH)", args.positionals()[0]));
  if (!args.has("--config") && !args.has("--model"))
    return usage_error("serve",
                       "give --model PATH (a Hugging Face model folder or a GGUF file) or --config FILE "
                       "(try configs/default.yaml)");
  if (args.has("--device")) {
    const std::string d = args.value("--device");
    if (d != "auto" && d != "vulkan" && d != "cpu" && d != "reference" && !(d.starts_with("vulkan:") && d.size() > 7))
      return usage_error("serve",
                         fmt::format("--device must be auto, vulkan, vulkan:N (a device index or name), cpu or "
                                     "reference (got '{}')",
                                     d));
  }
  if (args.has("--api-key") && args.value("--api-key").empty())
    return usage_error("serve", "--api-key takes a non-empty key");
  int port = -1;
  if (args.has("--port")) {
    try {
      size_t used = 0;
      port = std::stoi(args.value("--port"), &used);
      if (used != args.value("--port").size() || port < 0 || port > 65535) port = -2;
    } catch (...) {
      port = -2;
    }
    if (port == -2) return usage_error("serve", "--port takes a port number in [0, 65535] (0: any free port)");
  }
  // SIGINT / SIGTERM are taken by one thread that stops the server; block them before any thread
  // (device, TBB, HTTP) starts so that none of those receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    Config config = load_config_or_empty(args.value("--config"));
    if (auto e = apply_model_flags(args, config)) return usage_error("serve", *e);
    if (config.models.empty()) return failure("serve", fmt::format("{} configures no models", config.file));
    PluginRegistry registry;
    load_plugins(registry, config);
    if (auto e = check_parser(registry, args, "--tool-parser", KILN_COMPONENT_TOOL_PARSER))
      return usage_error("serve", *e);
    if (auto e = check_parser(registry, args, "--reasoning-parser", KILN_COMPONENT_REASONING_PARSER))
      return usage_error("serve", *e);
    ServerConfig server = config.server.value_or(ServerConfig{});
    if (args.has("--api-key")) server.api_keys = {args.value("--api-key")};
    BackendConfig backend = config.backend.value_or(BackendConfig{});
    if (args.has("--device")) {
      const std::string d = args.value("--device");
      backend.kind = d.starts_with("vulkan:") ? "vulkan" : d;
      if (d.starts_with("vulkan:")) backend.device = d.substr(7);  // as the YAML's backend.device
    }
    // Listening first, so that probes see "loading" (/health alive, /health/ready 503) while the
    // weights load; everything else answers 503 until then.
    const std::string host = args.value("--host", server.host);
    serve::HttpServer http(server);
    const int bound = http.bind(host, port >= 0 ? port : server.port);
    if (bound < 0)
      return failure("serve", fmt::format("cannot listen on {}:{}: another process holds the port, or the address is "
                                          "not one of this machine's; choose another with --port or server.port",
                                          host, port >= 0 ? port : server.port));
    std::atomic<bool> listener_ok{true}, stopped_itself{false}, signalled{false};
    std::thread listener([&] { listener_ok.store(http.run()); });
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (!stopped_itself.load()) {
        signalled.store(true);
        if (!http.ready()) {
          // Nothing served yet, so nothing to drain; the load (minutes for a large model) would
          // only delay the exit a supervisor asked for.
          log::info("[serve] {} while the models load: stopping", name);
          std::fflush(stderr);
          std::_Exit(0);
        }
        log::info("[serve] {}: draining (up to {} s), then stopping", name, server.drain_timeout_s);
        try {
          http.drain(server.drain_timeout_s);
        } catch (const std::exception& e) {  // stop all the same
          log::error("[serve] the drain failed: {}", e.what());
        }
      }
      http.stop();
    });
    // Whatever way this ends (a model that fails to load included), both threads end with it.
    const auto finish = [&] {
      stopped_itself.store(true);
      http.stop();
      pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if no signal came
      waiter.join();
      listener.join();
    };
    try {
      std::vector<std::unique_ptr<serve::ServedModel>> models;
      for (const ModelConfig& m : config.models) {
        if (signalled.load()) break;
        log::info("[serve] loading model '{}' from {}", m.name, m.path);
        models.push_back(args.flag("--render-only") ? std::make_unique<serve::ServedModel>(m, registry)
                                                    : std::make_unique<serve::ServedModel>(m, backend, registry));
      }
      if (!listener_ok.load()) throw std::runtime_error("the HTTP listener stopped while the models loaded");
      if (!signalled.load() && http.add_models(std::move(models))) {
        // The port line is the last of the start-up: scripts and tests wait for it.
        fmt::print(stderr, "kiln serve: listening on http://{}:{} ({} model{})\n", host, bound, config.models.size(),
                   config.models.size() == 1 ? "" : "s");
        std::fflush(stderr);
      }
    } catch (...) {
      finish();
      throw;
    }
    listener.join();  // until stop(): a signal's drain, or the listener failing
    stopped_itself.store(true);
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    const bool ok = listener_ok.load();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    return failure("serve", e.what());
  }
}

const bool registered = register_command({
    "serve",
    "serve models over an OpenAI-compatible HTTP API",
    "usage: kiln serve --model PATH [--name N] [--tool-parser P] [--reasoning-parser P] [options]\n"
    "       kiln serve --config FILE [--model PATH ...] [--host H] [--port P]\n\n"
    "Serves the model at PATH (a Hugging Face model folder or a GGUF file), or every model of the YAML\n"
    "FILE, until SIGINT/SIGTERM, which drain: /health/ready turns 503, new requests get 503,\n"
    "requests in progress get server.drain_timeout_s to finish. With both, FILE gives the server,\n"
    "backend and plugin settings and PATH replaces its models. Flags override the YAML.\n\n"
    "Model (--model, or a FILE of one model):\n"
    "  --model PATH             serve this model (its name: the folder's or file's name; the path\n"
    "                           itself is accepted as the request's model too)\n"
    "  --name N                 the name requests use\n"
    "  --tool-parser P          tool-call parser (qwen3_coder, gemma4, ...: `kiln plugins` lists them)\n"
    "  --reasoning-parser P     reasoning parser (qwen3, gemma4, ...)\n"
    "  --chat-template FILE     a Jinja chat template replacing the model's\n"
    "  --max-context N          context length (default: the model's)\n"
    "  --max-seqs N             sequences decoded at once\n"
    "  --max-batch-tokens N     tokens per step (prefill chunks)\n"
    "  --cache-memory SIZE      KV cache memory (4GiB, 512MiB, ...)\n"
    "Server:\n"
    "  --device D               auto (a hardware GPU, else the CPU), vulkan, vulkan:N (index or\n"
    "                           name), cpu or reference\n"
    "  --host H, --port P       where to listen (default 127.0.0.1:8080; --port 0 picks a free port,\n"
    "                           printed as 'kiln serve: listening on http://HOST:PORT')\n"
    "  --api-key KEY            require 'Authorization: Bearer KEY' (or x-api-key)\n"
    "  --render-only            load no weights and no device: serve only the render routes,\n"
    "                           /tokenize, /detokenize, /v1/models and the probes (a router's\n"
    "                           tokenizer sidecar; a model folder needs no weight files)\n\n"
    "Routes: POST /v1/chat/completions, /v1/completions, /v1/responses (OpenAI),\n"
    "        /v1/messages, /v1/messages/count_tokens (Anthropic), /tokenize, /detokenize,\n"
    "        /v1/chat/completions/render, /v1/completions/render (token ids), /reset_prefix_cache;\n"
    "        GET /v1/models, /health (alive), /health/ready (503 while loading or draining),\n"
    "        /metrics (Prometheus, with vLLM's names); GET and DELETE /v1/responses/{id},\n"
    "        POST /v1/responses/{id}/cancel. KV-cache events: server.kv_events (docs/deployment.md).\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
