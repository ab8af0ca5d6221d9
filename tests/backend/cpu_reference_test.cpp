// Independent checks of the CPU reference backend: each op against hand-computed values or naive
// double-precision loops written here, so the oracle of the op harness is itself checked.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/reference/common.hpp"
#include "op_harness.hpp"

namespace kiln::test {
namespace {

Device& cpu() {
  return backend::Registry::instance().reference();
}

kiln_op_params params(std::function<void(kiln_op_params&)> f) {
  kiln_op_params p{};
  f(p);
  return p;
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// ------------------------------------------------------------------------------------------------
// Conversions

TEST(CpuReference, HalfConversionRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = backend::reference::f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(backend::reference::f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(backend::reference::f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie to even
  EXPECT_EQ(backend::reference::f32_to_f16(1e6f), 0x7c00);                // overflow to inf
  EXPECT_EQ(backend::reference::f32_to_bf16(1.0f), 0x3f80);
}

// ------------------------------------------------------------------------------------------------
// Matmul: quantized weights equal dequantize-then-f32; all dtypes against a double-precision loop.

TEST(CpuReference, QuantizedMatmulEqualsDequantizedF32Matmul) {
  for (DType t : {DType::q8_0, DType::q4_0, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    OpGraph g(7);
    const int64_t N = 5, K = 96, M = 37;
    const uint32_t x = g.f32({N, K});
    const uint32_t w = g.weight(t, {M, K});
    const std::vector<float> wf = g.data_f32(w);  // independent dequantization
    g.output(g.op(KILN_OP_MATMUL, {x, w}));
    g.output(g.op(KILN_OP_MATMUL, {x, g.f32_values({M, K}, wf)}));
    const auto out = g.run(cpu());
    EXPECT_TRUE(bitwise_equal(out[0].f, out[1].f));
    const std::vector<float> xf = g.data_f32(x);
    std::vector<double> ref(static_cast<size_t>(N * M));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k)
          ref[static_cast<size_t>(n * M + m)] +=
              static_cast<double>(xf[static_cast<size_t>(n * K + k)]) * wf[static_cast<size_t>(m * K + k)];
    EXPECT_LT(nmse(out[0].f, to_float(ref)), 1e-12);
  }
}

TEST(CpuReference, QuantizationErrorIsWhatTheFormatAllows) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(1024);
  for (float& v : x) v = u(rng);
  EXPECT_LT(nmse(dequantize(DType::q8_0, quantize(DType::q8_0, x), 1024), x), 1e-4);
  EXPECT_LT(nmse(dequantize(DType::q4_0, quantize(DType::q4_0, x), 1024), x), 2e-2);
}

TEST(CpuReference, MoeMatmulEqualsPerSlotMatmul) {
  OpGraph g(9);
  const int64_t N = 4, k = 2, E = 3, M = 10, K = 64;
  const uint32_t x = g.f32({N, K});
  const uint32_t w = g.weight(DType::q8_0, {E, M, K});
  const std::vector<int32_t> ids = {2, 0, 1, 1, 0, 2, 2, 2};
  g.output(g.op(KILN_OP_MOE_MATMUL, {x, w, g.i32({N, k}, ids)}));
  const auto out = g.run(cpu());
  const auto xf = g.data_f32(x), wf = g.data_f32(w);
  std::vector<double> ref(static_cast<size_t>(N * k * M));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t kk = 0; kk < K; ++kk)
          ref[static_cast<size_t>((n * k + j) * M + m)] +=
              static_cast<double>(xf[static_cast<size_t>(n * K + kk)]) *
              wf[static_cast<size_t>((ids[static_cast<size_t>(n * k + j)] * M + m) * K + kk)];
  EXPECT_LT(nmse(out[0].f, to_float(ref)), 1e-12);
}

// ------------------------------------------------------------------------------------------------
// Elementwise and row ops against formulas.

TEST(CpuReference, ActivationsMatchTheirFormulas) {
  const std::vector<float> xs = {-30, -20.5f, -3, -0.5f, 0, 0.25f, 1, 2.5f, 19.9f, 20.1f, 45};
  struct F {
    kiln_op op;
    double (*f)(double);
  };
  for (F f : {F{KILN_OP_SILU, [](double v) { return v / (1 + std::exp(-v)); }},
              F{KILN_OP_SIGMOID, [](double v) { return 1 / (1 + std::exp(-v)); }},
              F{KILN_OP_GELU_TANH,
                [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }},
              F{KILN_OP_SOFTPLUS, [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }},
              F{KILN_OP_SOFTCAP, [](double v) { return 30 * std::tanh(v / 30); }},
              F{KILN_OP_EXP, [](double v) { return std::exp(v); }}}) {
    OpGraph g;
    g.output(g.op(f.op, {g.f32_values({11}, xs)}, params([](auto& p) { p.cap = 30; })));
    const auto out = g.run(cpu());
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_NEAR(out[0].f[i], f.f(xs[i]), 1e-5 * std::max(1.0, std::fabs(f.f(xs[i])))) << xs[i];
  }
  OpGraph g;
  g.output(g.op(KILN_OP_SCALE, {g.f32_values({2}, {1, -2})}, params([](auto& p) { p.scale = 3, p.bias = 0.5f; })));
  EXPECT_EQ(g.run(cpu())[0].f, (std::vector<float>{3.5f, -5.5f}));
}

TEST(CpuReference, BroadcastingAddAndMul) {
  OpGraph g;
  const uint32_t a = g.f32_values({2, 3}, {1, 2, 3, 4, 5, 6});
  g.output(g.op(KILN_OP_ADD, {a, g.f32_values({3}, {10, 20, 30})}));
  g.output(g.op(KILN_OP_MUL, {a, g.f32_values({2, 1}, {2, -1})}));
  const auto out = g.run(cpu());
  EXPECT_EQ(out[0].f, (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(out[1].f, (std::vector<float>{2, 4, 6, -4, -5, -6}));
}

TEST(CpuReference, NormsMatchNaiveLoops) {
  const int64_t R = 3, D = 37;
  OpGraph g(5);
  const uint32_t x = g.f32({R, D}, -3, 3), w = g.f32({D}), z = g.f32({R, D}, -3, 3);
  const float eps = 1e-6f;
  for (int mode : {KILN_NORM_WEIGHT, KILN_NORM_ONE_PLUS, KILN_NORM_NONE, KILN_NORM_GATED}) {
    const auto p = params([&](auto& q) { q.eps = eps, q.mode = mode; });
    if (mode == KILN_NORM_NONE)
      g.output(g.op(KILN_OP_RMS_NORM, {x}, p));
    else if (mode == KILN_NORM_GATED)
      g.output(g.op(KILN_OP_RMS_NORM, {x, w, z}, p));
    else
      g.output(g.op(KILN_OP_RMS_NORM, {x, w}, p));
  }
  g.output(g.op(KILN_OP_L2_NORM, {x}, params([&](auto& q) { q.eps = eps; })));
  g.output(g.op(KILN_OP_SOFTMAX, {x}, params([](auto& q) { q.scale = 2; })));
  const auto out = g.run(cpu());
  const auto xf = g.data_f32(x), wf = g.data_f32(w), zf = g.data_f32(z);
  std::vector<std::vector<double>> ref(6, std::vector<double>(static_cast<size_t>(R * D)));
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0, mx = -1e300, se = 0;
    for (int64_t i = 0; i < D; ++i)
      ss += static_cast<double>(xf[static_cast<size_t>(r * D + i)]) * xf[static_cast<size_t>(r * D + i)];
    for (int64_t i = 0; i < D; ++i) mx = std::max(mx, 2.0 * xf[static_cast<size_t>(r * D + i)]);
    for (int64_t i = 0; i < D; ++i) se += std::exp(2.0 * xf[static_cast<size_t>(r * D + i)] - mx);
    const double inv = 1 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) {
      const auto k = static_cast<size_t>(r * D + i);
      const double xn = xf[k] * inv, zz = zf[k];
      ref[0][k] = xn * wf[static_cast<size_t>(i)];
      ref[1][k] = xn * (1 + wf[static_cast<size_t>(i)]);
      ref[2][k] = xn;
      ref[3][k] = xn * wf[static_cast<size_t>(i)] * zz / (1 + std::exp(-zz));
      ref[4][k] = xf[k] / std::sqrt(ss + eps);
      ref[5][k] = std::exp(2.0 * xf[k] - mx) / se;
    }
  }
  for (size_t i = 0; i < 6; ++i) EXPECT_LT(nmse(out[i].f, to_float(ref[i])), 1e-12) << "output " << i;
}

// ------------------------------------------------------------------------------------------------
// RoPE: which dims rotate and by what angle, for full, partial (Qwen3.5) and proportional (Gemma 4).

void check_rope(int mode, int64_t D, int n_dims, int n_freq, float theta) {
  SCOPED_TRACE(fmt::format("mode {} D {} n_dims {} n_freq {}", mode, D, n_dims, n_freq));
  OpGraph g(11);
  const std::vector<int32_t> pos = {0, 3, 1000, 262143};
  const uint32_t x = g.f32({4, 2, D});
  g.output(g.op(KILN_OP_ROPE, {x, g.i32({4}, pos)},
                params([&](auto& p) { p.mode = mode, p.n_dims = n_dims, p.n_freq = n_freq, p.theta = theta; })));
  const auto out = g.run(cpu())[0].f;
  const auto xf = g.data_f32(x);
  const int64_t span = n_dims ? n_dims : D, half = span / 2, nf = n_freq ? n_freq : half;
  std::vector<double> ref(xf.begin(), xf.end());
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < nf; ++i) {
        const double inv =
            1.0 / std::pow(static_cast<double>(theta), 2.0 * static_cast<double>(i) / static_cast<double>(span));
        // fp32 angle, as documented (HF computes pos · inv_freq in fp32).
        const double ang =
            static_cast<float>(static_cast<float>(pos[static_cast<size_t>(t)]) * static_cast<float>(inv));
        const int64_t a = mode == KILN_ROPE_NEOX ? i : 2 * i, b = mode == KILN_ROPE_NEOX ? i + half : 2 * i + 1;
        const size_t base = static_cast<size_t>((t * 2 + h) * D);
        ref[base + static_cast<size_t>(a)] =
            xf[base + static_cast<size_t>(a)] * std::cos(ang) - xf[base + static_cast<size_t>(b)] * std::sin(ang);
        ref[base + static_cast<size_t>(b)] =
            xf[base + static_cast<size_t>(b)] * std::cos(ang) + xf[base + static_cast<size_t>(a)] * std::sin(ang);
      }
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(out[i], ref[i], 2e-6) << i;
  // Untouched dims are copied exactly.
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t pair = mode == KILN_ROPE_NEOX ? (d < half ? d : d - half) : d / 2;
      if (d >= span || pair >= nf || pos[static_cast<size_t>(t)] == 0) {
        EXPECT_EQ(out[static_cast<size_t>(t * 2 * D + d)], xf[static_cast<size_t>(t * 2 * D + d)]) << d;
      }
    }
}

TEST(CpuReference, RopeFullPartialProportional) {
  check_rope(KILN_ROPE_NEOX, 8, 0, 0, 10000);   // full
  check_rope(KILN_ROPE_NEOX, 16, 4, 0, 1e7f);   // Qwen3.5 partial: first quarter
  check_rope(KILN_ROPE_NEOX, 16, 16, 2, 1e6f);  // Gemma 4 proportional: dims 0,1 and 8,9 rotate
  check_rope(KILN_ROPE_NORMAL, 12, 8, 0, 100);  // adjacent pairs
}

// ------------------------------------------------------------------------------------------------
// Attention against a dense masked reference.

TEST(CpuReference, PagedAttentionMatchesDenseReference) {
  struct A {
    std::vector<std::pair<int, int>> lens;
    int64_t hq, hkv, d, bs;
    int window;
    float cap, scale;
    DType t;
  };
  for (const A& a :
       {A{{{1, 23}, {6, 6}, {4, 17}}, 4, 2, 16, 4, 0, 0, 0, DType::f32},
        A{{{1, 23}, {7, 19}}, 6, 2, 8, 8, 5, 0, 0.5f, DType::f16}, A{{{3, 9}}, 2, 1, 32, 2, 0, 2.0f, 0, DType::bf16}}) {
    OpGraph g(21);
    int64_t mb = 0, nb = 0, n = 0;
    for (auto [q, kv] : a.lens)
      mb = std::max<int64_t>(mb, (kv + a.bs - 1) / a.bs), nb += (kv + a.bs - 1) / a.bs, n += q;
    std::vector<int32_t> table(a.lens.size() * static_cast<size_t>(mb), -1), seqs;
    std::vector<int32_t> perm(static_cast<size_t>(nb));
    std::iota(perm.rbegin(), perm.rend(), 0);  // blocks in reverse order: a non-trivial table
    size_t next = 0;
    int start = 0;
    for (size_t s = 0; s < a.lens.size(); ++s) {
      for (int64_t b = 0; b < (a.lens[s].second + a.bs - 1) / a.bs; ++b)
        table[s * static_cast<size_t>(mb) + static_cast<size_t>(b)] = perm[next++];
      seqs.insert(seqs.end(), {start, a.lens[s].first, a.lens[s].second, 0});
      start += a.lens[s].first;
    }
    const uint32_t kc = g.cache(a.t, {nb, a.bs, a.hkv, a.d}, false, "k"),
                   vc = g.cache(a.t, {nb, a.bs, a.hkv, a.d}, false, "v");
    const uint32_t q = g.f32({n, a.hq, a.d});
    g.output(g.op(KILN_OP_ATTENTION,
                  {q, kc, vc, g.i32({static_cast<int64_t>(a.lens.size()), mb}, table),
                   g.i32({static_cast<int64_t>(a.lens.size()), 4}, seqs)},
                  params([&](auto& p) { p.window = a.window, p.cap = a.cap, p.scale = a.scale; })));
    const auto out = g.run(cpu())[0].f;
    const auto qf = g.data_f32(q), kf = g.data_f32(kc), vf = g.data_f32(vc);
    const double scale = a.scale ? a.scale : 1 / std::sqrt(static_cast<double>(a.d));
    std::vector<double> ref(out.size());
    start = 0;
    for (size_t s = 0; s < a.lens.size(); ++s) {
      const auto [ql, kv] = a.lens[s];
      // Dense K/V of this sequence, gathered through the table.
      auto at = [&](const std::vector<float>& c, int64_t j, int64_t h, int64_t d) {
        const int64_t blk = table[s * static_cast<size_t>(mb) + static_cast<size_t>(j / a.bs)];
        return static_cast<double>(c[static_cast<size_t>(((blk * a.bs + j % a.bs) * a.hkv + h) * a.d + d)]);
      };
      for (int i = 0; i < ql; ++i)
        for (int64_t h = 0; h < a.hq; ++h) {
          const int64_t p = kv - ql + i, hk = h / (a.hq / a.hkv), row = start + i;
          std::vector<double> l(static_cast<size_t>(p + 1), -INFINITY);
          double mx = -INFINITY;
          for (int64_t j = 0; j <= p; ++j) {
            if (a.window && p - j >= a.window) continue;
            double dotv = 0;
            for (int64_t d = 0; d < a.d; ++d)
              dotv += qf[static_cast<size_t>((row * a.hq + h) * a.d + d)] * at(kf, j, hk, d);
            double v = dotv * scale;
            if (a.cap) v = a.cap * std::tanh(v / a.cap);
            l[static_cast<size_t>(j)] = v;
            mx = std::max(mx, v);
          }
          double sum = 0;
          for (double& v : l) sum += (v = std::exp(v - mx));
          for (int64_t d = 0; d < a.d; ++d) {
            double acc = 0;
            for (int64_t j = 0; j <= p; ++j) acc += l[static_cast<size_t>(j)] * at(vf, j, hk, d);
            ref[static_cast<size_t>((row * a.hq + h) * a.d + d)] = acc / sum;
          }
        }
      start += ql;
    }
    EXPECT_LT(nmse(out, to_float(ref)), 1e-11);
  }
}

// ------------------------------------------------------------------------------------------------
// Causal conv1d: one shot vs split with carried state, both vs a naive loop.

TEST(CpuReference, Conv1dCarriesStateAcrossCalls) {
  const int64_t C = 5, K = 4, T = 11;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<size_t>(T * C)), w(static_cast<size_t>(C * K)), st(static_cast<size_t>((K - 1) * C));
  for (auto* v : {&x, &w, &st})
    for (float& f : *v) f = u(rng);
  // The tokens sit at positions 9.. (a state restored at position 9): the state is read.
  auto run = [&](int64_t t0, int64_t len, std::vector<float>& state) {
    OpGraph g;
    const uint32_t s = g.cache_values(DType::f32, {1, K - 1, C}, state, "state");
    std::vector<float> xs(x.begin() + t0 * C, x.begin() + (t0 + len) * C);
    g.output(g.op(KILN_OP_CONV1D_CAUSAL,
                  {g.f32_values({len, C}, xs), g.f32_values({C, K}, w), s,
                   g.i32({1, 4}, {0, static_cast<int32_t>(len), static_cast<int32_t>(9 + t0 + len), 0})}));
    auto out = g.run(cpu());
    state = out[1].f;
    return out[0].f;
  };
  std::vector<float> s1 = st, s2 = st;
  const auto whole = run(0, T, s1);
  std::vector<float> pieces;
  for (auto [t0, len] : std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 1}, {3, 1}, {4, 7}}) {
    auto y = run(t0, len, s2);
    pieces.insert(pieces.end(), y.begin(), y.end());
  }
  EXPECT_TRUE(bitwise_equal(whole, pieces));
  EXPECT_TRUE(bitwise_equal(s1, s2));
  std::vector<double> ref(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;  // index into [state; x]
        const double in =
            src < 0 ? st[static_cast<size_t>((src + K - 1) * C + c)] : x[static_cast<size_t>(src * C + c)];
        ref[static_cast<size_t>(t * C + c)] += w[static_cast<size_t>(c * K + j)] * in;
      }
  EXPECT_LT(nmse(whole, to_float(ref)), 1e-13);
  EXPECT_TRUE(bitwise_equal(s1, std::vector<float>(x.end() - (K - 1) * C, x.end())));
}

