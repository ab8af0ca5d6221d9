// Decode and prefill throughput of a ~0.5B-parameter Qwen3-shaped model with random weights that
// this program writes (GGUF: F16, BF16, Q8_0), printed beside the memory-bandwidth roofline:
// weight bytes read per decoded token ÷ STREAM-triad bandwidth measured in the same run (the
// same triad as bench_ops, re-measured before each row; the best measurement is the limit). On a
// GPU the limit is the device's own copy bandwidth instead (bench_ops' reference too), measured
// once; --roofline triad|copy forces either. The "limit GB/s" column says which.
// Prefill is timed after an untimed prefill of the same length, decode after two untimed decode
// steps (the first of each compiles its pipelines);
// decode t/s is 1 / the median step time. --seqs S decodes S sequences together (one token each
// per step, as continuous batching does): decode t/s is then S / the median step, and the ratio
// is against the one-sequence roofline (one weight pass per step serves S tokens).
//
// --model PATH runs a real checkpoint instead (e.g. configs/models/stories260K.gguf, which is
// dispatch-bound: its rate measures the per-step overhead of host and device, not bandwidth).
// A second table splits the median decode step into the host's work (graph build, memory plan,
// binding and preparing the executable — Vulkan's recording — all zero once the batch shape's graph
// is cached; input upload; logits download) and the device's compute (submit to end of run), with
// the bytes a step reads back and its kernel launches and barriers (Vulkan dispatches and pipeline
// barriers; CPU devices count nodes). --candidates K reads back each row's K best ids and logits (the
// device's TOP_K, what the server's samplers use when they can) instead of whole logits rows.
//
// --arch gemma4-e2b writes a Gemma-4-shaped model instead (E2B's structure scaled to 10 layers of
// hidden 1024: sliding/full layers with head dims 256/512, per-layer embeddings, the last 4 layers
// reading shared KV with double-wide MLPs, vocabulary 262144 tied); --arch gemma4-moe a small
// 26B-A4B-like one (6 layers, 32 experts top-4 beside the dense MLP, K=V full layers). Their
// roofline counts what a decode step reads: the tied head, every layer matrix, the experts by
// top-k / E; not the gathered embedding and per-layer-embedding rows. --arch qwen3_5 writes a
// Qwen3.5-0.8B-shaped model (24 layers: 18 Gated DeltaNet + 6 gated attention, hidden 1024, the
// 248320-token vocabulary tied): its prefill runs the chunked delta rule on GPUs and the recurrent
// one on lavapipe unless KILN_VULKAN_DELTA=chunked|recurrent says otherwise.
//
//   bench_model [--device cpu|vulkan|auto] [--dtype f16,bf16,q8_0] [--layers 28] [--prompt 64]
//               [--decode 16] [--seqs 1] [--candidates 0] [--dir /tmp] [--keep] [--roofline auto|triad|copy]
//               [--arch qwen3|gemma4-e2b|gemma4-moe|qwen3_5] [--model PATH]
// --keep leaves the model files in --dir (kiln-bench-<arch>-<dtype>.gguf), for kiln generate / logits.
#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_limits.hpp"
#include "gemma4_checkpoint.hpp"
#include "machine_limits.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/model_host.hpp"
#include "plugin/registry.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "synthetic_model.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_5(uint32_t, uint32_t);

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

