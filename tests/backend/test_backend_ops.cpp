// The op harness: every op × dtype × shape on every registered device, compared with the CPU
// reference by NMSE under the per-op threshold of docs/backend.md §6. Fresh random inputs per case,
// NaN-poisoned intermediates, NaN never passes. With only the CPU registered it still checks that
// every element is written and that two runs are bitwise identical.
//
// Quick start, adding an op: write a `cases_<op>()` returning Case{name, nmse threshold, builder}
// and list it in kFamilies. Bigger shapes go under `if (heavy())` (the integration build), the biggest
// under `if (long_mode())` (KILN_BACKEND_OPS_LONG=1, not run in CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <ostream>
#include <tuple>

#include "backend/ops.hpp"
#include "core/half.hpp"
#include "op_harness.hpp"

#ifndef KILN_BACKEND_OPS_HEAVY
#define KILN_BACKEND_OPS_HEAVY 0  // the integration build (backend_ops_heavy_test) sets 1
#endif

namespace kiln::test {
namespace {

/** Bigger shapes: the integration-labelled build, or KILN_BACKEND_OPS_LONG=1. */
bool heavy() {
  return KILN_BACKEND_OPS_HEAVY || long_mode();
}

struct Case {
  std::string name;
  double threshold;
  std::function<void(OpGraph&)> build;
  /** (block-format matmuls) the threshold on a device that quantizes the activations to 8 bits
      per 32-value block, as llama.cpp does (the native CPU backend): rounding x costs ~2e-5. */
  double int8_threshold = 0;
};

/** Devices whose q8_0 / q4_0 matmuls read 8-bit activations (docs/backend.md §6, §8). */
bool int8_activations(const Device& d) {
  return d.info().backend == "cpu";
}

kiln_op_params params(std::function<void(kiln_op_params&)> f) {
  kiln_op_params p{};
  f(p);
  return p;
}

const DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,   DType::q4_0,
                              DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k,   DType::q3_k,
                              DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_nl, DType::iq4_xs};
const DType kCacheTypes[] = {DType::f32, DType::f16, DType::bf16};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

/** seqs rows {q_start, q_len, kv_len, slot} for sequences with the given (q_len, kv_len). */
std::vector<int32_t> seqs_rows(const std::vector<std::pair<int, int>>& lens, std::vector<int32_t> slots = {}) {
  std::vector<int32_t> v;
  int start = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    v.insert(v.end(), {start, lens[s].first, lens[s].second, slots.empty() ? static_cast<int32_t>(s) : slots[s]});
    start += lens[s].first;
  }
  return v;
}

// ------------------------------------------------------------------------------------------------

std::vector<Case> cases_get_rows() {
  std::vector<Case> c;
  for (DType t : kWeightTypes)
    for (int64_t n : {1, 7}) {
      const int64_t d = std::max<int64_t>(64, quant_block(t));
      c.push_back({fmt::format("{} table 37x{} n{}", dtype_name(t), d, n), 0.0, [t, n, d](OpGraph& g) {
                     std::vector<int32_t> ids(static_cast<size_t>(n));
                     for (auto& x : ids) x = static_cast<int32_t>(g.rng()() % 37);
                     g.output(g.op(KILN_OP_GET_ROWS, {g.weight(t, {37, d}), g.i32({n}, ids)}));
                   }});
    }
  return c;
}

/**
 * n rows of d values for the KV formats' quantizer, a group pattern per 8 values: random, all
 * zero (scale 0), exact half-steps of an f16 scale (x / scale ties, rounded to even), magnitudes
 * whose scale is an f16 subnormal, and a negative largest value (kv_q4's -8). Kept within a few
 * hundred so one value a step off still shows in the NMSE (vulkan_backend_test compares the bytes,
 * clamped scales included).
 */
std::vector<float> kv_edge_rows(int64_t n, int64_t d, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * d));
  for (size_t i0 = 0; i0 < v.size(); i0 += 8) {
    const unsigned kind = rng() % 6;
    const float s = 0.03125f * static_cast<float>(1 + rng() % 64);  // an f16 value
    for (size_t j = 0; j < 8; ++j) {
      const float r = u(rng);
      v[i0 + j] = kind == 0   ? r
                  : kind == 1 ? 0.0f
                  : kind == 2 ? (std::floor(r * 127.0f) + 0.5f) * s  // q8 ties (and some q4 ones)
                  : kind == 3 ? r * 3e-6f
                  : kind == 4 ? r * 100.0f
                              : (j == 3 ? -8.0f * s : (std::floor(r * 8.0f) + 0.5f) * s);  // q4 ties
    }
  }
  return v;
}