// ------------------------------------------------------------------------------------------------
// Gated delta rule: recurrent vs a double-precision loop; chunked vs recurrent across chunk
// boundaries; state carried across calls.

struct DeltaInputs {
  int64_t T, Hk = 2, Hv = 4, Dk = 8, Dv = 6;
  std::vector<float> q, k, v, g, beta, state;
};

DeltaInputs delta_inputs(int64_t T, uint32_t seed) {
  DeltaInputs in;
  in.T = T;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1), gd(-0.7f, 0.0f), bd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n, auto& dist) {
    v.resize(n);
    for (float& f : v) f = dist(rng);
  };
  fill(in.q, static_cast<size_t>(T * in.Hk * in.Dk), u);
  fill(in.k, static_cast<size_t>(T * in.Hk * in.Dk), u);
  for (int64_t r = 0; r < T * in.Hk; ++r) {  // unit-norm keys, scaled queries (as the model feeds them)
    double ss = 0, sq = 0;
    for (int64_t d = 0; d < in.Dk; ++d)
      ss += in.k[static_cast<size_t>(r * in.Dk + d)] * in.k[static_cast<size_t>(r * in.Dk + d)],
          sq += in.q[static_cast<size_t>(r * in.Dk + d)] * in.q[static_cast<size_t>(r * in.Dk + d)];
    for (int64_t d = 0; d < in.Dk; ++d)
      in.k[static_cast<size_t>(r * in.Dk + d)] /= static_cast<float>(std::sqrt(ss)),
          in.q[static_cast<size_t>(r * in.Dk + d)] /= static_cast<float>(std::sqrt(sq) * std::sqrt(in.Dk));
  }
  fill(in.v, static_cast<size_t>(T * in.Hv * in.Dv), u);
  fill(in.g, static_cast<size_t>(T * in.Hv), gd);
  fill(in.beta, static_cast<size_t>(T * in.Hv), bd);
  fill(in.state, static_cast<size_t>(in.Hv * in.Dk * in.Dv), u);
  return in;
}

