// `kiln serve`'s HTTP front: the OpenAI-compatible routes over cpp-httplib, one Engine per served
// model, API keys, body and concurrency limits, and client-disconnect detection. httplib stays
// inside http_server.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace kiln::serve {

class ServedModel;

class HttpServer {
 public:
  /** Serves `models` (loaded already) with the limits of `server`. */
  HttpServer(std::vector<std::unique_ptr<ServedModel>> models, const ServerConfig& server);
  /**
   * A server whose models come later (add_models): it can listen while they load, answering the
   * probes (/health alive, /health/ready 503 "loading") and /metrics, and 503 to everything else.
   */
  explicit HttpServer(const ServerConfig& server);
  /** The loaded models: their engines start, and the server is ready. Once; false (and nothing
   *  served) when a drain began while they loaded. */
  bool add_models(std::vector<std::unique_ptr<ServedModel>> models);
  /** The models are loaded (and no drain came first). */
  bool ready() const;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /** Binds host:port (port 0: any free port); returns the port, or -1 with a log line saying why. */
  int bind(const std::string& host, int port);
  /** Serves until stop(); returns false when the listener failed. */
  bool run();
  /**
   * Graceful shutdown, first half: /health/ready answers 503 and new generation requests 503 with
   * Retry-After, while requests in progress go on; returns when none is left (true) or after
   * `seconds` (false), having published a last AllBlocksCleared. stop() then ends whatever remains.
   */
  bool drain(int seconds);
  /** Stops listening and ends the requests in progress (safe from any thread). */
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