std::vector<Case> cases_set_rows() {
  std::vector<Case> c;
  for (DType t : kCacheTypes)
    c.push_back({fmt::format("{} cache 5x4x2x32 n6", dtype_name(t)), 0.0, [t](OpGraph& g) {
                   const uint32_t cache = g.cache(t, {5, 4, 2, 32});
                   g.op(KILN_OP_SET_ROWS, {cache, g.f32({6, 2, 32}), g.i32({6}, {3, 17, -1, 0, 9, 19})});
                 }});
  // The KV formats quantize each head's row on its own (groups of 8, 16 or 32 by head dim). The
  // Vulkan kernel reproduces the CPU reference's rounding without trusting its own division's last
  // bits (set_rows_kv.comp), so the bits should match exactly; the small threshold leaves room for
  // one value a step off on a device whose f16 conversion or compare disagrees (1 of ~1000 values
  // a q8 step off is ~1e-8, a q4 step ~1e-6).
  for (DType t : {DType::kv_q8, DType::kv_q4})
    for (int64_t d : {8, 24, 64, 96, 128, 256, 512}) {
      if (!heavy() && (d == 256 || d == 24)) continue;
      c.push_back({fmt::format("{} cache 3x4x2x{} n6", dtype_name(t), d), 1e-6, [t, d](OpGraph& g) {
                     const uint32_t cache = g.cache(t, {3, 4, 2, d});
                     g.op(KILN_OP_SET_ROWS, {cache, g.f32_values({6, 2, d}, kv_edge_rows(12, d, g.rng())),
                                             g.i32({6}, {3, 7, -1, 0, 9, 11})});
                   }});
    }
  // A layer's K and V writes with the same slots (one fused dispatch on Vulkan), head dims 128 / 80.
  for (DType t : {DType::kv_q8, DType::kv_q4})
    c.push_back(
        {fmt::format("{} K and V caches Dk 128 Dv 80 n5", dtype_name(t)), 1e-6, [t](OpGraph& g) {
           const uint32_t kc = g.cache(t, {4, 2, 2, 128}, false, "k"), vc = g.cache(t, {4, 2, 2, 80}, false, "v");
           const uint32_t slots = g.i32({5}, {6, 1, -1, 7, 0});
           g.op(KILN_OP_SET_ROWS, {kc, g.f32({5, 2, 128}, -3.0f, 3.0f), slots});
           g.op(KILN_OP_SET_ROWS, {vc, g.f32({5, 2, 80}), slots});
         }});
  return c;
}

std::vector<Case> cases_slice_concat() {
  std::vector<Case> c;
  c.push_back({"slice axis1 7x9x33 [2,7)", 0.0, [](OpGraph& g) {
                 g.output(g.op(KILN_OP_SLICE, {g.f32({7, 9, 33})},
                               params([](auto& p) { p.axis = 1, p.begin = 2, p.end = 7; })));
               }});
  c.push_back({"slice last 5x64 [32,64)", 0.0, [](OpGraph& g) {
                 g.output(g.op(KILN_OP_SLICE, {g.f32({5, 64})}, params([](auto& p) { p.axis = -1, p.begin = 32; })));
               }});
  c.push_back({"concat last 5x17 + 5x31", 0.0, [](OpGraph& g) {
                 g.output(g.op(KILN_OP_CONCAT, {g.f32({5, 17}), g.f32({5, 31})}, params([](auto& p) { p.axis = -1; })));
               }});
  c.push_back({"concat axis0 3x4x8 + 2x4x8", 0.0, [](OpGraph& g) {
                 g.output(g.op(KILN_OP_CONCAT, {g.f32({3, 4, 8}), g.f32({2, 4, 8})}));
               }});
  return c;
}

// 8-bit activations (the native CPU backend, block formats): NMSE 1e-5 to 6e-5 on most shapes; the
// smallest (one output of K = 32, or 33 of K = 64 for the formats with a min) scatter up to 2e-4
// from seed to seed. A wrong decode gives ~1.
constexpr double kInt8Threshold = 3e-4;

std::vector<Case> cases_matmul() {
  std::vector<Case> c;
  std::vector<std::array<int64_t, 3>> shapes = {{1, 64, 33}, {7, 96, 65},  {16, 256, 100},
                                                {3, 32, 1},  {2, 160, 70}, {3, 96, 37}};
  // For the 256-value formats (the other shapes' K is not a whole number of their blocks): one
  // row and 7 rows (the 4-row tiles and a 3-row tail), weight-row tails, several blocks per row.
  shapes.insert(shapes.end(), {{1, 512, 37}, {7, 768, 19}, {5, 256, 8}});
  if (heavy()) shapes.insert(shapes.end(), {{64, 1024, 1000}, {1, 4096, 512}, {200, 512, 300}});
  if (long_mode()) shapes.insert(shapes.end(), {{1, 4096, 4096}, {512, 4096, 1024}});
  for (DType t : kWeightTypes)
    for (auto [n, k, m] : shapes)
      if (k % quant_block(t) == 0 && (quant_block(t) == 256 || k < 512 || heavy()))
        c.push_back({fmt::format("{} x{} w{}", dtype_name(t), dims({n, k}), dims({m, k})), 5e-7,
                     [t, n = n, k = k, m = m](OpGraph& g) {
                       g.output(g.op(KILN_OP_MATMUL, {g.f32({n, k}), g.weight(t, {m, k})}));
                     },
                     is_quantized(t) ? kInt8Threshold : 0});
  // q8_0 blocks holding every int8 value, -128 included (legal in a file, though quantizers
  // write [-127, 127]): kernels that move signs around must still get each product right.
  c.push_back({"q8_0 with -128 x5x64 w40x64", 5e-7,
               [](OpGraph& g) {
                 std::vector<std::byte> w(40 * 2 * 34);
                 for (size_t b = 0; b < 80; ++b) {
                   const uint16_t d = f32_to_f16(0.004f + 0.0001f * static_cast<float>(b % 7));
                   std::memcpy(&w[b * 34], &d, 2);
                   for (size_t j = 0; j < 32; ++j) w[b * 34 + 2 + j] = static_cast<std::byte>((b * 37 + j * 8) % 256);
                 }
                 g.output(g.op(KILN_OP_MATMUL, {g.f32({5, 64}), g.weight_bytes(DType::q8_0, {40, 64}, w)}));
               },
               kInt8Threshold});
  for (DType t : {DType::f32, DType::f16, DType::bf16})  // K off every 32-tile
    c.push_back({fmt::format("{} K=45 x3x5x45 w13x45", dtype_name(t)), 5e-7, [t](OpGraph& g) {
                   g.output(g.op(KILN_OP_MATMUL, {g.f32({3, 5, 45}), g.weight(t, {13, 45})}));
                 }});
  return c;
}

