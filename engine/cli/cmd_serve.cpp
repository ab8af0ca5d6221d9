// kiln serve: the OpenAI-compatible HTTP server for the models of a YAML configuration.
#include <fmt/format.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "core/log.hpp"
#include "serve/http_server.hpp"
#include "serve/served_model.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--config", "--host", "--port"}, {});
  if (!args.ok()) return usage_error("serve", args.error());
  if (!args.has("--config")) return usage_error("serve", "--config FILE is required (try configs/default.yaml)");
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
    if (config.models.empty()) return failure("serve", fmt::format("{} configures no models", config.file));
    PluginRegistry registry;
    load_plugins(registry, config);
    const ServerConfig server = config.server.value_or(ServerConfig{});
    const BackendConfig backend = config.backend.value_or(BackendConfig{});
    std::vector<std::unique_ptr<serve::ServedModel>> models;
    for (const ModelConfig& m : config.models) {
      log::info("[serve] loading model '{}' from {}", m.name, m.path);
      models.push_back(std::make_unique<serve::ServedModel>(m, backend, registry));
    }
    const std::string host = args.value("--host", server.host);
    serve::HttpServer http(std::move(models), server);
    const int bound = http.bind(host, port >= 0 ? port : server.port);
    if (bound < 0)
      return failure("serve", fmt::format("cannot listen on {}:{}: another process holds the port, or the address is "
                                          "not one of this machine's; choose another with --port or server.port",
                                          host, port >= 0 ? port : server.port));
    std::atomic<bool> stopped_itself{false};
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (!stopped_itself.load()) {
        log::info("[serve] {}: draining (up to {} s), then stopping", sig == SIGINT ? "SIGINT" : "SIGTERM",
                  server.drain_timeout_s);
        http.drain(server.drain_timeout_s);
      }
      http.stop();
    });
    // The port line is the last of the start-up: scripts and tests wait for it.
    fmt::print(stderr, "kiln serve: listening on http://{}:{} ({} model{})\n", host, bound, config.models.size(),
               config.models.size() == 1 ? "" : "s");
    std::fflush(stderr);
    const bool ok = http.run();
    stopped_itself.store(true);
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if the server stopped by itself
    waiter.join();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    return failure("serve", e.what());
  }
}

const bool registered = register_command({
    "serve",
    "serve models over an OpenAI-compatible HTTP API",
    "usage: kiln serve --config FILE [--host H] [--port P]\n\n"
    "Loads every model of FILE and serves them until SIGINT/SIGTERM, which drain: /health turns 503,\n"
    "new requests get 503, requests in progress get server.drain_timeout_s to finish. --host and --port override\n"
    "the YAML's server.host and server.port (--port 0 picks a free port; the chosen one is printed\n"
    "as 'kiln serve: listening on http://HOST:PORT').\n\n"
    "Routes: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize;\n"
    "        GET /v1/models, /health, /metrics (Prometheus).\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
