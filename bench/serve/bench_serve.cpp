// bench_serve: streams over loopback against kiln serve (in-process, one model) at several
// concurrency levels and reports time to first token (p50/p99), time per output token, aggregate
// generated tok/s (and its ratio to one stream's: the batching gain) and the host's share of step
// time (schedule + sample + emit, from /metrics).
//
//   bench_serve [--model PATH | --synthetic LAYERS:HIDDEN] [--device cpu|vulkan|auto]
//               [--levels 1,2,4,8,16] [--requests R] [--max-tokens N] [--prompt-words W]
//
// The default model is the embedded stories260K, so small that a step costs well under a
// millisecond and the HTTP path dominates; --synthetic 8:512 writes (to /tmp) and serves a
// Qwen3-shaped F16 model with random weights and a 32000-token vocabulary (prompts as token ids),
// whose steps cost what a small real model's do.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "plugin/registry.hpp"
#include "serve/http_server.hpp"
#include "serve/served_model.hpp"
#include "source_paths.hpp"
#include "synthetic_model.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);

using namespace kiln;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Sample {
  double ttft = 0, tpot = 0;
  uint32_t tokens = 0;
};

double metric(httplib::Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  if (!r) return 0;
  size_t at = r->body.find("\n" + name + "{");
  if (at == std::string::npos) return 0;
  const size_t sp = r->body.find(' ', at + 1);
  return std::stod(r->body.substr(sp + 1));
}

Sample one_stream(int port, const json& prompt, int max_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600, 0);
  json body = {
      {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
  Sample s;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point first{}, last{};
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: {", 0) != 0) continue;
      const json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded() || j["choices"].empty() || j["choices"][0]["text"].get<std::string>().empty()) continue;
      last = Clock::now();
      if (first == Clock::time_point{}) first = last;
      ++s.tokens;  // one text chunk per token (a chunk may hold back a partial character: rare)
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);
  s.ttft = std::chrono::duration<double>(first - t0).count();
  s.tpot = s.tokens > 1 ? std::chrono::duration<double>(last - first).count() / (s.tokens - 1) : 0;
  return s;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = std::string(KILN_SOURCE_DIR) + "/configs/models/stories260K.gguf", device = "cpu";
  std::vector<int> levels = {1, 2, 4, 8, 16};
  int requests = 2, max_tokens = 128, prompt_words = 16;
  std::string synthetic;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--device")
      device = v;
    else if (k == "--synthetic")
      synthetic = v;
    else if (k == "--requests")
      requests = std::stoi(v);
    else if (k == "--max-tokens")
      max_tokens = std::stoi(v);
    else if (k == "--prompt-words")
      prompt_words = std::stoi(v);
    else if (k == "--levels") {
      levels.clear();
      for (size_t p = 0; p < v.size();) {
        size_t e = v.find(',', p);
        if (e == std::string::npos) e = v.size();
        levels.push_back(std::stoi(v.substr(p, e - p)));
        p = e + 1;
      }
    } else {
      fmt::print(stderr, "unknown option {}\n", k);
      return 2;
    }
  }
  PluginRegistry registry;
  register_builtin_plugins(registry);
  if (!registry.find_model_type("llama")) registry.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
  if (!synthetic.empty()) {
    bench::Shape sh;
    sh.layers = std::stoi(synthetic.substr(0, synthetic.find(':')));
    sh.D = std::stoi(synthetic.substr(synthetic.find(':') + 1));
    sh.Dh = 64;
    sh.H = sh.D / 64;
    sh.KV = std::max(1, sh.H / 2);
    sh.F = 3 * sh.D;
    sh.V = 32000;
    model = fmt::format("/tmp/kiln-bench-serve-{}x{}.gguf", sh.layers, sh.D);
    bench::write_qwen3(model, sh, DType::f16);
  }
  ModelConfig mc;
  mc.name = "bench";
  mc.path = model;
  mc.max_context = 1024;
  mc.cache.memory_bytes = 256ull << 20;
  BackendConfig bc;
  bc.kind = device;
  std::vector<std::unique_ptr<serve::ServedModel>> models;
  models.push_back(std::make_unique<serve::ServedModel>(mc, bc, registry));
  const std::string dev = models.front()->host().device().info().name;
  serve::HttpServer http(std::move(models), ServerConfig{});
  const int port = http.bind("127.0.0.1", 0);
  std::thread server([&] { http.run(); });
  httplib::Client mc_client("127.0.0.1", port);
  for (int i = 0; i < 100 && !mc_client.Get("/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  const bool ids = !synthetic.empty();
  const auto prompt = [&](int stream) -> json {
    if (ids) {
      std::vector<int> p;
      for (int w = 0; w < prompt_words * 4; ++w) p.push_back(100 + (stream * 7919 + w * 104729) % 30000);
      return p;
    }
    std::string words;
    for (int w = 0; w < prompt_words; ++w) words += w ? " and then" : "Once upon a time";
    return words + " " + std::to_string(stream);
  };
  one_stream(port, prompt(0), 8);  // warm-up: graphs for the common shapes
  fmt::print("bench_serve: {} on {}, {} generated tokens per request, {} requests per stream, prompt ~{} {}\n\n",
             model.substr(model.find_last_of('/') + 1), dev, max_tokens, requests,
             ids ? prompt_words * 4 : prompt_words, ids ? "token ids" : "words");
  fmt::print("| streams | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | aggregate tok/s | vs 1 stream | host share |\n");
  fmt::print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  double single = 0;
  for (int c : levels) {
    const double step0 = metric(mc_client, "kiln_step_seconds_total"),
                 host0 = metric(mc_client, "kiln_step_host_seconds_total");
    std::vector<std::vector<Sample>> per(static_cast<size_t>(c));
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < c; ++i)
      ts.emplace_back([&, i] {
        for (int r = 0; r < requests; ++r)
          per[static_cast<size_t>(i)].push_back(one_stream(port, prompt(i * 100 + r), max_tokens));
      });
    for (auto& t : ts) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double step = metric(mc_client, "kiln_step_seconds_total") - step0;
    const double host = metric(mc_client, "kiln_step_host_seconds_total") - host0;
    std::vector<double> ttft, tpot;
    uint64_t tokens = 0;
    for (const auto& v : per)
      for (const Sample& s : v) {
        ttft.push_back(s.ttft * 1e3);
        tpot.push_back(s.tpot * 1e3);
        tokens += s.tokens;
      }
    const double agg = tokens / wall;
    if (c == levels.front()) single = agg / c;
    fmt::print("| {} | {:.1f} | {:.1f} | {:.2f} | {:.1f} | {:.2f}x | {:.1f}% |\n", c, pct(ttft, 0.5), pct(ttft, 0.99),
               pct(tpot, 0.5), agg, single > 0 ? agg / single : 0.0, step > 0 ? 100 * host / step : 0.0);
    std::fflush(stdout);
  }
  http.stop();
  server.join();
  return 0;
}