/**
 * Runs tokens [t0, t0+len) from `state` with `mode`; returns outputs and updates state. Token 0 of
 * the inputs sits at position `pos0` (0: the sequence's start, where the state is read as zeros).
 */
std::vector<float> run_delta(const DeltaInputs& in, int64_t t0, int64_t len, int mode, int chunk,
                             std::vector<float>& state, int64_t pos0 = 5) {
  OpGraph g;
  auto sl = [&](const std::vector<float>& v, int64_t per) {
    return std::vector<float>(v.begin() + t0 * per, v.begin() + (t0 + len) * per);
  };
  const uint32_t s = g.cache_values(DType::f32, {1, in.Hv, in.Dk, in.Dv}, state, "state");
  g.output(g.op(KILN_OP_GATED_DELTA,
                {g.f32_values({len, in.Hk, in.Dk}, sl(in.q, in.Hk * in.Dk)),
                 g.f32_values({len, in.Hk, in.Dk}, sl(in.k, in.Hk * in.Dk)),
                 g.f32_values({len, in.Hv, in.Dv}, sl(in.v, in.Hv * in.Dv)),
                 g.f32_values({len, in.Hv}, sl(in.g, in.Hv)), g.f32_values({len, in.Hv}, sl(in.beta, in.Hv)), s,
                 g.i32({1, 4}, {0, static_cast<int32_t>(len), static_cast<int32_t>(pos0 + t0 + len), 0})},
                params([&](auto& p) { p.mode = mode, p.chunk = chunk; })));
  auto out = g.run(cpu());
  state = out[1].f;
  return out[0].f;
}

