// The in-process server of the serve tests: kiln serve's HttpServer on 127.0.0.1 (any free port)
// with one model on the CPU device, an httplib client, SSE parsing and /metrics reading.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "llama_helpers.hpp"
#include "plugin/registry.hpp"
#include "serve/http_server.hpp"
#include "serve/served_model.hpp"
#include "source_paths.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_test_scripted(uint32_t, uint32_t);

namespace kiln::serve::test {

using nlohmann::json;

/** The llama plugin, the parsers (built in or from the plugins folder) and the scripted test model. */
inline PluginRegistry& serve_registry() {
  static PluginRegistry r;
  static const bool init = [] {
    register_builtin_plugins(r);
    r.load_dirs(plugin_search_dirs(nullptr));
    if (!r.find_model_type("llama")) r.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
    r.register_static(&kiln_plugin_descriptor_test_scripted, "<static test_scripted>");
    return true;
  }();
  (void)init;
  return r;
}

inline const std::string kModel = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";
inline const std::string kTemplate = std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/plain.jinja";

/** POSTs `body`, handing the response body to `receive` as it arrives (false: hang up). */
inline bool post_streaming(httplib::Client& c, const std::string& path, const std::string& body,
                           std::function<bool(const char*, size_t)> receive) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body;
  req.content_receiver = [receive](const char* d, size_t n, uint64_t, uint64_t) { return receive(d, n); };
  httplib::Response res;
  httplib::Error err;
  return c.send(req, res, err);
}

/** Server-sent events with event lines (Anthropic's, Responses') as (event, data) pairs. */
inline std::vector<std::pair<std::string, json>> events_of(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string block = body.substr(at, end - at);
    at = end + 2;
    const size_t nl = block.find('\n');
    if (block.rfind("event: ", 0) != 0 || nl == std::string::npos) continue;
    out.emplace_back(block.substr(7, nl - 7), json::parse(block.substr(nl + 7)));
  }
  return out;
}

inline ModelConfig model_config() {
  ModelConfig m;
  m.name = "stories";
  m.path = kModel;
  m.chat_template = kTemplate;
  m.max_context = 512;
  m.max_seqs = 32;
  m.cache.memory_bytes = 16ull << 20;
  m.max_batch_tokens = 256;
  return m;
}

class Server {
 public:
  explicit Server(ServerConfig sc = {}, ModelConfig mc = model_config(), const std::string& device = "cpu") {
    BackendConfig bc;
    bc.kind = device;
    bc.allow_cpu_fallback = false;
    std::vector<std::unique_ptr<ServedModel>> models;
    models.push_back(std::make_unique<ServedModel>(mc, bc, serve_registry()));
    http_ = std::make_unique<HttpServer>(std::move(models), sc);
    port_ = http_->bind("127.0.0.1", 0);
    EXPECT_GT(port_, 0);
    thread_ = std::thread([this] { http_->run(); });
    // Bounded wait until it answers.
    for (int i = 0; i < 200; ++i) {
      if (auto r = client().Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Server() {
    http_->stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);  // sanitizer builds run a constrained batch for minutes
    return c;
  }
  json post(const std::string& path, const json& body, int* status = nullptr) const {
    auto r = client().Post(path.c_str(), body.dump(), "application/json");
    if (!r) return json();
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
  }
  /** Streams and returns the concatenated text (content for chat) and the raw data lines. */
  std::string stream(const std::string& path, json body, std::vector<json>* events = nullptr,
                     bool* done = nullptr) const {
    body["stream"] = true;
    std::string buf, text;
    bool saw_done = false;
    auto c = client();
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Content-Type", "application/json"}};
    req.body = body.dump();
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      buf.append(d, n);
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = c.send(req, res, err);
    EXPECT_TRUE(sent) << "POST " << path << ": " << httplib::to_string(err);
    if (sent) {
      EXPECT_EQ(res.status, 200) << buf;
    }
    size_t pos = 0;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string line = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (line.rfind("data: ", 0) != 0) continue;
      line = line.substr(6);
      if (line == "[DONE]") {
        saw_done = true;
        continue;
      }
      json e = json::parse(line);
      if (events) events->push_back(e);
      for (const json& c : e.value("choices", json::array())) {
        if (c.contains("text")) text += c["text"].get<std::string>();
        if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
          text += c["delta"]["content"].get<std::string>();
      }
    }
    if (done) *done = saw_done;
    return text;
  }
  int port() const { return port_; }
  bool drain(int seconds) { return http_->drain(seconds); }
  double metric(const std::string& name) const {
    auto r = client().Get("/metrics");
    if (!r) return -1;
    const std::string& b = r->body;
    size_t at = b.find("\n" + name + "{");
    if (at == std::string::npos) at = b.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    const size_t sp = b.find(' ', at + 1);
    return std::stod(b.substr(sp + 1, b.find('\n', sp) - sp - 1));
  }
  /**
   * KV blocks held by sequences: those in use minus the prefix cache's (one block per cached node
   * in the single KV group of the models these tests serve). 0 once every request has ended.
   */
  double sequence_blocks() const { return metric("kiln_kv_blocks_used") - metric("kiln_prefix_cache_blocks"); }

 private:
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kiln::serve::test