std::vector<Case> cases_moe_matmul() {
  std::vector<Case> c;
  for (DType t : kWeightTypes)
    for (bool per_slot : {false, true}) {
      const int64_t K = std::max<int64_t>(64, quant_block(t));
      c.push_back({fmt::format("{} E6 M40 K{} N5 k2 {}", dtype_name(t), K, per_slot ? "x[N,k,K]" : "x[N,K]"), 5e-7,
                   [t, per_slot, K](OpGraph& g) {
                     const uint32_t x = per_slot ? g.f32({5, 2, K}) : g.f32({5, K});
                     const uint32_t ids = g.i32({5, 2}, {0, 3, 5, 1, 3, 0, 2, 2, 4, 5});
                     g.output(g.op(KILN_OP_MOE_MATMUL, {x, g.weight(t, {6, 40, K}), ids}));
                   },
                   is_quantized(t) ? kInt8Threshold : 0});
    }
  // Enough pairs per expert for the multi-row tiles and the parallel path of the native CPU backend.
  for (DType t : {DType::f16, DType::q8_0})
    c.push_back({fmt::format("{} E4 M72 K96 N20 k2 x[N,K]", dtype_name(t)), 5e-7,
                 [t](OpGraph& g) {
                   std::vector<int32_t> ids;
                   for (int32_t r = 0; r < 20; ++r)  // two distinct experts per row, ten pairs each
                     for (int32_t j = 0; j < 2; ++j) ids.push_back((r + j * (1 + r % 3)) % 4);
                   g.output(g.op(KILN_OP_MOE_MATMUL, {g.f32({20, 96}), g.weight(t, {4, 72, 96}), g.i32({20, 2}, ids)}));
                 },
                 is_quantized(t) ? kInt8Threshold : 0});
  return c;
}

std::vector<Case> cases_binary() {
  std::vector<Case> c;
  for (kiln_op op : {KILN_OP_ADD, KILN_OP_MUL})
    for (auto [a, b] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{{{7, 5, 33}, {7, 5, 33}},
                                                                                          {{7, 5, 33}, {33}},
                                                                                          {{7, 5, 33}, {5, 1}},
                                                                                          {{7, 5, 33}, {1}},
                                                                                          {{4, 1000}, {4, 1}}})
      c.push_back(
          {fmt::format("{} {} by {}", op == KILN_OP_ADD ? "add" : "mul", a.size(), b.size()), 1e-7,
           [op, a = a, b = b](OpGraph& g) {
             auto mk = [&](const std::vector<int64_t>& s) {
               return s.size() == 3 ? g.f32({s[0], s[1], s[2]}) : s.size() == 2 ? g.f32({s[0], s[1]}) : g.f32({s[0]});
             };
             g.output(g.op(op, {mk(a), mk(b)}));
           }});
  return c;
}

std::vector<Case> cases_unary() {
  struct U {
    kiln_op op;
    float lo, hi;
  };
  std::vector<Case> c;
  for (U u : {U{KILN_OP_SCALE, -3, 3}, U{KILN_OP_SILU, -8, 8}, U{KILN_OP_GELU_TANH, -6, 6}, U{KILN_OP_SIGMOID, -10, 10},
              U{KILN_OP_SOFTPLUS, -30, 30}, U{KILN_OP_SOFTCAP, -100, 100}, U{KILN_OP_EXP, -5, 5}})
    for (int64_t n : {1, 7})
      c.push_back({fmt::format("{} {}x129", op_name(u.op), n), 1e-7, [u, n](OpGraph& g) {
                     g.output(g.op(u.op, {g.f32({n, 129}, u.lo, u.hi)},
                                   params([](auto& p) { p.scale = -1.5f, p.bias = 0.25f, p.cap = 30; })));
                   }});
  return c;
}