TEST(CpuReference, GatedDeltaRecurrentMatchesDoubleLoop) {
  const DeltaInputs in = delta_inputs(13, 1);
  std::vector<float> st = in.state;
  const auto out = run_delta(in, 0, in.T, KILN_DELTA_RECURRENT, 0, st);
  std::vector<double> S(in.state.begin(), in.state.end()), o(static_cast<size_t>(in.T * in.Hv * in.Dv));
  const int64_t R = in.Hv / in.Hk;
  for (int64_t t = 0; t < in.T; ++t)
    for (int64_t h = 0; h < in.Hv; ++h) {
      double* Sh = S.data() + h * in.Dk * in.Dv;
      const float* k = in.k.data() + (t * in.Hk + h / R) * in.Dk;
      const float* q = in.q.data() + (t * in.Hk + h / R) * in.Dk;
      const float* v = in.v.data() + (t * in.Hv + h) * in.Dv;
      const double a = std::exp(static_cast<double>(in.g[static_cast<size_t>(t * in.Hv + h)])),
                   b = in.beta[static_cast<size_t>(t * in.Hv + h)];
      for (int64_t i = 0; i < in.Dk * in.Dv; ++i) Sh[i] *= a;
      for (int64_t dv = 0; dv < in.Dv; ++dv) {
        double u = 0;
        for (int64_t dk = 0; dk < in.Dk; ++dk) u += Sh[dk * in.Dv + dv] * k[dk];
        const double delta = b * (v[dv] - u);
        for (int64_t dk = 0; dk < in.Dk; ++dk) Sh[dk * in.Dv + dv] += k[dk] * delta;
        double acc = 0;
        for (int64_t dk = 0; dk < in.Dk; ++dk) acc += Sh[dk * in.Dv + dv] * q[dk];
        o[static_cast<size_t>((t * in.Hv + h) * in.Dv + dv)] = acc;
      }
    }
  EXPECT_LT(nmse(out, to_float(o)), 1e-12);
  EXPECT_LT(nmse(st, to_float(S)), 1e-12);
}

