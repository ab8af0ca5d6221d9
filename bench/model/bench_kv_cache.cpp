// Quantized KV caches (cache.kv_dtype q8 / q4) against f16, in two tables:
//
// 1. Memory, computed with the cache planner itself (cache::plan_layout) for real model shapes: KV
//    bytes per token, and the most concurrent 4096-token sequences a fixed budget (--budget, 8 GiB
//    by default) holds, recurrent state slots included (Qwen3.5), per format with kiln's defaults
//    (the last layer kept at f16) and with every layer in the format; ratios against f16.
// 2. Speed: decode tok/s at long context, where attention dominates: a Qwen3-shaped model with few
//    small layers (weights of a few MB) and wide KV (8 KV heads of 128 dims: 16 KiB of f16 K+V per
//    token and layer), --seqs sequences decoding together after a --context-token prefill each. The
//    formats run in interleaved rounds in one process (this machine is shared and noisy); the table
//    gives the median round's tok/s per format and its ratio to f16's.
//
//   bench_kv_cache [--device auto|cpu|vulkan] [--budget 8GiB] [--context 4096] [--seqs 4]
//                  [--decode 8] [--rounds 3] [--memory-only]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/layout.hpp"
#include "core/bytes.hpp"
#include "model/model_host.hpp"
#include "plugin/registry.hpp"
#include "synthetic_model.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

bool flag(int argc, char** argv, const char* name) {
  return std::any_of(argv + 1, argv + argc, [&](const char* a) { return std::strcmp(a, name) == 0; });
}

// ------------------------------------------------------------------------------------------------
// Memory.

struct ModelShape {
  std::string name;
  std::vector<cache::LayerSpec> layers;
};

cache::LayerSpec kv(kiln_cache_kind kind, uint32_t heads, uint32_t dim, uint32_t window = 0) {
  cache::LayerSpec s;
  s.kind = kind;
  s.n_kv_heads = heads;
  s.head_dim_k = s.head_dim_v = dim;
  s.window = window;
  return s;
}

std::vector<ModelShape> shapes() {
  std::vector<ModelShape> m;
  // Qwen3-0.6B and Qwen3-8B (config.json): full attention, 8 KV heads of 128.
  m.push_back({"Qwen3-0.6B", std::vector<cache::LayerSpec>(28, kv(KILN_CACHE_FULL_KV, 8, 128))});
  m.push_back({"Qwen3-8B", std::vector<cache::LayerSpec>(36, kv(KILN_CACHE_FULL_KV, 8, 128))});
  // Qwen3.5-0.8B: every 4th layer gated attention (2 KV heads of 256), the rest Gated DeltaNet with
  // a conv state (3 x 6144) and a delta-rule state (16 x 128 x 128) per sequence, in f32.
  ModelShape q{"Qwen3.5-0.8B", {}};
  for (int l = 0; l < 24; ++l) {
    if ((l + 1) % 4 == 0) {
      q.layers.push_back(kv(KILN_CACHE_FULL_KV, 2, 256));
      continue;
    }
    cache::LayerSpec r;
    r.kind = KILN_CACHE_RECURRENT;
    r.state_shapes = {{3, 6144}, {16, 128, 128}};
    r.state_dtypes = {KILN_DTYPE_F32, KILN_DTYPE_F32};
    q.layers.push_back(r);
  }
  m.push_back(q);
  // Gemma 4 E2B's attention (bench_model's gemma4-e2b shape at the real depth of 35 layers): sliding
  // layers (window 512) of one 256-dim KV head, every 5th layer full with one 512-dim head, the last
  // 15 layers reading the KV of the last sliding / full layer before them (marked sensitive).
  ModelShape g{"Gemma4-E2B", {}};
  const int n = 35, shared = 15;
  int last_sliding = -1, last_full = -1;
  for (int l = 0; l < n; ++l) {
    const bool full = (l + 1) % 5 == 0;
    cache::LayerSpec s = full ? kv(KILN_CACHE_FULL_KV, 1, 512) : kv(KILN_CACHE_SLIDING_KV, 1, 256, 512);
    if (l >= n - shared)
      s.shares_with = full ? last_full : last_sliding;
    else
      (full ? last_full : last_sliding) = l;
    g.layers.push_back(s);
  }
  for (auto& s : g.layers)
    if (s.shares_with >= 0) g.layers[static_cast<size_t>(s.shares_with)].kv_sensitive = true;
  m.push_back(g);
  return m;
}

