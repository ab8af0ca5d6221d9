// Time to first token of a 4k-token prompt whose first 3.9k tokens are in the prefix cache, against
// the same prompt cold, for one model of each cache mix: llama (full attention), gemma4 (sliding +
// full windows, per-layer embeddings, KV sharing) and qwen3_5 (Gated DeltaNet state snapshots +
// full attention). Models are small random ones written here (hidden 512, the architectures' real
// head dims), so a cold 4k prefill takes seconds on lavapipe; the ratio is what this measures.
// The scheduler and model host run as kiln serve drives them (no HTTP).
//
//   bench_prefix_cache [--device cpu|vulkan|auto] [--prompt 4000] [--shared 3900] [--arch llama,gemma4,qwen3_5]
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gemma4_checkpoint.hpp"
#include "model/model_host.hpp"
#include "plugin/registry.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "sched/scheduler.hpp"
#include "synthetic_model.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_5(uint32_t, uint32_t);

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

/** Writes the arch's model into `dir`; returns its path. */
std::string write_model(const std::string& arch, const std::string& dir) {
  std::filesystem::create_directories(dir);
  if (arch == "llama") {
    bench::Shape s;
    s.layers = 8, s.D = 512, s.H = 8, s.KV = 4, s.Dh = 64, s.F = 1536, s.V = 32000;
    bench::write_qwen3(dir + "/model.gguf", s, DType::f16);
    return dir + "/model.gguf";
  }
  if (arch == "gemma4") {
    test::Gemma4Spec g;
    g.name = "bench-prefix";
    g.vocab = 32000, g.hidden = 512, g.inter = 1536, g.layers = 6;
    g.sliding = {true, true, false, true, true, false};
    g.heads = 4, g.kv_heads = 1, g.head_dim = 256, g.global_head_dim = 512, g.global_kv_heads = 1;
    g.window = 512, g.kv_shared = 2, g.ple = 64, g.moe = false, g.double_wide = false;
    g.dtype = DType::f16;
    test::write_gemma4_hf(g, dir);
    return dir;
  }
  test::Qwen35Spec q;
  q.name = "bench-prefix";
  q.model_type = "qwen3_5";
  q.vocab = 32000, q.hidden = 512, q.layers = 8, q.inter = 1536;
  q.linear = {true, true, true, false, true, true, true, false};
  q.heads = 4, q.kv_heads = 1, q.head_dim = 256;
  q.k_heads = 4, q.v_heads = 8, q.k_dim = q.v_dim = 128;
  q.tied = true;
  q.dtype = DType::f16;
  test::write_qwen35_hf(q, dir);
  return dir;
}

/** Seconds from enqueueing `s` until its first token is sampled (prefill and the first decode). */
double time_to_first_token(model::ModelHost& host, sched::Scheduler& sched, sched::Sequence& s) {
  const auto t0 = Clock::now();
  sched.enqueue(&s);
  for (;;) {
    sched::Plan p = sched.plan();
    if (p.empty()) throw std::runtime_error("the scheduler planned nothing");
    model::StepResult r;
    const model::StepStatus st = host.step(p.steps(), &r);
    if (!st.ok()) throw std::runtime_error(st.message);
    sched.commit(p);
    for (size_t i = 0; i < p.rows.size(); ++i)
      if (p.rows[i].seq == &s && p.rows[i].sample) {
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        sched.remove(&s);
        return t;
      }
  }
}

sched::Sequence make(const std::vector<int32_t>& tokens, const std::string& salt) {
  sched::Sequence s;
  s.tokens = tokens;
  s.prompt_len = static_cast<uint32_t>(tokens.size());
  s.cache_key = salt;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string device = arg(argc, argv, "--device", "auto");
  const int n = std::stoi(arg(argc, argv, "--prompt", "4000"));
  const int shared = std::stoi(arg(argc, argv, "--shared", "3900"));
  std::vector<std::string> archs;
  for (std::string list = arg(argc, argv, "--arch", "llama,gemma4,qwen3_5"); !list.empty();) {
    const size_t c = list.find(',');
    archs.push_back(list.substr(0, c));
    list = c == std::string::npos ? "" : list.substr(c + 1);
  }
  PluginRegistry registry;
  register_builtin_plugins(registry);
  if (!registry.find_model_type("qwen3")) registry.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
  if (!registry.find_model_type("gemma4")) registry.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
  if (!registry.find_model_type("qwen35"))
    registry.register_static(&kiln_plugin_descriptor_qwen3_5, "<static qwen3_5>");
  const std::string tmp = (std::filesystem::temp_directory_path() / "kiln-bench-prefix").string();
  std::printf("prompt %d tokens, the first %d shared with a prompt served before; models: hidden 512 (see header)\n\n",
              n, shared);
  std::printf("%-8s %-28s %10s %10s %8s %8s %14s\n", "arch", "device", "cold s", "cached s", "ratio", "cached",
              "snapshot/pfx");
  for (const std::string& arch : archs) {
    const std::string path = write_model(arch, tmp + "/" + arch);
    model::HostOptions o;
    o.device = device;
    o.max_context = static_cast<uint32_t>(n + 16);
    o.max_seqs = 4;
    o.cache.memory_bytes = 1ull << 30;
    o.prefix_snapshots = true;
    o.progress = false;
    auto host = model::ModelHost::open(path, registry, o);
    sched::Scheduler sched(*host, 0, true);
    const int32_t V = static_cast<int32_t>(host->limits().n_vocab);
    auto prompt = [&](int suffix_seed) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i)
        t[static_cast<size_t>(i)] = (i < shared ? i * 7919 + 11 : i * 104729 + suffix_seed * 31) % (V - 3) + 3;
      return t;
    };
    // Every pipeline compiled first (lavapipe JIT-compiles at first use), the cold shapes' and a
    // hit's; then cold: a salt nothing shares.
    sched::Sequence jit = make(prompt(0), "jit"), jit_hit = make(prompt(3), "jit");
    time_to_first_token(*host, sched, jit);
    time_to_first_token(*host, sched, jit_hit);
    sched::Sequence cold = make(prompt(2), "cold");
    const double t_cold = time_to_first_token(*host, sched, cold);
    sched::Sequence first = make(prompt(1), "warm"), second = make(prompt(2), "warm");
    time_to_first_token(*host, sched, first);
    const double t_hit = time_to_first_token(*host, sched, second);
    const sched::SchedulerStats st = sched.stats();
    const std::string snap =
        st.snapshots ? fmt::format("{:.1f} MiB", static_cast<double>(st.snapshot_bytes) / st.snapshots / (1 << 20))
                     : "-";
    std::printf("%-8s %-28.28s %10.3f %10.3f %8.1f %8u %14s\n", arch.c_str(), host->device().info().name.c_str(),
                t_cold, t_hit, t_cold / t_hit, second.cached, snap.c_str());
    std::fflush(stdout);
  }
  std::filesystem::remove_all(tmp);
  std::printf(
      "\ncold: time to first token with nothing cached; cached: the same prompt after one that shares its first %d\n"
      "tokens (cached = tokens reused); snapshot/pfx: recurrent state per snapshot (one per cached hybrid prefix\n"
      "position).\n",
      shared);
  return 0;
}
