// bench_ops: GEMV (4096x4096, decode) and GEMM (512x4096x4096, prefill) on the Vulkan backend at
// f32 / f16 / bf16 / q8_0 / q4_0 and the k-quants (kTypes), with this machine's STREAM triad and FMA peak measured in
// the same run, printing time, GB/s or GFLOP/s and the ratio to those limits.
//
//   bench_ops [--quick] [--no-gemm] [--no-gemv] [--no-small] [--dtype f32|f16|...|q4_K|q6_K|iq4_xs] [--reps N]
//             [--device D]   (--no-small: only the GEMV/GEMM rows)
//             [--shape MxK]   (GEMV/GEMM weight shape; default 4096x4096)
//
// Wall time of Device::compute() (record + submit + fence wait, i.e. what the engine pays) after a
// warm-up (the first dispatch of a pipeline includes lavapipe's JIT): median and best of the timed
// runs. Rates and ratios use the best run against the best limit measurement (both "what this
// machine does when nothing else runs"), because the dev VM is shared with other builds.
// GEMV rotates over 4 weight matrices so the 32 MiB L3 cannot hold them between runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/vulkan/device.hpp"
#include "core/ggml_blocks.hpp"
#include "device_limits.hpp"
#include "machine_limits.hpp"

using namespace kiln;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// subnormal: make ~1% of f16 weights subnormal (|w| < 6.1e-5), as in trained checkpoints; a kernel
// that lets them become f32 denormal operands pays a microcode assist per vector on Intel CPUs.
/** The weight types timed: the float types, q8_0 / q4_0, and the block formats of the files people
    download (Q4_K_M mixes q4_K and q6_K; Q5_K_M, Q6_K, IQ4_XS). */
const DType kTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,  DType::q4_0,
                        DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_xs};

std::vector<uint8_t> random_weights(DType t, int64_t M, int64_t K, uint32_t seed, bool subnormal = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  size_t bytes = static_cast<size_t>(M) * row_bytes(t, K);
  std::vector<uint8_t> w(bytes);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  // Keep floats finite and scales sane: overwrite exponents / block scales with small values.
  if (t == DType::f32) {
    auto* f = reinterpret_cast<float*>(w.data());
    std::uniform_real_distribution<float> u(-1, 1);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = u(rng);
  } else if (t == DType::f16 || t == DType::bf16) {
    auto* h = reinterpret_cast<uint16_t*>(w.data());
    for (size_t i = 0; i < bytes / 2; ++i)
      h[i] = static_cast<uint16_t>(t == DType::f16 ? (0x3800 | (h[i] & 0x83ff)) : (0x3f00 | (h[i] & 0x807f)));
    if (subnormal && t == DType::f16)
      for (size_t i = 0; i < bytes / 2; i += 97) h[i] = static_cast<uint16_t>(h[i] & 0x83ff);
  } else {  // block formats: every f16 field (scale, min) 0.0078125
    const size_t bb = static_cast<size_t>(quant_block_bytes(t));
    for (size_t b = 0; b < bytes; b += bb)
      for (int f : half_fields(t)) {
        w[b + static_cast<size_t>(f)] = 0x00;
        w[b + static_cast<size_t>(f) + 1] = 0x20;
      }
  }
  return w;
}

/** R x K uniform(-1, 1) activations (the same for every run) on `dev`. */
std::unique_ptr<backend::Buffer> random_activations(backend::Device& dev, int64_t R, int64_t K) {
  std::vector<float> x(static_cast<size_t>(R * K));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  auto xb = dev.allocate(x.size() * 4, backend::BufferUsage::activations);
  xb->upload(0, x.data(), x.size() * 4);
  return xb;
}