/** The most sequences of `context` tokens `budget` holds (every group at its full per-sequence need). */
uint32_t max_sequences(const std::vector<cache::LayerSpec>& layers, cache::CacheOptions o) {
  uint32_t lo = 0, hi = 1u << 20;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    o.max_seqs = mid;
    bool fits = false;
    try {
      const cache::CacheLayout L = cache::plan_layout(layers, o);
      fits = true;
      for (const cache::KvGroup& g : L.groups) fits = fits && g.n_blocks >= cache::blocks_per_sequence(g, o) * mid;
    } catch (const std::exception&) {
    }
    (fits ? lo : hi) = fits ? mid : mid - 1;
  }
  return lo;
}

void memory_table(uint64_t budget, uint32_t context) {
  std::printf("KV cache memory: bytes per token over all layers, and the most concurrent %u-token sequences in %s\n",
              context, format_bytes(budget).c_str());
  std::printf("(the cache planner's own arithmetic; 'default' keeps the last layer and sensitive layers at f16)\n\n");
  std::printf("%-14s %-6s %-8s %12s %10s %12s %10s\n", "model", "format", "layers", "bytes/token", "vs f16", "max seqs",
              "vs f16");
  for (const ModelShape& m : shapes()) {
    cache::CacheOptions o;
    o.block_tokens = 16;
    o.budget_bytes = budget;
    o.max_context = context;
    const uint32_t last = static_cast<uint32_t>(m.layers.size() - 1);
    uint64_t f16_bytes = 0;
    uint32_t f16_seqs = 0;
    for (const auto& [name, t] :
         {std::pair{"f16", KILN_DTYPE_F16}, std::pair{"q8", KILN_DTYPE_KV_Q8}, std::pair{"q4", KILN_DTYPE_KV_Q4}})
      for (bool every : {false, true}) {
        if (t == KILN_DTYPE_F16 && every) continue;
        o.kv_dtype = t;
        o.kv_layers.clear();
        if (every)  // name every layer with storage (sensitive ones and the last one included)
          for (uint32_t l = 0; l <= last; ++l)
            if ((m.layers[l].kind == KILN_CACHE_FULL_KV || m.layers[l].kind == KILN_CACHE_SLIDING_KV) &&
                m.layers[l].shares_with < 0)
              o.kv_layers[l] = t;
        o.max_seqs = 1;
        const uint64_t bytes = cache::plan_layout(m.layers, o).bytes_per_token();
        const uint32_t seqs = max_sequences(m.layers, o);
        if (t == KILN_DTYPE_F16) f16_bytes = bytes, f16_seqs = seqs;
        std::printf("%-14s %-6s %-8s %12llu %9.2fx %12u %9.2fx\n", m.name.c_str(), name, every ? "every" : "default",
                    static_cast<unsigned long long>(bytes), static_cast<double>(f16_bytes) / static_cast<double>(bytes),
                    seqs, static_cast<double>(seqs) / std::max(1u, f16_seqs));
      }
  }
  std::printf("\n");
}