TEST(CpuReference, GatedDeltaChunkedMatchesRecurrentAcrossChunkBoundaries) {
  const DeltaInputs in = delta_inputs(70, 2);
  for (int chunk : {4, 16, 64}) {
    SCOPED_TRACE(chunk);
    std::vector<float> s_rec = in.state, s_chk = in.state;
    const auto rec = run_delta(in, 0, in.T, KILN_DELTA_RECURRENT, 0, s_rec);
    const auto chk = run_delta(in, 0, in.T, KILN_DELTA_CHUNKED, chunk, s_chk);
    EXPECT_LT(nmse(chk, rec), 1e-10);
    EXPECT_LT(nmse(s_chk, s_rec), 1e-10);
  }
}

TEST(CpuReference, GatedDeltaStateCarriesAcrossCallsInBothForms) {
  // Prefill 37 (chunked) + 30 (chunked) + 3 decode steps vs one recurrent pass over 70 tokens.
  const DeltaInputs in = delta_inputs(70, 3);
  std::vector<float> s_ref = in.state, s = in.state;
  const auto ref = run_delta(in, 0, in.T, KILN_DELTA_RECURRENT, 0, s_ref);
  std::vector<float> got;
  for (auto [t0, len] : std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {37, 30}, {67, 1}, {68, 1}, {69, 1}}) {
    auto y = run_delta(in, t0, len, KILN_DELTA_AUTO, 16, s);
    got.insert(got.end(), y.begin(), y.end());
  }
  EXPECT_LT(nmse(got, ref), 1e-10);
  EXPECT_LT(nmse(s, s_ref), 1e-10);
}