struct Result {
  double ms, best_ms;  ///< median and best of the timed runs (time_per_node: µs per node)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result run_matmul(backend::Device& dev, DType t, int64_t R, int64_t M, int64_t K, int copies, int reps,
                  bool subnormal = false, bool prepared = true) {
  std::vector<std::unique_ptr<backend::Buffer>> ws;
  for (int c = 0; c < copies; ++c) {
    auto w = random_weights(t, M, K, 1234u + static_cast<uint32_t>(c), subnormal);
    ws.push_back(dev.allocate(w.size(), backend::BufferUsage::weights));
    if (prepared)  // as the model host loads weights
      ws.back()->upload_weights(0, w.data(), w.size(), t);
    else
      ws.back()->upload(0, w.data(), w.size());
  }
  auto xb = random_activations(dev, R, K);
  auto yb = dev.allocate(static_cast<size_t>(R * M) * 4, backend::BufferUsage::activations);
  std::vector<backend::BoundGraph> graphs(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    backend::Node n;
    n.op = KILN_OP_MATMUL;
    n.n_src = 2;
    n.src[0] = {xb.get(), 0, backend::TensorDesc(DType::f32, {R, K})};
    n.src[1] = {ws[static_cast<size_t>(c)].get(), 0, backend::TensorDesc(t, {M, K})};
    n.dst = {yb.get(), 0, backend::TensorDesc(DType::f32, {R, M})};
    graphs[static_cast<size_t>(c)].nodes.push_back(n);
  }
  for (int c = 0; c < copies; ++c) dev.compute(graphs[static_cast<size_t>(c)]);  // warm-up + JIT
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    dev.compute(graphs[static_cast<size_t>(r % copies)]);
    times.push_back(now() - t0);
  }
  double s = median(times), b = *std::min_element(times.begin(), times.end());
  return {s * 1e3, b * 1e3};
}

/** On a GPU one GEMV is microseconds, below a compute()'s submit-and-wait: `copies` GEMVs over
 *  distinct weights and outputs run as one graph (no dependencies between them) and the time is
 *  per GEMV. */
Result run_matmul_batch(backend::Device& dev, DType t, int64_t R, int64_t M, int64_t K, int copies, int reps) {
  std::vector<std::unique_ptr<backend::Buffer>> ws;
  auto xb = random_activations(dev, R, K);
  auto yb = dev.allocate(static_cast<size_t>(R * M * copies) * 4, backend::BufferUsage::activations);
  backend::BoundGraph g;
  for (int c = 0; c < copies; ++c) {
    auto w = random_weights(t, M, K, 1234u + static_cast<uint32_t>(c));
    ws.push_back(dev.allocate(w.size(), backend::BufferUsage::weights));
    ws.back()->upload_weights(0, w.data(), w.size(), t);
    backend::Node n;
    n.op = KILN_OP_MATMUL;
    n.n_src = 2;
    n.src[0] = {xb.get(), 0, backend::TensorDesc(DType::f32, {R, K})};
    n.src[1] = {ws.back().get(), 0, backend::TensorDesc(t, {M, K})};
    n.dst = {yb.get(), static_cast<size_t>(R * M * c) * 4, backend::TensorDesc(DType::f32, {R, M})};
    g.nodes.push_back(n);
  }
  dev.compute(g);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    dev.compute(g);
    times.push_back((now() - t0) / copies);
  }
  return {median(times) * 1e3, *std::min_element(times.begin(), times.end()) * 1e3};
}

/** µs per node of `g`: one untimed run (lavapipe compiles its pipelines), then `reps` timed runs. */
Result time_per_node(backend::Device& dev, const backend::BoundGraph& g, int reps) {
  dev.compute(g);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    dev.compute(g);
    times.push_back((now() - t0) / static_cast<double>(g.nodes.size()) * 1e6);
  }
  return {median(times), *std::min_element(times.begin(), times.end())};
}

void print_small_op(const char* name, const std::string& shape, const Result& r) {
  std::printf("%-26s %-10s %7.1f/%-7.1f\n", name, shape.c_str(), r.best_ms, r.ms);
}

// Per-dispatch cost: a graph of `n` dependent ADDs on 1024 floats (each waits for the previous:
// a barrier between every pair), timed per op. A decode step of a 28-layer model is ~500 such
// dispatches, so this bounds how small ops may be before fusing them pays.
Result run_dispatch_chain(backend::Device& dev, int n, int reps) {
  const int64_t N = 1024;
  auto a = dev.allocate(N * 4, backend::BufferUsage::activations),
       b = dev.allocate(N * 4, backend::BufferUsage::activations);
  std::vector<float> ones(N, 1.0f);
  a->upload(0, ones.data(), N * 4);
  b->upload(0, ones.data(), N * 4);
  backend::BoundGraph g;
  for (int i = 0; i < n; ++i) {
    backend::Node node;
    node.op = KILN_OP_ADD;
    node.n_src = 2;
    backend::Buffer* src = i % 2 ? b.get() : a.get();
    backend::Buffer* dst = i % 2 ? a.get() : b.get();
    node.src[0] = {src, 0, backend::TensorDesc(DType::f32, {N})};
    node.src[1] = {src, 0, backend::TensorDesc(DType::f32, {N})};
    node.dst = {dst, 0, backend::TensorDesc(DType::f32, {N})};
    g.nodes.push_back(node);
  }
  return time_per_node(dev, g, reps);
}