/** One model's prefill and decode: the rates and the median decode step's parts. */
struct Measured {
  double prefill_tps = 0, decode_tps = 0;
  model::StepTimings step;   ///< medians over the timed decode steps, part by part
  double step_s = 0;         ///< the median decode step's wall time
  model::StepTimings first;  ///< the first decode step: its shape's graph built, planned, recorded
  double first_s = 0;
  uint64_t readback_bytes = 0;  ///< per decode step
  uint32_t kernels = 0, barriers = 0;  ///< per decode step (Vulkan dispatches and barriers; CPU: nodes)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

Measured measure(model::ModelHost& host, int prompt, int decode, int seqs, uint32_t candidates) {
  const auto V = static_cast<int32_t>(host.hparams().n_vocab);
  std::vector<int32_t> ids(static_cast<size_t>(prompt));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(V));
  model::StepResult r;
  Measured m;
  // An untimed prefill of the same shape first: the prefill rate is then the kernels', not the
  // pipelines' compilation (lavapipe JIT-compiles each pipeline at its first use).
  host.add_sequence(1000);
  host.step({{1000, ids, true, false}}, &r);
  host.release(1000);
  for (int s = 0; s < seqs; ++s) {  // the prefill rate is the first sequence's
    host.add_sequence(static_cast<uint64_t>(s));
    auto t0 = Clock::now();
    if (const model::StepStatus st = host.step({{static_cast<uint64_t>(s), ids, true, false}}, &r); !st.ok())
      throw std::runtime_error("a prefill step was refused: " + st.message);
    if (s == 0) m.prefill_tps = prompt / seconds_since(t0);
  }
  auto decode_step = [&](int32_t token) {
    std::vector<cache::SeqStep> batch;
    for (int s = 0; s < seqs; ++s) batch.push_back({static_cast<uint64_t>(s), {(token + s) % V}, true, false});
    if (const model::StepStatus st = host.step(batch, &r, {candidates}); !st.ok())
      throw std::runtime_error("a decode step was refused: " + st.message);
  };
  auto t_first = Clock::now();
  decode_step(5);  // warm-up: the decode shape's graph (and on lavapipe the pipelines' JIT)
  m.first_s = seconds_since(t_first);
  m.first = r.timings;
  decode_step(6);
  // Per-step wall time and parts; medians are robust to a noisy shared VM.
  std::vector<double> steps, build, plan, bind, upload, compute, download;
  for (int i = 0; i < decode; ++i) {
    auto t0 = Clock::now();
    decode_step(i + 11);
    steps.push_back(seconds_since(t0));
    build.push_back(r.timings.build), plan.push_back(r.timings.plan), bind.push_back(r.timings.bind);
    upload.push_back(r.timings.upload), compute.push_back(r.timings.compute), download.push_back(r.timings.download);
  }
  m.step_s = median(steps);
  m.decode_tps = seqs / m.step_s;
  m.step = {median(build), median(plan), median(bind), median(upload), median(compute), median(download)};
  m.readback_bytes = r.readback_bytes;
  m.kernels = r.kernels;
  m.barriers = r.barriers;
  for (int s = 0; s < seqs; ++s) host.release(static_cast<uint64_t>(s));
  return m;
}

/** The Gemma 4 benchmark shapes (see the header). */
test::Gemma4Spec gemma4_shape(const std::string& arch, DType t) {
  test::Gemma4Spec s;
  s.name = arch;
  s.dtype = t;
  s.vocab = 262144;
  s.hidden = 1024;
  s.heads = 8;
  s.head_dim = 256;
  s.global_head_dim = 512;
  s.window = 512;
  if (arch == "gemma4-e2b") {
    s.layers = 10;
    s.sliding = {true, true, true, true, false, true, true, true, true, false};
    s.inter = 4096;
    s.kv_heads = 1;
    s.k_eq_v = false;
    s.kv_shared = 4;
    s.double_wide = true;
    s.ple = 64;
    s.moe = false;
  } else {
    s.layers = 6;
    s.sliding = {true, true, true, true, true, false};
    s.inter = 1024;
    s.kv_heads = 4;
    s.k_eq_v = true;
    s.global_kv_heads = 1;
    s.kv_shared = 0;
    s.double_wide = false;
    s.ple = 0;
    s.moe = true;
    s.experts = 32;
    s.top_k = 4;
    s.expert_inter = 512;
  }
  return s;
}

/** Qwen3.5-0.8B's shape (see the header). */
test::Qwen35Spec qwen35_shape(DType t) {
  test::Qwen35Spec s;
  s.name = "qwen3_5-bench";
  s.model_type = "qwen3_5";
  s.dtype = t;
  s.vocab = 248320;
  s.hidden = 1024;
  s.layers = 24;
  s.linear.clear();
  for (int l = 0; l < s.layers; ++l) s.linear.push_back((l + 1) % 4 != 0);
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 256;
  s.k_heads = s.v_heads = 16;
  s.k_dim = s.v_dim = 128;
  s.inter = 3584;
  s.tied = true;
  return s;
}

void print_step_parts(const std::vector<std::pair<std::string, Measured>>& rows) {
  std::printf(
      "\ndecode step, microseconds: host parts (build, plan and bind+record are 0 once the shape's graph is cached), "
      "then the device's compute (submit to end of run); 'median' over the timed steps, 'first' the first decode "
      "step of its shape (its graph built and recorded; on lavapipe also the pipelines' JIT)\n");
  std::printf("%-34s %-7s %10s %9s %9s %9s %9s %9s %10s %7s %12s %8s %8s\n", "row", "step", "wall", "build", "plan",
              "bind", "upload", "download", "compute", "host %", "read back B", "kernels", "barriers");
  auto line = [](const std::string& label, const char* which, double wall, const model::StepTimings& t,
                 const Measured& m) {
    const double host = t.build + t.plan + t.bind + t.upload + t.download;
    std::printf("%-34.34s %-7s %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f %10.1f %6.1f%% %12llu %8u %8u\n", label.c_str(),
                which, wall * 1e6, t.build * 1e6, t.plan * 1e6, t.bind * 1e6, t.upload * 1e6, t.download * 1e6,
                t.compute * 1e6, wall > 0 ? 100 * host / wall : 0.0, static_cast<unsigned long long>(m.readback_bytes),
                m.kernels, m.barriers);
  };
  for (const auto& [label, m] : rows) {
    line(label, "median", m.step_s, m.step, m);
    line(label, "first", m.first_s, m.first, m);
  }
}

}  // namespace