std::vector<Case> cases_norm() {
  std::vector<Case> c;
  for (int mode : {KILN_NORM_WEIGHT, KILN_NORM_ONE_PLUS, KILN_NORM_NONE, KILN_NORM_GATED})
    for (int64_t d : {64, 257})
      c.push_back({fmt::format("rms mode{} 5x3x{}", mode, d), 1e-7, [mode, d](OpGraph& g) {
                     const uint32_t x = g.f32({5, 3, d}, -4, 4);
                     const auto p = params([mode](auto& q) { q.eps = 1e-6f, q.mode = mode; });
                     if (mode == KILN_NORM_NONE)
                       g.output(g.op(KILN_OP_RMS_NORM, {x}, p));
                     else if (mode == KILN_NORM_GATED)
                       g.output(g.op(KILN_OP_RMS_NORM, {x, g.f32({d}), g.f32({5, 3, d}, -4, 4)}, p));
                     else
                       g.output(g.op(KILN_OP_RMS_NORM, {x, g.f32({d})}, p));
                   }});
  for (int64_t d : {16, 129})
    c.push_back({fmt::format("l2 7x{}", d), 1e-7, [d](OpGraph& g) {
                   g.output(g.op(KILN_OP_L2_NORM, {g.f32({7, d})}, params([](auto& p) { p.eps = 1e-6f; })));
                 }});
  for (int64_t d : {8, 1000})
    c.push_back({fmt::format("softmax 6x{}", d), 1e-7, [d](OpGraph& g) {
                   g.output(g.op(KILN_OP_SOFTMAX, {g.f32({6, d}, -10, 10)}, params([](auto& p) { p.scale = 0.7f; })));
                 }});
  // A Gemma-4-sized vocabulary row: three passes of 32768 iterations per lane, past llvmpipe's 65535
  // loop iterations per invocation unless the loops take several elements per iteration.
  c.push_back(
      {"softmax 2x262144", 1e-7, [](OpGraph& g) {
         g.output(g.op(KILN_OP_SOFTMAX, {g.f32({2, 262144}, -10, 10)}, params([](auto& p) { p.scale = 1.0f; })));
       }});
  return c;
}

std::vector<Case> cases_rope() {
  struct R {
    const char* name;
    int mode;
    int64_t D;
    int n_dims, n_freq;
    float theta;
  };
  std::vector<Case> c;
  for (R r : {R{"neox full D64", KILN_ROPE_NEOX, 64, 0, 0, 10000},
              R{"neox partial 16/64 (qwen3.5)", KILN_ROPE_NEOX, 64, 16, 0, 1e7f},
              R{"proportional D128 n_freq16 (gemma4)", KILN_ROPE_NEOX, 128, 0, 16, 1e6f},
              R{"normal full D32", KILN_ROPE_NORMAL, 32, 0, 0, 10000},
              R{"normal partial 8/40", KILN_ROPE_NORMAL, 40, 8, 0, 500}})
    c.push_back({r.name, 1e-7, [r](OpGraph& g) {
                   std::vector<int32_t> pos = {0, 1, 5, 77, 4095, 4096, 131071, 262143, 9};
                   g.output(g.op(KILN_OP_ROPE, {g.f32({9, 3, r.D}), g.i32({9}, pos)}, params([&](auto& p) {
                                   p.mode = r.mode, p.n_dims = r.n_dims, p.n_freq = r.n_freq, p.theta = r.theta;
                                 })));
                 }});
  return c;
}

/** A paged KV cache with blocks assigned in shuffled order; returns (k, v, block_table, seqs). */
struct Paged {
  uint32_t k, v, table, seqs;
};
Paged paged(OpGraph& g, DType kt, DType vt, const std::vector<std::pair<int, int>>& lens, int64_t bs, int64_t hkv,
            int64_t dk, int64_t dv) {
  int64_t mb = 1, total = 0;
  for (auto [q, kv] : lens) mb = std::max<int64_t>(mb, (kv + bs - 1) / bs), total += (kv + bs - 1) / bs;
  const int64_t nblocks = total + 3;
  std::vector<int32_t> perm(static_cast<size_t>(nblocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g.rng());
  std::vector<int32_t> table(lens.size() * static_cast<size_t>(mb), -1);
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int64_t b = 0; b < (lens[s].second + bs - 1) / bs; ++b)
      table[s * static_cast<size_t>(mb) + static_cast<size_t>(b)] = perm[next++];
  Paged p;
  p.k = g.cache(kt, {nblocks, bs, hkv, dk}, false, "k");
  p.v = g.cache(vt, {nblocks, bs, hkv, dv}, false, "v");
  p.table = g.i32({static_cast<int64_t>(lens.size()), mb}, table);
  p.seqs = g.i32({static_cast<int64_t>(lens.size()), 4}, seqs_rows(lens));
  return p;
}

