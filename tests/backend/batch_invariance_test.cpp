// Batch invariance (docs/backend.md §5): on every device, one row (MATMUL, MOE_MATMUL, RMS_NORM,
// SET_ROWS into the quantized KV formats) or one sequence (ATTENTION, GATED_DELTA) computed alone
// is bitwise identical to the same row or sequence computed inside a batch, at any position.
#include <gtest/gtest.h>

#include <functional>

#include "op_harness.hpp"

namespace kiln::test {
namespace {

kiln_op_params params(std::function<void(kiln_op_params&)> f) {
  kiln_op_params p{};
  f(p);
  return p;
}

std::vector<float> rows_of(const std::vector<float>& v, int64_t width, const std::vector<int64_t>& rows) {
  std::vector<float> out;
  for (int64_t r : rows) out.insert(out.end(), v.begin() + r * width, v.begin() + (r + 1) * width);
  return out;
}

/**
 * Runs `op_on(rows)` for the full batch, each probe row alone, and the probe row at another
 * position among other rows; the probe's output rows must be bitwise equal everywhere.
 */
void check_rows(Device& d, int64_t n_rows, int64_t out_width,
                const std::function<std::vector<float>(Device&, const std::vector<int64_t>&)>& run) {
  std::vector<int64_t> all(static_cast<size_t>(n_rows));
  for (int64_t i = 0; i < n_rows; ++i) all[static_cast<size_t>(i)] = i;
  const auto full = run(d, all);
  for (int64_t probe : {int64_t{0}, n_rows / 2, n_rows - 1}) {
    SCOPED_TRACE(probe);
    const auto want = rows_of(full, out_width, {probe});
    EXPECT_TRUE(bitwise_equal(run(d, {probe}), want)) << "alone";
    const auto mixed = run(d, {(probe + 1) % n_rows, (probe + 2) % n_rows, probe, (probe + 3) % n_rows});
    EXPECT_TRUE(bitwise_equal(rows_of(mixed, out_width, {2}), want)) << "at position 2 of 4";
    // Batches of 2 and 3 rows (concurrent decodes get their own matmul tiles).
    const auto two = run(d, {(probe + 1) % n_rows, probe});
    EXPECT_TRUE(bitwise_equal(rows_of(two, out_width, {1}), want)) << "at position 1 of 2";
    const auto three = run(d, {probe, (probe + 2) % n_rows, (probe + 1) % n_rows});
    EXPECT_TRUE(bitwise_equal(rows_of(three, out_width, {0}), want)) << "at position 0 of 3";
  }
}

class BatchInvariance : public ::testing::TestWithParam<Device*> {};

TEST_P(BatchInvariance, Matmul) {
  const int64_t N = 11, K = 160, M = 37;
  const auto x = random(static_cast<size_t>(N * K), 1);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    check_rows(*GetParam(), N, M, [&](Device& d, const std::vector<int64_t>& rows) {
      OpGraph g(5);  // same seed: same weights in every run
      const uint32_t w = g.weight(t, {M, K});
      g.output(g.op(KILN_OP_MATMUL, {g.f32_values({static_cast<int64_t>(rows.size()), K}, rows_of(x, K, rows)), w}));
      return g.run(d)[0].f;
    });
  }
}

TEST_P(BatchInvariance, MoeMatmul) {
  const int64_t N = 9, K = 256, M = 72, E = 4, k = 2;  // big enough for parallel multi-row tiles
  const auto x = random(static_cast<size_t>(N * K), 2);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < N * k; ++i) ids.push_back(static_cast<int32_t>((i * 7 + i / k) % E));
  check_rows(*GetParam(), N, k * M, [&](Device& d, const std::vector<int64_t>& rows) {
    OpGraph g(6);
    const uint32_t w = g.weight(DType::q4_0, {E, M, K});
    std::vector<int32_t> sel;
    for (int64_t r : rows) sel.insert(sel.end(), ids.begin() + r * k, ids.begin() + (r + 1) * k);
    const auto n = static_cast<int64_t>(rows.size());
    g.output(g.op(KILN_OP_MOE_MATMUL, {g.f32_values({n, K}, rows_of(x, K, rows)), w, g.i32({n, k}, sel)}));
    return g.run(d)[0].f;
  });
}

TEST_P(BatchInvariance, Norms) {
  const int64_t N = 10, D = 259;
  const auto x = random(static_cast<size_t>(N * D), 3, -3, 3), w = random(static_cast<size_t>(D), 4);
  for (int mode : {KILN_NORM_WEIGHT, KILN_NORM_ONE_PLUS, KILN_NORM_NONE}) {
    check_rows(*GetParam(), N, D, [&](Device& d, const std::vector<int64_t>& rows) {
      OpGraph g;
      const uint32_t xs = g.f32_values({static_cast<int64_t>(rows.size()), D}, rows_of(x, D, rows));
      const auto p = params([&](auto& q) { q.eps = 1e-6f, q.mode = mode; });
      g.output(mode == KILN_NORM_NONE ? g.op(KILN_OP_RMS_NORM, {xs}, p)
                                      : g.op(KILN_OP_RMS_NORM, {xs, g.f32_values({D}, w)}, p));
      return g.run(d)[0].f;
    });
  }
  check_rows(*GetParam(), N, D, [&](Device& d, const std::vector<int64_t>& rows) {
    OpGraph g;
    g.output(g.op(KILN_OP_L2_NORM, {g.f32_values({static_cast<int64_t>(rows.size()), D}, rows_of(x, D, rows))},
                  params([](auto& q) { q.eps = 1e-6f; })));
    return g.run(d)[0].f;
  });
}