namespace {
int run(int argc, char** argv) {
  if (std::any_of(argv + 1, argv + argc,
                  [](const char* a) { return std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0; })) {
    std::printf(
        "bench_model: decode and prefill tok/s of a generated model beside the memory-bandwidth roofline\n\n"
        "  --device cpu|vulkan|auto      device (default auto)\n"
        "  --arch qwen3|gemma4-e2b|gemma4-moe|qwen3_5   the generated model's shape (default qwen3: Qwen3-0.6B's)\n"
        "  --dtype f16,bf16,q8_0         weight types, one row each (default all three)\n"
        "  --layers N                    qwen3 layers (default 28)\n"
        "  --prompt N                    prefill length (default 64)\n"
        "  --decode N                    timed decode steps (default 16)\n"
        "  --seqs S                      sequences decoding together, 1-64 (default 1)\n"
        "  --candidates K                read back each row's K best ids and logits, not the rows (default 0)\n"
        "  --roofline auto|triad|copy    bandwidth limit: host triad for CPU devices, device copy for GPUs\n"
        "  --model PATH                  run a real checkpoint instead (HF directory or GGUF)\n"
        "  --dir DIR, --keep             where the generated GGUFs go; keep them (kiln-bench-<arch>-<dtype>.gguf)\n"
        "  --help                        this text\n");
    return 0;
  }
  bench::Shape shape;
  shape.layers = std::stoi(arg(argc, argv, "--layers", "28"));
  const int prompt = std::stoi(arg(argc, argv, "--prompt", "64"));
  const int decode = std::stoi(arg(argc, argv, "--decode", "16"));
  const int seqs = std::clamp(std::stoi(arg(argc, argv, "--seqs", "1")), 1, 64);
  const auto candidates = static_cast<uint32_t>(std::clamp(std::stoi(arg(argc, argv, "--candidates", "0")), 0, 1024));
  const std::string device = arg(argc, argv, "--device", "auto");
  // The bandwidth limit of the roofline: the host's triad for CPU devices (lavapipe included), the
  // device's copy bandwidth for GPUs (auto); --roofline triad|copy forces one.
  const std::string roofline = arg(argc, argv, "--roofline", "auto");
  const std::string dir = arg(argc, argv, "--dir", std::filesystem::temp_directory_path().c_str());
  const bool keep = std::any_of(argv + 1, argv + argc, [](const char* a) { return std::strcmp(a, "--keep") == 0; });
  {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      std::fprintf(stderr, "--dir %s: cannot create that folder (%s)\n", dir.c_str(),
                   ec ? ec.message().c_str() : "a file of that name exists");
      return 2;
    }
  }
  const std::string arch = arg(argc, argv, "--arch", "qwen3");
  if (arch != "qwen3" && arch != "gemma4-e2b" && arch != "gemma4-moe" && arch != "qwen3_5") {
    std::fprintf(stderr, "--arch must be qwen3, gemma4-e2b, gemma4-moe or qwen3_5\n");
    return 2;
  }
  std::vector<std::pair<std::string, DType>> dtypes;  // the weight types to write and time, by name
  {
    std::string list = arg(argc, argv, "--dtype", "f16,bf16,q8_0");
    for (size_t i = 0; i <= list.size();) {
      size_t e = list.find(',', i);
      if (e == std::string::npos) e = list.size();
      const std::string name = list.substr(i, e - i);
      if (name != "f16" && name != "bf16" && name != "q8_0") {
        std::fprintf(stderr,
                     "--dtype %s: bench_model writes f16, bf16 and q8_0 models; for other formats time llama.cpp's "
                     "own files (bench/model/vs_llama_cpp.py --quants Q4_0,Q4_K_M,...)\n",
                     name.c_str());
        return 2;
      }
      dtypes.emplace_back(name, name == "q8_0" ? DType::q8_0 : name == "bf16" ? DType::bf16 : DType::f16);
      i = e + 1;
    }
  }
  PluginRegistry registry;
  register_builtin_plugins(registry);
  if (!registry.find_model_type("qwen3")) registry.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
  if (!registry.find_model_type("gemma4")) registry.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
  if (!registry.find_model_type("qwen35"))
    registry.register_static(&kiln_plugin_descriptor_qwen3_5, "<static qwen3_5>");
  auto options = [&] {
    model::HostOptions o;
    o.device = device;
    o.cache.kv_dtype = "f16";
    o.max_seqs = static_cast<uint32_t>(seqs);
    o.max_context = static_cast<uint32_t>(prompt + decode + 10);
    o.cache.memory_bytes = std::max<uint64_t>(512ull << 20, (64ull << 20) * static_cast<uint64_t>(seqs));
    o.max_batch_tokens = static_cast<uint32_t>(std::max(prompt, seqs));  // a prefill, or one token per sequence
    o.progress = false;
    return o;
  };
  std::vector<std::pair<std::string, Measured>> parts;