TEST(CpuReference, RecurrentOpsReadZerosAtASequencesFirstStepWhateverTheSlotHolds) {
  // A state slot is reused without being cleared: kv_len == q_len means position 0, zero state.
  const DeltaInputs in = delta_inputs(40, 4);
  const std::vector<float> zeros(in.state.size(), 0.0f);
  for (int mode : {KILN_DELTA_RECURRENT, KILN_DELTA_CHUNKED}) {
    SCOPED_TRACE(mode);
    std::vector<float> dirty = in.state, clean = zeros, explicit_zero = zeros;
    const auto a = run_delta(in, 0, in.T, mode, 16, dirty, 0);
    const auto b = run_delta(in, 0, in.T, mode, 16, clean, 0);
    // The same zeros read as a carried state at an aligned position (same chunks): same bits.
    const auto c = run_delta(in, 0, in.T, mode, 16, explicit_zero, 64);
    EXPECT_TRUE(bitwise_equal(a, b));
    EXPECT_TRUE(bitwise_equal(dirty, clean));
    EXPECT_TRUE(bitwise_equal(a, c));
    EXPECT_FALSE(bitwise_equal(a, run_delta(in, 0, in.T, mode, 16, dirty = in.state, 64)));  // the state matters
  }
  const int64_t C = 6, K = 4, T = 5;
  std::vector<float> x(static_cast<size_t>(T * C)), w(static_cast<size_t>(C * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 5) + 0.1f;
  auto conv = [&](std::vector<float> state, int32_t kv_len) {
    OpGraph g;
    const uint32_t s = g.cache_values(DType::f32, {1, K - 1, C}, state, "state");
    g.output(g.op(KILN_OP_CONV1D_CAUSAL,
                  {g.f32_values({T, C}, x), g.f32_values({C, K}, w), s, g.i32({1, 4}, {0, T, kv_len, 0})}));
    return g.run(cpu())[0].f;
  };
  const std::vector<float> garbage(static_cast<size_t>((K - 1) * C), 7.0f), none(garbage.size(), 0.0f);
  EXPECT_TRUE(bitwise_equal(conv(garbage, T), conv(none, T)));
  EXPECT_TRUE(bitwise_equal(conv(garbage, T), conv(none, T + 3)));
  EXPECT_FALSE(bitwise_equal(conv(garbage, T + 3), conv(none, T + 3)));
}

TEST(CpuReference, GatedDeltaChunksAlignToAbsolutePositionsSoACutThereChangesNoBits) {
  // Chunks follow the absolute positions (multiples of 16 here), so a step boundary at such a
  // position (where a state snapshot can be taken and later resumed) gives the bits of the same
  // schedule without it, even after a step that started off the grid (40). Chunking from each
  // step's first token, [40, 100) would run as [40, 56) [56, 72) ... but [48, 100) as [48, 64) ...
  const DeltaInputs in = delta_inputs(100, 5);
  auto run = [&](int mode, const std::vector<int64_t>& steps, std::vector<float>& state) {
    std::vector<float> out;
    int64_t t0 = 0;
    for (int64_t len : steps) {
      const auto y = run_delta(in, t0, len, mode, 16, state, 0);
      out.insert(out.end(), y.begin(), y.end());
      t0 += len;
    }
    return out;
  };
  for (int mode : {KILN_DELTA_CHUNKED, KILN_DELTA_AUTO}) {
    SCOPED_TRACE(mode);
    std::vector<float> s1 = in.state, s2 = in.state, s3 = in.state, s4 = in.state;
    const auto plain = run(mode, {40, 60}, s1);
    const auto cut = run(mode, {40, 8, 52}, s2);  // a cut at 48
    EXPECT_TRUE(bitwise_equal(plain, cut));
    EXPECT_TRUE(bitwise_equal(s1, s2));
    const auto whole = run(mode, {100}, s3);
    const auto at48 = run(mode, {48, 52}, s4);
    EXPECT_TRUE(bitwise_equal(whole, at48));
    EXPECT_TRUE(bitwise_equal(s3, s4));
    EXPECT_LT(nmse(plain, whole), 1e-10);  // a cut off the grid (40) changes only the rounding
  }
}

TEST(CpuReference, GatedDeltaOneTokenChunkIsTheRecurrentStep) {
  // A prompt of 65 tokens in one chunked step ends with a one-token chunk [64, 65); resumed at 64
  // (a snapshot) the last token is a one-token step, which AUTO runs recurrently: the same bits,
  // because a one-token chunk is computed as a step of the recurrence.
  const DeltaInputs in = delta_inputs(65, 6);
  std::vector<float> s1 = in.state, s2 = in.state;
  const auto whole = run_delta(in, 0, 65, KILN_DELTA_AUTO, 16, s1, 0);
  auto split = run_delta(in, 0, 64, KILN_DELTA_AUTO, 16, s2, 0);
  const auto last = run_delta(in, 64, 1, KILN_DELTA_AUTO, 16, s2, 0);
  split.insert(split.end(), last.begin(), last.end());
  EXPECT_TRUE(bitwise_equal(whole, split));
  EXPECT_TRUE(bitwise_equal(s1, s2));
}

// ------------------------------------------------------------------------------------------------
// MoE routing and copies.

TEST(CpuReference, TopKOrdersDescendingWithTiesToTheLowerIndex) {
  OpGraph g;
  g.output(g.op(KILN_OP_TOP_K, {g.f32_values({2, 5}, {1, 3, 3, 0, 2, -1, -1, -1, -1, -1})},
                params([](auto& p) { p.k = 3; })));
  EXPECT_EQ(g.run(cpu())[0].i, (std::vector<int32_t>{1, 2, 4, 0, 1, 2}));
}

TEST(CpuReference, MoeWeightsSoftmaxOverAllRenormalizeAndScale) {
  const std::vector<float> logits = {0, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = 0.1 .. 0.4
  for (int mode : {0, 1})
    for (bool scaled : {false, true}) {
      OpGraph g;
      const uint32_t l = g.f32_values({1, 4}, logits), ids = g.i32({1, 2}, {3, 1});
      const auto p = params([&](auto& x) { x.mode = mode; });
      g.output(scaled ? g.op(KILN_OP_MOE_WEIGHTS, {l, ids, g.f32_values({4}, {1, 10, 1, 0.5f})}, p)
                      : g.op(KILN_OP_MOE_WEIGHTS, {l, ids}, p));
      const auto w = g.run(cpu())[0].f;
      double w0 = 0.4, w1 = 0.2;
      if (mode) w0 /= 0.6, w1 /= 0.6;
      if (scaled) w0 *= 0.5, w1 *= 10;
      EXPECT_NEAR(w[0], w0, 1e-6);
      EXPECT_NEAR(w[1], w1, 1e-6);
    }
}

TEST(CpuReference, MoeSumIsTheWeightedSumOverSlots) {
  OpGraph g;
  g.output(g.op(KILN_OP_MOE_SUM, {g.f32_values({1, 2, 3}, {1, 2, 3, 10, 20, 30}), g.f32_values({1, 2}, {0.5f, 2})}));
  EXPECT_EQ(g.run(cpu())[0].f, (std::vector<float>{20.5f, 41, 61.5f}));
}

TEST(CpuReference, GetRowsDequantizesAndSetRowsConvertsAndSkips) {
  OpGraph g(8);
  const uint32_t table = g.weight(DType::q4_0, {5, 64});
  g.output(g.op(KILN_OP_GET_ROWS, {table, g.i32({3}, {4, 0, 4})}));
  const uint32_t cache = g.cache(DType::f16, {4, 2}, false, "cache");
  const auto before = g.data_f32(cache);
  g.op(KILN_OP_SET_ROWS, {cache, g.f32_values({2, 2}, {0.1f, -2, 3, 4}), g.i32({2}, {2, -1})});
  const auto out = g.run(cpu());
  const auto tf = g.data_f32(table);
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(out[0].f[static_cast<size_t>(j)], tf[static_cast<size_t>(4 * 64 + j)]);
    EXPECT_EQ(out[0].f[static_cast<size_t>(64 + j)], tf[static_cast<size_t>(j)]);
  }
  const auto& c = out[1].f;
  EXPECT_EQ(c[4], backend::reference::f16_to_f32(backend::reference::f32_to_f16(0.1f)));
  EXPECT_EQ(c[5], -2.0f);
  for (size_t i : {0, 1, 2, 3, 6, 7}) EXPECT_EQ(c[i], before[i]) << i;
}

}  // namespace
}  // namespace kiln::test