std::vector<Case> cases_attention() {
  struct A {
    std::string name;
    std::vector<std::pair<int, int>> lens;  // (q_len, kv_len)
    int64_t hq, hkv, dk, dv, bs;
    int window;
    float cap, scale;
  };
  std::vector<A> as = {
      {"decode 1 seq kv37", {{1, 37}}, 4, 2, 32, 32, 16, 0, 0, 0},
      {"prefill 13 from 0", {{13, 13}}, 4, 4, 32, 32, 8, 0, 0, 0},
      {"ragged decode+chunk+prefill", {{1, 50}, {5, 40}, {9, 9}}, 8, 2, 64, 64, 16, 0, 0, 0},
      {"sliding window 8", {{1, 50}, {11, 30}}, 4, 1, 32, 32, 16, 8, 0, 1.0f},
      {"softcap 30, Dv 16 != Dk 48", {{3, 20}, {1, 7}}, 6, 3, 48, 16, 4, 0, 30, 0},
      {"block size 1, head dim 40", {{4, 6}}, 2, 1, 40, 40, 1, 0, 0, 0},
      {"head dims 36 / 20 (not multiples of 8)", {{3, 30}, {1, 45}}, 4, 2, 36, 20, 16, 0, 0, 0},
      // Gemma 4's layers: full with head dim 512 (GQA 8:1, scale 1), sliding with 256 and a window.
      {"gemma4 full: head dim 512, GQA 8", {{1, 40}, {6, 21}}, 8, 1, 512, 512, 16, 0, 0, 1.0f},
      {"gemma4 sliding: head dim 256, window 12", {{1, 40}, {9, 30}}, 4, 2, 256, 256, 8, 12, 0, 1.0f},
      // Query-head groups wider than a native CPU task's 16 query rows, and ones that do not divide it.
      {"GQA 32:1, window 20", {{1, 45}, {7, 30}}, 32, 1, 32, 32, 16, 20, 0, 0},
      {"GQA 9:3, window 10", {{1, 33}, {12, 25}}, 9, 3, 24, 24, 8, 10, 0, 0},
      // Keys across the native CPU backend's 128-key chunks, with a window starting mid-chunk.
      {"kv 300, window 200", {{1, 300}, {5, 260}}, 4, 2, 64, 64, 16, 200, 0, 0},
  };
  if (heavy()) as.push_back({"head dim 132, kv 1500", {{1, 1500}, {7, 700}}, 4, 2, 132, 132, 16, 0, 0, 0});
  if (heavy()) as.push_back({"prefill 130 + decode kv2000", {{130, 700}, {1, 2000}}, 8, 2, 128, 128, 32, 0, 0, 0});
  if (heavy()) as.push_back({"gemma-like window 512, D256", {{24, 1500}, {1, 1500}}, 8, 2, 256, 256, 16, 512, 0, 1.0f});
  if (long_mode()) {
    as.push_back({"decode kv 8192 x4", {{1, 8192}, {1, 8000}, {1, 4097}, {1, 100}}, 16, 2, 256, 256, 16, 0, 0, 0});
    as.push_back({"decode kv 8192, head dim 260", {{1, 8192}, {1, 3000}}, 8, 2, 260, 260, 16, 0, 0, 0});
  }
  std::vector<Case> c;
  auto add = [&c](DType kt, DType vt, const A& a) {
    const std::string types = kt == vt ? dtype_name(kt) : fmt::format("{} K {} V", dtype_name(kt), dtype_name(vt));
    c.push_back({fmt::format("{} {}", types, a.name), 5e-7, [kt, vt, a](OpGraph& g) {
                   const Paged p = paged(g, kt, vt, a.lens, a.bs, a.hkv, a.dk, a.dv);
                   int64_t n = 0;
                   for (auto [q, kv] : a.lens) n += q;
                   const uint32_t q = g.f32({n, a.hq, a.dk});
                   g.output(g.op(KILN_OP_ATTENTION, {q, p.k, p.v, p.table, p.seqs},
                                 params([&](auto& x) { x.window = a.window, x.cap = a.cap, x.scale = a.scale; })));
                 }});
  };
  for (DType t : kCacheTypes)
    for (const A& a : as) add(t, t, a);
  // The KV formats (kv_q8 / kv_q4): caches of random values quantized by the CPU reference, so
  // both devices read the same bits and dequantize them exactly (q x an f16 scale); every head dim
  // in use (groups of 8, 16 and 32), GQA, windows, decode and prefill in ragged batches, K and V of
  // different formats.
  const DType q8 = DType::kv_q8, q4 = DType::kv_q4;
  struct KvA {
    DType k, v;
    A a;
  };
  std::vector<KvA> kv = {
      {q8, q8, {"ragged decode+chunk+prefill, GQA 4", {{1, 50}, {5, 40}, {9, 9}}, 8, 2, 64, 64, 16, 0, 0, 0}},
      {q4, q4, {"ragged decode+chunk+prefill, GQA 4", {{1, 50}, {5, 40}, {9, 9}}, 8, 2, 64, 64, 16, 0, 0, 0}},
      {q8, DType::f16, {"head dim 128, window 8", {{1, 45}, {6, 30}}, 4, 1, 128, 128, 16, 8, 0, 0}},
      {q4, q8, {"head dim 96, prefill 7 + decode", {{7, 7}, {1, 33}}, 4, 2, 96, 96, 8, 0, 0, 0}},
      {q8, q4, {"stories260K: head dim 8, GQA 2", {{1, 30}, {5, 12}}, 8, 4, 8, 8, 16, 0, 0, 0}},
      {q4, q4, {"head dim 80, window 12", {{1, 40}, {9, 30}}, 4, 2, 80, 80, 8, 12, 0, 0}},
      {q8, q8, {"gemma4 sliding: head dim 256, window 12", {{1, 40}, {9, 30}}, 4, 2, 256, 256, 8, 12, 0, 1.0f}},
      {q4, q4, {"gemma4 full: head dim 512, GQA 8", {{1, 40}, {6, 21}}, 8, 1, 512, 512, 16, 0, 0, 1.0f}},
  };
  if (heavy()) {
    for (DType t : {q8, q4}) {
      const DType o = t == q8 ? q4 : q8;
      kv.push_back(
          {t, t, {"prefill 130 + decode kv2000, head dim 128", {{130, 700}, {1, 2000}}, 8, 2, 128, 128, 32, 0, 0, 0}});
      kv.push_back({t, t, {"gemma-like window 512, D256", {{24, 1500}, {1, 1500}}, 8, 2, 256, 256, 16, 512, 0, 1.0f}});
      kv.push_back({t, o, {"head dim 512, GQA 8, kv 1200", {{1, 1200}, {5, 300}}, 8, 1, 512, 512, 16, 0, 0, 1.0f}});
      kv.push_back({t, t, {"head dims 96 / 80, softcap 30", {{3, 200}, {1, 90}}, 6, 3, 96, 80, 16, 0, 30, 0}});
      kv.push_back({o, t, {"head dim 8, window 16, kv 600", {{1, 600}, {17, 300}}, 8, 4, 8, 8, 16, 16, 0, 0}});
      kv.push_back({t, DType::bf16, {"head dim 64, GQA 8", {{1, 300}, {4, 100}}, 16, 2, 64, 64, 16, 0, 0, 0}});
    }
  }
  for (const KvA& x : kv) add(x.k, x.v, x.a);
  return c;
}