TEST_P(BatchInvariance, QuantizedCacheWrites) {
  // kv_q8 / kv_q4 rows (groups of 8, 32 and 32 values for head dims 8, 96, 128): a token's cache
  // row holds the same bits whichever batch wrote it. The cache (slots 0..n-1 for the n rows of
  // a batch, in order) is the output, read back as the values its bits stand for.
  const int64_t N = 7, Hkv = 2;
  for (DType t : {DType::kv_q8, DType::kv_q4})
    for (int64_t D : {8, 96, 128}) {
      SCOPED_TRACE(fmt::format("{} D {}", dtype_name(t), D));
      const auto x = random(static_cast<size_t>(N * Hkv * D), 9, -2, 2);
      check_rows(*GetParam(), N, Hkv * D, [&](Device& d, const std::vector<int64_t>& rows) {
        OpGraph g;
        const auto n = static_cast<int64_t>(rows.size());
        std::vector<int32_t> slots(rows.size());
        for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
        const uint32_t cache = g.cache(t, {n, Hkv, D}, true);
        g.op(KILN_OP_SET_ROWS, {cache, g.f32_values({n, Hkv, D}, rows_of(x, Hkv * D, rows)), g.i32({n}, slots)});
        return g.run(d)[0].f;
      });
    }
}

/** Sequences of one paged cache: (q_len, kv_len) and their first block in a shared pool. */
struct SeqSpec {
  int q_len, kv_len;
};

/** Each sequence of a ragged attention batch gives the bits it gives alone or second of two. */
void attention_batch_invariance(Device& d, DType kt, DType vt, int64_t Hq, int64_t Hkv, int64_t D, float scale);

TEST_P(BatchInvariance, Attention) {
  // f16 caches with head dims 32 and Gemma 4's full-layer 512 (one KV head for 8 query heads,
  // scale 1); the quantized KV formats with head dims 64 and 128 (GQA 4, K and V of different
  // formats).
  struct Shape {
    DType k, v;
    int64_t Hq, Hkv, D;
    float scale;
  };
  const DType f16 = DType::f16, q8 = DType::kv_q8, q4 = DType::kv_q4;
  for (const Shape& sh : {Shape{f16, f16, 4, 2, 32, 0.0f}, Shape{f16, f16, 8, 1, 512, 1.0f},
                          Shape{q8, q8, 4, 2, 64, 0.0f}, Shape{q4, q8, 8, 2, 128, 0.0f}}) {
    SCOPED_TRACE(fmt::format("{} / {} D {}", dtype_name(sh.k), dtype_name(sh.v), sh.D));
    attention_batch_invariance(*GetParam(), sh.k, sh.v, sh.Hq, sh.Hkv, sh.D, sh.scale);
  }
}

void attention_batch_invariance(Device& d, DType kt, DType vt, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  const int64_t BS = 8, NB = 24, MB = 8;
  const std::vector<SeqSpec> specs = {{1, 45}, {7, 20}, {12, 12}, {1, 3}};
  const auto kc = random(static_cast<size_t>(NB * BS * Hkv * D), 7),
             vc = random(static_cast<size_t>(NB * BS * Hkv * D), 8);
  // Fixed, disjoint blocks per sequence; queries generated per sequence so they travel with it.
  std::vector<std::vector<int32_t>> tables(specs.size(), std::vector<int32_t>(MB, -1));
  int32_t next = 0;
  for (size_t s = 0; s < specs.size(); ++s)
    for (int b = 0; b < (specs[s].kv_len + BS - 1) / BS; ++b) tables[s][static_cast<size_t>(b)] = (next++ * 5) % NB;
  std::vector<std::vector<float>> q;
  for (size_t s = 0; s < specs.size(); ++s)
    q.push_back(random(static_cast<size_t>(specs[s].q_len * Hq * D), 100 + static_cast<uint32_t>(s)));
  for (int window : {0, 6}) {
    SCOPED_TRACE(window);
    auto run = [&](Device& d, const std::vector<size_t>& order) {
      OpGraph g;
      std::vector<float> qs;
      std::vector<int32_t> table, seqs;
      int32_t start = 0;
      for (size_t s : order) {
        qs.insert(qs.end(), q[s].begin(), q[s].end());
        table.insert(table.end(), tables[s].begin(), tables[s].end());
        seqs.insert(seqs.end(), {start, specs[s].q_len, specs[s].kv_len, 0});
        start += specs[s].q_len;
      }
      const auto S = static_cast<int64_t>(order.size());
      g.output(g.op(KILN_OP_ATTENTION,
                    {g.f32_values({start, Hq, D}, qs), g.cache_values(kt, {NB, BS, Hkv, D}, kc, "k"),
                     g.cache_values(vt, {NB, BS, Hkv, D}, vc, "v"), g.i32({S, MB}, table), g.i32({S, 4}, seqs)},
                    params([&](auto& p) { p.window = window, p.scale = scale; })));
      return g.run(d)[0].f;
    };
    const auto full = run(d, {0, 1, 2, 3});
    const int64_t row = Hq * D;
    int64_t start = 0;
    for (size_t s = 0; s < specs.size(); ++s) {
      SCOPED_TRACE(s);
      const std::vector<float> want(full.begin() + start * row, full.begin() + (start + specs[s].q_len) * row);
      EXPECT_TRUE(bitwise_equal(run(d, {s}), want)) << "alone";
      const size_t other = (s + 1) % specs.size();
      const auto mixed = run(d, {other, s});
      EXPECT_TRUE(bitwise_equal(std::vector<float>(mixed.begin() + specs[other].q_len * row, mixed.end()), want))
          << "second of two";
      start += specs[s].q_len;
    }
  }
}