// Decode-shaped small ops (a 1024-wide Qwen3 layer, one token) as chains of dependent dispatches:
// what each costs inside a graph, without KILN_PROFILE's per-dispatch timestamps.
struct SmallOp {
  const char* name;
  const char* shape;
  backend::Node node;  // src[0] and dst are filled per link
  int64_t n;           // elements of src[0] / dst
};

void run_small_ops(backend::Device& dev, int chain, int reps) {
  const int64_t D = 1024, FF = 3072, H = 16, HD = 128;
  auto buf = [&](int64_t bytes, const void* init) {
    auto b = dev.allocate(bytes, backend::BufferUsage::activations);
    if (init) b->upload(0, init, bytes);
    return b;
  };
  std::vector<float> ones(2 * FF, 1.0f), noise(2 * FF);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  // MUL's operand stays near 1: 128 chained products of values below 1 reach f32 denormals, whose
  // microcode assists would be timed instead of the kernel.
  std::vector<float> near1(2 * FF);
  for (size_t i = 0; i < near1.size(); ++i) near1[i] = 1.0f + 0.001f * static_cast<float>(static_cast<int>(i % 3) - 1);
  auto a = buf(2 * FF * 4, noise.data()), b = buf(2 * FF * 4, noise.data()), c = buf(2 * FF * 4, noise.data());
  auto e1 = buf(2 * FF * 4, near1.data());
  auto w = buf(D * 4, ones.data());
  int32_t pos0 = 37, slot0 = 5;
  auto pos = buf(4, &pos0), slot = buf(4, &slot0);
  auto cache = buf(64 * D * 2, nullptr);
  auto f32 = [](int64_t n, backend::Buffer* bf = nullptr, size_t off = 0) {
    return backend::TensorRef{bf, off, backend::TensorDesc(DType::f32, {n})};
  };
  std::vector<SmallOp> ops;
  {
    SmallOp o{"ADD", "1024", {}, D};
    o.node.op = KILN_OP_ADD;
    o.node.n_src = 2;
    o.node.src[1] = f32(D, c.get());
    ops.push_back(o);
  }
  {
    SmallOp o{"RMS_NORM w", "1024", {}, D};
    o.node.op = KILN_OP_RMS_NORM;
    o.node.n_src = 2;
    o.node.src[1] = f32(D, w.get());
    o.node.params.eps = 1e-6f;
    ops.push_back(o);
  }
  {
    SmallOp o{"SILU", "3072", {}, FF};
    o.node.op = KILN_OP_SILU;
    o.node.n_src = 1;
    ops.push_back(o);
  }
  {
    SmallOp o{"MUL", "3072", {}, FF};
    o.node.op = KILN_OP_MUL;
    o.node.n_src = 2;
    o.node.src[1] = f32(FF, e1.get());
    ops.push_back(o);
  }
  {
    SmallOp o{"ROPE neox", "1x16x128", {}, H * HD};
    o.node.op = KILN_OP_ROPE;
    o.node.n_src = 2;
    o.node.src[1] = {pos.get(), 0, backend::TensorDesc(DType::i32, {1})};
    o.node.params.theta = 1e6f;
    ops.push_back(o);
  }
  std::printf("\n%-26s %-10s %s\n", "small op (decode shape)", "shape",
              "best/median us per dispatch (a chain of dependent dispatches in one graph)");
  for (SmallOp& o : ops) {
    backend::BoundGraph g;
    for (int i = 0; i < chain; ++i) {
      backend::Node node = o.node;
      backend::Buffer* src = i % 2 ? b.get() : a.get();
      backend::Buffer* dst = i % 2 ? a.get() : b.get();
      node.src[0] = f32(o.n, src);
      node.dst = f32(o.n, dst);
      if (node.op == KILN_OP_ROPE) {
        node.src[0].desc = backend::TensorDesc(DType::f32, {1, H, HD});
        node.dst.desc = node.src[0].desc;
      }
      g.nodes.push_back(node);
    }
    print_small_op(o.name, o.shape, time_per_node(dev, g, reps));
  }
  {  // SET_ROWS: one token's K row into an f16 cache (no chain: each link writes the same slot)
    backend::BoundGraph g;
    for (int i = 0; i < chain; ++i) {
      backend::Node node;
      node.op = KILN_OP_SET_ROWS;
      node.n_src = 3;
      node.src[0] = {cache.get(), 0, backend::TensorDesc(DType::f16, {64, D})};
      node.src[1] = {i % 2 ? a.get() : b.get(), 0, backend::TensorDesc(DType::f32, {1, D})};
      node.src[2] = {slot.get(), 0, backend::TensorDesc(DType::i32, {1})};
      node.dst = node.src[0];
      g.nodes.push_back(node);
    }
    print_small_op("SET_ROWS f16", "1x1024", time_per_node(dev, g, reps));
  }
  // Decode attention of one token (16 query heads, 8 KV heads of 128, f16 cache in blocks of 16)
  // over 512 and 4096 cached keys: what a long chat adds per layer.
  for (int kv : {64, 512, 4096}) {
    const int64_t bs = 16, nblocks = kv / bs, Hq = 16, Hkv = 8, Dh = 128;
    auto kc = dev.allocate(static_cast<size_t>(nblocks * bs * Hkv * Dh) * 2, backend::BufferUsage::activations);
    auto vc = dev.allocate(static_cast<size_t>(nblocks * bs * Hkv * Dh) * 2, backend::BufferUsage::activations);
    std::vector<uint16_t> halves(static_cast<size_t>(nblocks * bs * Hkv * Dh));
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(0x3000 + (i * 37) % 0x800);
    kc->upload(0, halves.data(), halves.size() * 2);
    vc->upload(0, halves.data(), halves.size() * 2);
    std::vector<int32_t> table(static_cast<size_t>(nblocks)), seq = {0, 1, kv, 0};
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    auto tb = buf(static_cast<int64_t>(table.size()) * 4, table.data()), sb = buf(16, seq.data());
    auto q = buf(Hq * Dh * 4, noise.data()), out = buf(Hq * Dh * 4, nullptr);
    backend::BoundGraph g;
    for (int i = 0; i < chain / 8; ++i) {
      backend::Node node;
      node.op = KILN_OP_ATTENTION;
      node.n_src = 5;
      node.src[0] = {q.get(), 0, backend::TensorDesc(DType::f32, {1, Hq, Dh})};
      node.src[1] = {kc.get(), 0, backend::TensorDesc(DType::f16, {nblocks, bs, Hkv, Dh})};
      node.src[2] = {vc.get(), 0, backend::TensorDesc(DType::f16, {nblocks, bs, Hkv, Dh})};
      node.src[3] = {tb.get(), 0, backend::TensorDesc(DType::i32, {1, nblocks})};
      node.src[4] = {sb.get(), 0, backend::TensorDesc(DType::i32, {1, 4})};
      node.dst = {out.get(), 0, backend::TensorDesc(DType::f32, {1, Hq, Dh})};
      g.nodes.push_back(node);
    }
    print_small_op("ATTENTION f16 decode", "kv " + std::to_string(kv), time_per_node(dev, g, reps));
  }
  // The gated delta rule of a Qwen3.5-sized linear-attention layer (16 key / 32 value heads of
  // 128, one state slot): one decode token, and 256- and 1024-token prefills in both forms (µs per call).
  for (auto [N, mode] : std::vector<std::pair<int64_t, int>>{{1, KILN_DELTA_AUTO},
                                                             {256, KILN_DELTA_RECURRENT},
                                                             {256, KILN_DELTA_CHUNKED},
                                                             {1024, KILN_DELTA_RECURRENT},
                                                             {1024, KILN_DELTA_CHUNKED}}) {
    const int64_t Hk = 16, Hv = 32, Dh = 128;
    std::vector<float> in(static_cast<size_t>(N * Hv * Dh));
    for (size_t i = 0; i < in.size(); ++i) in[i] = 0.05f * static_cast<float>(i % 41) - 1.0f;
    std::vector<float> gate(static_cast<size_t>(N * Hv), -0.1f), beta(static_cast<size_t>(N * Hv), 0.5f);
    std::vector<int32_t> seq = {0, static_cast<int32_t>(N), static_cast<int32_t>(N), 0};
    auto qk = buf(N * Hk * Dh * 4, in.data()), v = buf(N * Hv * Dh * 4, in.data());
    auto gb = buf(N * Hv * 4, gate.data()), bb = buf(N * Hv * 4, beta.data()), sb = buf(16, seq.data());
    auto st = buf(Hv * Dh * Dh * 4, nullptr), out = buf(N * Hv * Dh * 4, nullptr);
    backend::BoundGraph g;
    for (int i = 0; i < (N == 1 ? chain / 8 : 4); ++i) {
      backend::Node node;
      node.op = KILN_OP_GATED_DELTA;
      node.params.mode = mode;
      node.n_src = 7;
      node.src[0] = node.src[1] = {qk.get(), 0, backend::TensorDesc(DType::f32, {N, Hk, Dh})};
      node.src[2] = {v.get(), 0, backend::TensorDesc(DType::f32, {N, Hv, Dh})};
      node.src[3] = {gb.get(), 0, backend::TensorDesc(DType::f32, {N, Hv})};
      node.src[4] = {bb.get(), 0, backend::TensorDesc(DType::f32, {N, Hv})};
      node.src[5] = {st.get(), 0, backend::TensorDesc(DType::f32, {1, Hv, Dh, Dh})};
      node.src[6] = {sb.get(), 0, backend::TensorDesc(DType::i32, {1, 4})};
      node.dst = {out.get(), 0, backend::TensorDesc(DType::f32, {N, Hv, Dh})};
      g.nodes.push_back(node);
    }
    // CHUNKED runs the recurrent kernel where the device's policy says so (lavapipe;
    // KILN_VULKAN_DELTA=chunked forces the chunked kernels) or the shapes do not fit: the label
    // says what ran (the chunked form records two dispatches or more per node).
    const Result r = time_per_node(dev, g, reps);
    auto* vd = dynamic_cast<vk::VulkanDevice*>(&dev);
    const bool chunked = !vd || vd->last_dispatches() >= 2 * g.nodes.size();
    print_small_op(mode == KILN_DELTA_AUTO        ? "GATED_DELTA (Qwen3.5 layer)"
                   : mode == KILN_DELTA_RECURRENT ? "GATED_DELTA recurrent"
                   : chunked                      ? "GATED_DELTA chunked"
                                                  : "GATED_DELTA chunked->rec.",
                   "tokens " + std::to_string(N), r);
  }
  // The causal conv1d in front of it (8192 channels: q, k and v of those heads; kernel 4).
  for (int64_t N : {1, 256}) {
    const int64_t C = 8192, Kw = 4;
    std::vector<float> in(static_cast<size_t>(N * C)), w(static_cast<size_t>(C * Kw), 0.25f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = 0.05f * static_cast<float>(i % 41) - 1.0f;
    std::vector<int32_t> seq = {0, static_cast<int32_t>(N), static_cast<int32_t>(N), 0};
    auto xb = buf(N * C * 4, in.data()), wb = buf(C * Kw * 4, w.data()), sb = buf(16, seq.data());
    auto st = buf((Kw - 1) * C * 4, nullptr), out = buf(N * C * 4, nullptr);
    backend::BoundGraph g;
    for (int i = 0; i < (N == 1 ? chain / 8 : 4); ++i) {
      backend::Node node;
      node.op = KILN_OP_CONV1D_CAUSAL;
      node.n_src = 4;
      node.src[0] = {xb.get(), 0, backend::TensorDesc(DType::f32, {N, C})};
      node.src[1] = {wb.get(), 0, backend::TensorDesc(DType::f32, {C, Kw})};
      node.src[2] = {st.get(), 0, backend::TensorDesc(DType::f32, {1, Kw - 1, C})};
      node.src[3] = {sb.get(), 0, backend::TensorDesc(DType::i32, {1, 4})};
      node.dst = {out.get(), 0, backend::TensorDesc(DType::f32, {N, C})};
      g.nodes.push_back(node);
    }
    print_small_op("CONV1D_CAUSAL (Qwen3.5 layer)", "tokens " + std::to_string(N), time_per_node(dev, g, reps));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, gemm = true, gemv = true, small = true;
  std::string only;  // --dtype NAME: one weight dtype
  int reps = 20;
  std::string device = "vulkan";         // --device: a registry spec (vulkan, cpu, reference)
  int64_t M = 4096, K = 4096, rows = 1;  // --rows: activation rows of the GEMV (concurrent decodes)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--no-gemm")
      gemm = false;
    else if (a == "--no-gemv")
      gemv = false;
    else if (a == "--no-small")
      small = false;
    else if (a == "--dtype" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--shape" && i + 1 < argc && std::sscanf(argv[++i], "%ldx%ld", &M, &K) == 2 && M > 0 && K > 0) {
    } else if (a == "--rows" && i + 1 < argc && (rows = std::atol(argv[++i])) >= 1 && rows <= 64) {
    } else if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_ops [--quick] [--no-gemm] [--no-gemv] [--no-small] [--dtype "
                   "f32|f16|...|q4_K|q6_K|iq4_xs] [--reps N] "
                   "[--shape MxK] [--rows R] [--device vulkan|vulkan:N|cpu|reference]\n");
      return 2;
    }
  }
  if (!only.empty() &&
      std::none_of(std::begin(kTypes), std::end(kTypes), [&](DType t) { return only == dtype_name(t); })) {
    std::fprintf(stderr, "bench_ops: --dtype %s is not one of the timed types:", only.c_str());
    for (DType t : kTypes) std::fprintf(stderr, " %s", dtype_name(t));
    std::fprintf(stderr, "\n");
    return 2;
  }
  backend::Device* dev = backend::Registry::instance().find(device);
  if (!dev) {
    std::fprintf(stderr, "bench_ops: no '%s' device (for Vulkan: install mesa-vulkan-drivers or a GPU driver)\n",
                 device.c_str());
    return 1;
  }
  std::printf("device: %s (%s, %s)\n", dev->info().name.c_str(), backend::device_kind_name(dev->info().kind),
              dev->info().driver.c_str());
  const bool gpu = bench::is_gpu(*dev);
  if (gpu && gemv) {
    // A GPU's GEMV limit is its memory bandwidth, measured here as a device copy (read + write
    // bytes of a 1 GiB buffer copy); target 80 %. GEMM has no GPU FMA reference here: GFLOP/s only.
    double copy = bench::device_copy_gbs(*dev, quick ? 256 : 1024, quick ? 3 : 10);
    std::printf("device copy bandwidth %.0f GB/s (read + write of a %d MiB vkCmdCopyBuffer)\n\n", copy,
                quick ? 256 : 1024);
    std::printf("%-26s %-6s %15s %10s %10s %10s %9s %8s\n", "op", "dtype", "best/median us", "GB/s", "GFLOP/s", "limit",
                "of limit", "target");
    const std::string shape = std::to_string(M) + "x" + std::to_string(K);
    for (DType t : kTypes) {
      if ((!only.empty() && only != dtype_name(t)) || K % quant_block(t)) continue;
      Result r = run_matmul_batch(*dev, t, rows, M, K, 32, quick ? 5 : reps);
      double bytes = static_cast<double>(M) * static_cast<double>(row_bytes(t, K)) + rows * (K + M) * 4.0;
      double gbs = bytes / (r.best_ms / 1e3) / 1e9, gf = 2.0 * rows * M * K / (r.best_ms / 1e3) / 1e9;
      std::printf("%-26s %-6s %7.1f/%-7.1f %10.1f %10.1f %6.0f GB/s %8.1f%% %8s\n",
                  ("GEMV " + std::to_string(rows) + "x" + shape).c_str(), dtype_name(t), r.best_ms * 1e3, r.ms * 1e3,
                  gbs, gf, copy, 100 * gbs / copy, gbs / copy >= 0.8 ? "ok>=80%" : "<80%");
      std::fflush(stdout);
    }
    gemv = false;
  }
  // The limits are re-measured before each row and the best so far is kept (the same "quiet
  // machine" estimate as the best kernel run); the header shows the first measurement.
  const int triad_mib = quick ? 64 : 256;
  double triad = bench::triad_gbs(triad_mib, quick ? 3 : 5);
  double fma = bench::fma_peak_gflops(quick ? 2 : 5);
  std::printf("machine: STREAM triad %.1f GB/s, FMA peak %.1f GFLOP/s (all threads; re-measured per row below)\n\n",
              triad, fma);

  const std::vector<DType> types(std::begin(kTypes), std::end(kTypes));
  const std::string shape = std::to_string(M) + "x" + std::to_string(K);
  std::printf("%-26s %-6s %15s %10s %10s %10s %9s %8s\n", "op", "dtype", "best/median ms", "GB/s", "GFLOP/s", "limit",
              "of limit", "target");
  for (DType t : types) {
    if (!gemv || (!only.empty() && only != dtype_name(t)) || K % quant_block(t)) continue;
    triad = std::max(triad, bench::triad_gbs(triad_mib, 3));
    Result r = run_matmul(*dev, t, rows, M, K, 4, quick ? 5 : reps);
    double bytes = static_cast<double>(M) * static_cast<double>(row_bytes(t, K)) + rows * (K + M) * 4.0;
    double gbs = bytes / (r.best_ms / 1e3) / 1e9, gf = 2.0 * rows * M * K / (r.best_ms / 1e3) / 1e9;
    double ratio = gbs / triad;
    std::printf("%-26s %-6s %7.2f/%-7.2f %10.2f %10.2f %6.1f GB/s %8.1f%% %8s\n",
                ("GEMV " + std::to_string(rows) + "x" + shape).c_str(), dtype_name(t), r.best_ms, r.ms, gbs, gf, triad,
                100 * ratio, ratio >= 0.45 ? "ok>=45%" : "<45%");
    std::fflush(stdout);
    // f16 again with trained-checkpoint-like subnormal weights (f16sub), and uploaded raw
    // (f16raw: no upload_weights preparation, so the kernel checks every half).
    for (int v = 0; t == DType::f16 && v < 2; ++v) {
      Result rs = run_matmul(*dev, t, rows, M, K, 4, quick ? 5 : reps, v == 0, v == 0);
      double g2 = bytes / (rs.best_ms / 1e3) / 1e9;
      std::printf("%-26s %-6s %7.2f/%-7.2f %10.2f %10.2f %6.1f GB/s %8.1f%% %8s\n",
                  ("GEMV " + std::to_string(rows) + "x" + shape).c_str(), v == 0 ? "f16sub" : "f16raw", rs.best_ms,
                  rs.ms, g2, 2.0 * rows * M * K / (rs.best_ms / 1e3) / 1e9, triad, 100 * g2 / triad,
                  g2 / triad >= 0.45 ? "ok>=45%" : "<45%");
      std::fflush(stdout);
    }
  }
  if (gemm) {
    const int64_t R = quick ? 128 : 512;
    for (DType t : types) {
      if ((!only.empty() && only != dtype_name(t)) || K % quant_block(t)) continue;
      fma = std::max(fma, bench::fma_peak_gflops(2));
      Result r = run_matmul(*dev, t, R, M, K, 1, quick ? 1 : 3);
      double gf = 2.0 * static_cast<double>(R) * M * K / (r.best_ms / 1e3) / 1e9;
      double ratio = gf / fma;
      std::string name = "GEMM " + std::to_string(R) + "x" + shape;
      if (gpu)  // no GPU FMA reference: the CPU's peak would be no limit for it
        std::printf("%-26s %-6s %7.2f/%-7.2f %10s %10.1f %s\n", name.c_str(), dtype_name(t), r.best_ms, r.ms, "-", gf,
                    "(GPU: no FMA reference measured)");
      else
        std::printf("%-26s %-6s %7.0f/%-7.0f %10s %10.2f %5.0f GFLOP %8.1f%% %8s\n", name.c_str(), dtype_name(t),
                    r.best_ms, r.ms, "-", gf, fma, 100 * ratio, ratio >= 0.08 ? "ok>=8%" : "<8%");
      std::fflush(stdout);
    }
  }
  if (small) {
    Result r = run_dispatch_chain(*dev, 256, quick ? 2 : 5);
    std::printf("\n%-26s %-6s %7.1f/%-7.1f us per dispatch (256 dependent ADDs of 1024 floats in one graph)\n",
                "dispatch chain", "f32", r.best_ms, r.ms);
    run_small_ops(*dev, 128, quick ? 2 : 5);
  }
  if (auto* vd = dynamic_cast<vk::VulkanDevice*>(dev); vd && !vd->profile_table().empty())
    std::printf("\n%s", vd->profile_table().c_str());
  return 0;
}