std::vector<Case> cases_conv1d() {
  std::vector<Case> c;
  for (int64_t ch : {40, 130})
    c.push_back({fmt::format("C{} K4 seqs q1,q2,q9", ch), 1e-7, [ch](OpGraph& g) {
                   const uint32_t state = g.cache(DType::f32, {4, 3, ch}, false, "conv state");
                   const uint32_t seqs = g.i32({3, 4}, seqs_rows({{1, 10}, {2, 2}, {9, 20}}, {2, 0, 3}));
                   g.output(g.op(KILN_OP_CONV1D_CAUSAL, {g.f32({12, ch}), g.f32({ch, 4}), state, seqs}));
                 }});
  // Other kernel widths (each a specialization of the Vulkan kernel): one state row (K 2), odd;
  // channels one per invocation (33) and four (36).
  for (int64_t k : {2, 7})
    for (int64_t ch : {33, 36})
      c.push_back({fmt::format("C{} K{} seqs q3,q1", ch, k), 1e-7, [k, ch](OpGraph& g) {
                     const uint32_t state = g.cache(DType::f32, {2, k - 1, ch}, false, "conv state");
                     const uint32_t seqs = g.i32({2, 4}, seqs_rows({{3, 8}, {1, 4}}, {1, 0}));
                     g.output(g.op(KILN_OP_CONV1D_CAUSAL, {g.f32({4, ch}), g.f32({ch, k}), state, seqs}));
                   }});
  // A 9000-token prefill: 8 loop iterations per token in the Vulkan kernel, past llvmpipe's 65535
  // per invocation unless the tokens are split into rounds (KernelPolicy::loop_budget).
  c.push_back({"C8 K4 prefill 9000 + decode", 1e-7, [](OpGraph& g) {
                 const uint32_t state = g.cache(DType::f32, {2, 3, 8}, false, "conv state");
                 const uint32_t seqs = g.i32({2, 4}, seqs_rows({{9000, 9000}, {1, 5}}, {1, 0}));
                 g.output(g.op(KILN_OP_CONV1D_CAUSAL, {g.f32({9001, 8}), g.f32({8, 4}), state, seqs}));
               }});
  return c;
}

/** GATED_DELTA over sequences of (q_len, kv_len) with L2-normed q (times qscale) and k, gates in
 *  [gate_lo, 0], beta in [0, 1] and one state slot per sequence. */
void gated_delta(OpGraph& g, const std::vector<std::pair<int, int>>& l, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                 float qscale, float gate_lo, const kiln_op_params& p) {
  int64_t n = 0;
  for (auto [q, kv] : l) n += q;
  const uint32_t state = g.cache(DType::f32, {static_cast<int64_t>(l.size()), hv, dk, dv}, false, "ssm state");
  const auto eps = params([](auto& x) { x.eps = 1e-6f; });
  const uint32_t q = g.op(KILN_OP_SCALE, {g.op(KILN_OP_L2_NORM, {g.f32({n, hk, dk})}, eps)},
                          params([qscale](auto& x) { x.scale = qscale; }));
  const uint32_t k = g.op(KILN_OP_L2_NORM, {g.f32({n, hk, dk})}, eps);
  const uint32_t gate = g.f32({n, hv}, gate_lo, 0.0f), beta = g.f32({n, hv}, 0.0f, 1.0f);
  g.output(g.op(KILN_OP_GATED_DELTA,
                {q, k, g.f32({n, hv, dv}), gate, beta, state, g.i32({static_cast<int64_t>(l.size()), 4}, seqs_rows(l))},
                p));
}

/** A gated_delta case: sequences `l`, heads and dims, in `mode` with chunks of `chunk`. */
Case delta_case(std::string name, std::vector<std::pair<int, int>> l, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
                float qscale, float gate_lo, int mode, int chunk = 0) {
  return {std::move(name), 5e-6, [=](OpGraph& g) {
            gated_delta(g, l, hk, hv, dk, dv, qscale, gate_lo,
                        params([&](auto& p) { p.mode = mode, p.chunk = chunk; }));
          }};
}