  if (const std::string path = arg(argc, argv, "--model", ""); !path.empty()) {
    auto host = model::ModelHost::open(path, registry, options());
    const Measured m = measure(*host, prompt, decode, seqs, candidates);
    std::printf("model %s (%s) on %s; prompt %d, decode %d, sequences %d\n\n", path.c_str(),
                host->hparams().architecture, host->device().info().name.c_str(), prompt, decode, seqs);
    std::printf("%-28s %12s %12s\n", "device", "decode t/s", "prefill t/s");
    std::printf("%-28.28s %12.1f %12.1f\n", host->device().info().name.c_str(), m.decode_tps, m.prefill_tps);
    parts.emplace_back(host->device().info().name, m);
    print_step_parts(parts);
    return 0;
  }

  double bw = bench::triad_gbs();
  if (arch == "qwen3")
    std::printf(
        "triad bandwidth: %.1f GB/s (re-measured per row); model: qwen3-shaped, %d layers, D %d, FF %d, vocab %d; "
        "prompt %d, decode %d, sequences %d\n\n",
        bw, shape.layers, shape.D, shape.F, shape.V, prompt, decode, seqs);
  else
    std::printf(
        "triad bandwidth: %.1f GB/s (re-measured per row); model: %s (see bench_model.cpp); prompt %d, decode %d, "
        "sequences %d\n\n",
        bw, arch.c_str(), prompt, decode, seqs);
  std::printf("%-6s %-28s %10s %10s %12s %-12s %12s %8s %12s %8s\n", "dtype", "device", "params(M)", "GB/token",
              "decode t/s", "limit GB/s", "roofline t/s", "ratio", "prefill t/s", "ratio");
  double copy_bw = 0;  // the device's copy bandwidth, measured once (first row that needs it)
  for (const auto& [name, t] : dtypes) {
    const std::string path = dir + "/kiln-bench-" + arch + "-" + name + ".gguf";
    uint64_t per_token = 0;
    double params =
        static_cast<double>(shape.layers) *
            (2.0 * shape.H * shape.Dh * shape.D + 2.0 * shape.KV * shape.Dh * shape.D + 3.0 * shape.F * shape.D) +
        2.0 * shape.V * shape.D;
    if (arch == "qwen3") {
      per_token = bench::write_qwen3(path, shape, t);
    } else if (arch == "qwen3_5") {
      const test::Qwen35Spec q = qwen35_shape(t);
      test::write_qwen35_gguf(q, path);
      const test::Qwen35Cost cost = test::qwen35_cost(q);
      per_token = cost.decode_bytes;
      params = cost.params;
    } else {
      const test::Gemma4Spec g = gemma4_shape(arch, t);
      test::write_gemma4_gguf(g, path);
      const test::Gemma4Cost cost = test::gemma4_cost(g);
      per_token = cost.decode_bytes;
      params = cost.params;
    }
    bw = std::max(bw, bench::triad_gbs(256, 3));
    {
      auto host = model::ModelHost::open(path, registry, options());
      const Measured m = measure(*host, prompt, decode, seqs, candidates);
      double limit = bw;
      std::string limit_name = "triad";
      if (roofline == "copy" || (roofline == "auto" && bench::is_gpu(host->device()))) {
        if (copy_bw == 0) copy_bw = bench::device_copy_gbs(host->device(), 512, 5);
        limit = copy_bw;
        limit_name = "copy";
      }
      const double roof = limit * 1e9 / static_cast<double>(per_token);
      std::printf("%-6s %-28.28s %10.0f %10.3f %12.2f %-12s %12.2f %8.2f %12.2f %8.2f\n", name.c_str(),
                  host->device().info().name.c_str(), params / 1e6, static_cast<double>(per_token) / 1e9, m.decode_tps,
                  fmt::format("{} {:.0f}", limit_name, limit).c_str(), roof, m.decode_tps / roof, m.prefill_tps,
                  m.prefill_tps / (roof * prompt));
      std::fflush(stdout);
      parts.emplace_back(name + " " + host->device().info().name, m);
    }
    if (!keep) std::filesystem::remove(path);
  }
  std::printf(
      "\nratio = measured ÷ bandwidth roofline (prefill: ÷ prompt × roofline, i.e. one weight pass per step;\n"
      "prefill is compute-bound, so its ratio says how far from bandwidth-bound it is, not a target).\n");
  print_step_parts(parts);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a file that cannot be written, a model that cannot load: say so
    std::fprintf(stderr, "bench_model: %s\n", e.what());
    return 1;
  }
}