// ------------------------------------------------------------------------------------------------
// Speed.

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int speed_table(int argc, char** argv, uint32_t context) {
  const std::string device = arg(argc, argv, "--device", "auto");
  const int seqs = std::clamp(std::stoi(arg(argc, argv, "--seqs", "4")), 1, 64);
  const int decode = std::max(1, std::stoi(arg(argc, argv, "--decode", "8")));
  const int rounds = std::max(1, std::stoi(arg(argc, argv, "--rounds", "3")));
  bench::Shape shape;
  shape.layers = 4;
  shape.D = 256;
  shape.H = 16;
  shape.KV = 8;
  shape.Dh = 128;
  shape.F = 512;
  shape.V = 2048;
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("kiln-bench-kv-{}.gguf", ::getpid())).string();
  bench::write_qwen3(path, shape, DType::f16);
  PluginRegistry registry;
  register_builtin_plugins(registry);
  if (!registry.find_model_type("qwen3")) registry.register_static(&kiln_plugin_descriptor_llama, "<static llama>");

  const std::vector<std::string> formats = {"f16", "q8", "q4"};
  struct Run {
    std::unique_ptr<model::ModelHost> host;
    std::vector<double> tps;
  };
  std::vector<Run> runs;
  for (const std::string& f : formats) {
    model::HostOptions o;
    o.device = device;
    o.cache.kv_dtype = f;
    o.cache.kv_layers = {{-1, f}};  // every layer: the speed of the format itself
    o.max_seqs = static_cast<uint32_t>(seqs);
    o.max_context = context + static_cast<uint32_t>(decode * rounds) + 16;
    o.max_batch_tokens = 512;
    o.cache.memory_bytes =
        uint64_t{o.max_context} * static_cast<uint64_t>(seqs) * 4 * shape.layers * shape.KV * shape.Dh * 2 +
        (64ull << 20);
    o.progress = false;
    Run r{model::ModelHost::open(path, registry, o), {}};
    // Prefill every sequence to `context` tokens in 512-token chunks.
    for (int s = 0; s < seqs; ++s) {
      r.host->add_sequence(static_cast<uint64_t>(s));
      for (uint32_t at = 0; at < context; at += 512) {
        std::vector<int32_t> ids(std::min<uint32_t>(512, context - at));
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((at + i) * 7919 % shape.V);
        model::StepResult res;
        if (r.host->step({{static_cast<uint64_t>(s), ids, true, false}}, &res) != cache::Status::ok) {
          std::fprintf(stderr, "prefill failed for %s\n", f.c_str());
          return 1;
        }
      }
    }
    runs.push_back(std::move(r));
  }
  std::printf(
      "decode at long context on %s: qwen3-shaped, %d layers, %d KV heads x %d dims, %d sequences of %u "
      "tokens, %d decode steps per round, %d rounds interleaved\n\n",
      runs[0].host->device().info().name.c_str(), shape.layers, shape.KV, shape.Dh, seqs, context, decode, rounds);
  int token = 11;
  for (int round = 0; round < rounds + 1; ++round)  // round 0 warms up (graphs, pipelines)
    for (Run& r : runs) {
      const auto t0 = Clock::now();
      for (int i = 0; i < decode; ++i) {
        std::vector<cache::SeqStep> batch;
        for (int s = 0; s < seqs; ++s)
          batch.push_back({static_cast<uint64_t>(s), {(token + s) % shape.V}, true, false});
        model::StepResult res;
        r.host->step(batch, &res);
        ++token;
      }
      if (round > 0) r.tps.push_back(seqs * decode / std::chrono::duration<double>(Clock::now() - t0).count());
    }
  std::printf("%-6s %14s %10s %10s %10s %14s\n", "format", "decode t/s", "min", "max", "vs f16", "KV bytes/token");
  const double f16 = median(runs[0].tps);
  for (size_t i = 0; i < runs.size(); ++i) {
    const double m = median(runs[i].tps);
    std::printf("%-6s %14.1f %10.1f %10.1f %9.2fx %14llu\n", formats[i].c_str(), m,
                *std::min_element(runs[i].tps.begin(), runs[i].tps.end()),
                *std::max_element(runs[i].tps.begin(), runs[i].tps.end()), m / f16,
                static_cast<unsigned long long>(runs[i].host->cache().layout().bytes_per_token()));
  }
  std::filesystem::remove(path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (flag(argc, argv, "--help")) {
    std::printf(
        "bench_kv_cache [--device auto|cpu|vulkan] [--budget 8GiB] [--context 4096] [--seqs 4] [--decode 8]\n"
        "               [--rounds 3] [--memory-only]\n"
        "KV bytes per token and concurrent sequences per format (f16, q8, q4), then decode tok/s at long context.\n");
    return 0;
  }
  uint64_t budget = 0;
  if (!parse_byte_size(arg(argc, argv, "--budget", "8GiB"), &budget) || budget == 0) {
    std::fprintf(stderr, "--budget must be a size such as 8GiB\n");
    return 2;
  }
  const auto context = static_cast<uint32_t>(std::max(16, std::stoi(arg(argc, argv, "--context", "4096"))));
  memory_table(budget, context);
  if (flag(argc, argv, "--memory-only")) return 0;
  return speed_table(argc, argv, context);
}