std::vector<Case> cases_gated_delta() {
  std::vector<Case> c;
  std::vector<std::pair<int, int>> lens = {{1, 4}, {20, 23}, {70, 73}};
  if (heavy()) lens.emplace_back(300, 303);
  for (int mode : {KILN_DELTA_AUTO, KILN_DELTA_RECURRENT, KILN_DELTA_CHUNKED})
    c.push_back(
        delta_case(fmt::format("mode{} Hk2 Hv4 Dk16 Dv8 chunk16", mode), lens, 2, 4, 16, 8, 0.25f, -1.0f, mode, 16));
  // Qwen3.5's head size with a 300-token prefill next to a decode: an invocation of the Vulkan
  // recurrent kernel loops 2·Dk times per token, past llvmpipe's 65535 loop iterations per
  // invocation unless the tokens are split into rounds (KernelPolicy::loop_budget).
  c.push_back(delta_case("recurrent Hk1 Hv2 Dk128 Dv16, prefill 300 + decode", {{300, 300}, {1, 9}}, 1, 2, 128, 16,
                         0.088f, -0.2f, KILN_DELTA_RECURRENT));
  // The chunked form (Vulkan: gated_delta_prep.comp + gated_delta_chunk.comp on GPUs; ctest's
  // vulkan_delta_chunked_* force it on lavapipe) at Qwen3.5's key head size in default chunks of
  // 64: a 300-token prefill (5 chunks), a prefill one past a chunk boundary and a decode; Dv 20 is
  // not a multiple of the kernel's column tile. Then value heads of 128 (16 column tiles).
  c.push_back(delta_case("chunked Hk1 Hv2 Dk128 Dv20, prefill 300 + 65 + decode", {{300, 300}, {65, 70}, {1, 9}}, 1, 2,
                         128, 20, 0.088f, -0.2f, KILN_DELTA_CHUNKED));
  c.push_back(delta_case("chunked Hk1 Hv2 Dk64 Dv128, prefill 100 + decode", {{100, 100}, {1, 4}}, 1, 2, 64, 128,
                         0.125f, -0.2f, KILN_DELTA_CHUNKED));
  // Scalar q/k reads (Dk 18), fewer value columns than the tile (Dv 5), odd chunks of 7; and a
  // chunk longer than the Vulkan kernels' 64 (run as 64 there: the rounding differs, not the sum).
  for (int chunk : {7, 100})
    c.push_back(delta_case(fmt::format("chunked Hk2 Hv2 Dk18 Dv5 chunk{}", chunk), {{7, 9}, {1, 3}, {150, 150}}, 2, 2,
                           18, 5, 0.2f, -0.5f, KILN_DELTA_CHUNKED, chunk));
  // A key dim that is not a multiple of 4: the Vulkan kernel's scalar q/k reads (not VEC), one
  // value column per invocation (Dv odd).
  c.push_back(
      delta_case("recurrent Hk2 Hv2 Dk18 Dv5", {{7, 9}, {1, 3}}, 2, 2, 18, 5, 0.2f, -0.5f, KILN_DELTA_RECURRENT));
  // Value heads of 20: vector steps and a scalar tail in the native CPU backend's recurrent step.
  c.push_back(
      delta_case("recurrent Hk1 Hv2 Dk32 Dv20", {{9, 9}, {1, 5}}, 1, 2, 32, 20, 0.15f, -0.3f, KILN_DELTA_RECURRENT));
  // Two value columns per invocation (Dv even, not a multiple of 4: the state read as scalars).
  c.push_back(delta_case("recurrent Hk1 Hv3 Dk12 Dv6", {{5, 5}, {1, 2}, {9, 12}}, 1, 3, 12, 6, 0.3f, -0.5f,
                         KILN_DELTA_RECURRENT));
  return c;
}