TEST_P(BatchInvariance, GatedDelta) {
  const int64_t Hk = 1, Hv = 2, Dk = 8, Dv = 8;
  const std::vector<int> lens = {1, 9, 20};
  std::vector<std::vector<float>> q, k, v, gate, beta;
  for (size_t s = 0; s < lens.size(); ++s) {
    const auto n = static_cast<size_t>(lens[s]);
    const auto seed = static_cast<uint32_t>(10 * s);
    q.push_back(random(n * Hk * Dk, seed + 1, -0.3f, 0.3f));
    k.push_back(random(n * Hk * Dk, seed + 2, -0.3f, 0.3f));
    v.push_back(random(n * Hv * Dv, seed + 3));
    gate.push_back(random(n * Hv, seed + 4, -1, 0));
    beta.push_back(random(n * Hv, seed + 5, 0, 1));
  }
  const auto state0 = random(static_cast<size_t>(lens.size() * Hv * Dk * Dv), 77);
  int mode = KILN_DELTA_AUTO;  // the device's choice (reference: chunked prefills, recurrent decode)
  auto run = [&](Device& d, const std::vector<size_t>& order) {
    OpGraph g;
    std::vector<float> qs, ks, vs, gs, bs;
    std::vector<int32_t> seqs;
    int32_t start = 0;
    for (size_t s : order) {
      for (auto [dst, src] : {std::pair{&qs, &q}, {&ks, &k}, {&vs, &v}, {&gs, &gate}, {&bs, &beta}})
        dst->insert(dst->end(), (*src)[s].begin(), (*src)[s].end());
      seqs.insert(seqs.end(), {start, lens[s], lens[s] + 5, static_cast<int32_t>(s)});  // slot = sequence id
      start += lens[s];
    }
    const uint32_t st = g.cache_values(DType::f32, {static_cast<int64_t>(lens.size()), Hv, Dk, Dv}, state0, "state");
    g.output(g.op(KILN_OP_GATED_DELTA,
                  {g.f32_values({start, Hk, Dk}, qs), g.f32_values({start, Hk, Dk}, ks),
                   g.f32_values({start, Hv, Dv}, vs), g.f32_values({start, Hv}, gs), g.f32_values({start, Hv}, bs), st,
                   g.i32({static_cast<int64_t>(order.size()), 4}, seqs)},
                  params([&](auto& p) { p.chunk = 8, p.mode = mode; })));
    return g.run(d)[0].f;
  };
  Device& d = *GetParam();
  for (int m : {KILN_DELTA_AUTO, KILN_DELTA_RECURRENT, KILN_DELTA_CHUNKED}) {
    mode = m;
    const auto full = run(d, {0, 1, 2});
    const int64_t row = Hv * Dv;
    int64_t start = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      const std::vector<float> want(full.begin() + start * row, full.begin() + (start + lens[s]) * row);
      EXPECT_TRUE(bitwise_equal(run(d, {s}), want)) << "sequence " << s << " alone, mode " << m;
      const size_t other = (s + 2) % lens.size();
      const auto mixed = run(d, {other, s});
      EXPECT_TRUE(bitwise_equal(std::vector<float>(mixed.begin() + lens[other] * row, mixed.end()), want))
          << "sequence " << s << " second, mode " << m;
      start += lens[s];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, BatchInvariance, ::testing::ValuesIn(devices_under_test()),
                         [](const ::testing::TestParamInfo<Device*>& i) { return device_test_name(i.param); });

}  // namespace
}  // namespace kiln::test