std::vector<Case> cases_moe() {
  std::vector<Case> c;
  for (auto [e, k] : std::vector<std::pair<int64_t, int>>{{8, 2}, {64, 8}, {5, 5}})
    c.push_back({fmt::format("top_k E{} k{}", e, k), 0.0, [e = e, k = k](OpGraph& g) {
                   g.output(g.op(KILN_OP_TOP_K, {g.f32({9, e}, -3, 3)}, params([k](auto& p) { p.k = k; })));
                 }});
  // With values (the sampler's candidates): short rows (top_k.comp) and vocabulary-long ones
  // (top_k_rows.comp's radix selection), values drawn from few levels so ties cross the k-th place,
  // with -0 and +0 mixed in (equal values: the lower index first).
  const auto ties = [](int64_t n, int levels, uint32_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t s = seed;
    for (auto& x : v) {
      s = s * 1664525u + 1013904223u;
      const int q = static_cast<int>((s >> 8) % static_cast<uint32_t>(levels)) - levels / 2;
      x = q == 0 && (s & 1u) ? -0.0f : static_cast<float>(q) * 0.25f;
    }
    return v;
  };
  for (auto [rows, e, k, levels] : std::vector<std::tuple<int64_t, int64_t, int, int>>{{3, 48, 8, 9},
                                                                                       {2, 96, 90, 5},
                                                                                       {4, 1024, 1024, 7},
                                                                                       {5, 1500, 1, 3},
                                                                                       {4, 50000, 64, 4001},
                                                                                       {2, 151936, 331, 257},
                                                                                       {3, 151936, 64, 0},
                                                                                       {2, 262144, 1, 0}})
    c.push_back({fmt::format("top_k values N{} E{} k{}{}", rows, e, k, levels ? " ties" : ""), 0.0,
                 [ties, rows = rows, e = e, k = k, levels = levels](OpGraph& g) {
                   const uint32_t x = levels ? g.f32_values({rows, e}, ties(rows * e, levels, static_cast<uint32_t>(e)))
                                             : g.f32({rows, e}, -30, 30);
                   g.output(g.op(KILN_OP_TOP_K, {x}, params([k](auto& p) {
                                   p.k = k;
                                   p.mode = kTopKValues;
                                 })));
                 }});
  // NaN ranks below -inf on every device (a corrupt logits row gives the same ids everywhere).
  for (auto [e, k] : std::vector<std::pair<int64_t, int>>{{40, 38}, {3000, 80}})
    c.push_back({fmt::format("top_k values E{} k{} with NaN", e, k), 0.0, [ties, e = e, k = k](OpGraph& g) {
                   std::vector<float> v = ties(2 * e, 9, 5);
                   for (size_t i = 0; i < v.size(); i += 7) v[i] = std::nanf("");
                   v[3] = -std::numeric_limits<float>::infinity();
                   g.output(g.op(KILN_OP_TOP_K, {g.f32_values({2, e}, v)}, params([k](auto& p) {
                                   p.k = k;
                                   p.mode = kTopKValues;
                                 })));
                 }});
  for (int mode : {0, 1})
    for (bool scaled : {false, true})
      c.push_back({fmt::format("weights renorm{} scale{}", mode, scaled), 1e-7, [mode, scaled](OpGraph& g) {
                     const uint32_t logits = g.f32({9, 16}, -3, 3);
                     const uint32_t ids = g.op(KILN_OP_TOP_K, {logits}, params([](auto& p) { p.k = 4; }));
                     const auto p = params([mode](auto& x) { x.mode = mode; });
                     g.output(scaled ? g.op(KILN_OP_MOE_WEIGHTS, {logits, ids, g.f32({16}, 0.5f, 2.0f)}, p)
                                     : g.op(KILN_OP_MOE_WEIGHTS, {logits, ids}, p));
                   }});
  c.push_back({"moe_sum N7 k3 M33", 1e-7, [](OpGraph& g) {
                 g.output(g.op(KILN_OP_MOE_SUM, {g.f32({7, 3, 33}), g.f32({7, 3})}));
               }});
  return c;
}

struct Family {
  const char* name;
  std::vector<Case> (*cases)();
};
const Family kFamilies[] = {
    {"get_rows", cases_get_rows},
    {"set_rows", cases_set_rows},
    {"slice_concat", cases_slice_concat},
    {"matmul", cases_matmul},
    {"moe_matmul", cases_moe_matmul},
    {"binary", cases_binary},
    {"unary", cases_unary},
    {"norm", cases_norm},
    {"rope", cases_rope},
    {"attention", cases_attention},
    {"conv1d", cases_conv1d},
    {"gated_delta", cases_gated_delta},
    {"moe", cases_moe},
};

void PrintTo(const Family& f, std::ostream* os) {
  *os << f.name;
}

/** KILN_BACKEND_OPS_VERBOSE=1 prints every case's NMSE per device (for docs/backend.md §6). */
bool verbose() {
  const char* env = std::getenv("KILN_BACKEND_OPS_VERBOSE");
  return env && *env && std::string(env) != "0";
}

class BackendOps : public ::testing::TestWithParam<Family> {};

TEST_P(BackendOps, EveryDeviceMatchesTheCpuReference) {
  Device& cpu = backend::Registry::instance().reference();
  const auto devices = devices_under_test();
  uint32_t seed = 1;
  for (const Case& c : GetParam().cases()) {
    SCOPED_TRACE(c.name);
    OpGraph g(seed++);
    c.build(g);
    const auto ref = g.run(cpu);
    for (const Output& o : ref) {
      for (float x : o.f) ASSERT_TRUE(std::isfinite(x)) << o.what << " of the CPU reference holds NaN/Inf";
      for (int32_t x : o.i) ASSERT_NE(x, -1) << o.what << " has an unwritten (poisoned) id";
    }
    for (Device* d : devices) {
      SCOPED_TRACE(d->info().id);
      const auto got = g.run(*d);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        if (d == &cpu) {  // the reference against itself: deterministic to the bit
          EXPECT_TRUE(bitwise_equal(got[i].f, ref[i].f)) << got[i].what;
          EXPECT_EQ(got[i].i, ref[i].i) << got[i].what;
          continue;
        }
        EXPECT_EQ(got[i].i, ref[i].i) << got[i].what;
        const double e = nmse(got[i].f, ref[i].f);
        if (verbose())
          std::printf("%-12s %-56s %-10s %-14s NMSE %.3g\n", GetParam().name, c.name.c_str(), d->info().id.c_str(),
                      got[i].what.c_str(), e);
        size_t bad = 0, first_bad = 0;
        for (size_t j = got[i].f.size(); j-- > 0;)
          if (!std::isfinite(got[i].f[j])) ++bad, first_bad = j;
        const double threshold = c.int8_threshold > 0 && int8_activations(*d) ? c.int8_threshold : c.threshold;
        EXPECT_LE(e, threshold) << got[i].what << ": NMSE " << e << " over " << threshold << "; " << bad
                                << " non-finite elements"
                                << (bad ? ", the first at flat index " + std::to_string(first_bad) : "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, BackendOps, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace kiln::test
