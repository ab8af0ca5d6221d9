#include "machine_limits.hpp"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kiln::bench {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

double triad_gbs(int mib, int reps) {
  const size_t n = static_cast<size_t>(mib) << 18;  // floats
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const size_t grain = 1 << 16;
  auto pass = [&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, n, grain), [&](const tbb::blocked_range<size_t>& r) {
      for (size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0f * c[i];
    });
  };
  pass();  // first touch
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    double t0 = now();
    pass();
    best = std::min(best, now() - t0);
  }
  volatile float sink = a[n / 2];
  (void)sink;
  return 3.0 * static_cast<double>(n) * 4 / best / 1e9;
}

double fma_peak_gflops(int reps) {
  const int threads = tbb::this_task_arena::max_concurrency();
  const long iters = 20'000'000;
  double best = 1e30;
  std::vector<float> out(static_cast<size_t>(threads) * 8);
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    tbb::parallel_for(0, threads, [&](int t) {
#if defined(__AVX2__) && defined(__FMA__)
      // 10 independent 8-wide chains: enough to cover FMA latency x 2 pipes.
      __m256 acc[10];
      for (int j = 0; j < 10; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j + t));
      const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
      for (long i = 0; i < iters / 10; ++i)
        for (int j = 0; j < 10; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
      __m256 s = acc[0];
      for (int j = 1; j < 10; ++j) s = _mm256_add_ps(s, acc[j]);
      _mm256_storeu_ps(&out[static_cast<size_t>(t) * 8], s);
#else
      float acc[10][8];
      for (int j = 0; j < 10; ++j)
        for (int l = 0; l < 8; ++l) acc[j][l] = static_cast<float>(j + l + t);
      for (long i = 0; i < iters / 10; ++i)
        for (int j = 0; j < 10; ++j)
          for (int l = 0; l < 8; ++l) acc[j][l] = acc[j][l] * 0.999999f + 1e-7f;
      for (int l = 0; l < 8; ++l) out[static_cast<size_t>(t) * 8 + static_cast<size_t>(l)] = acc[0][l] + acc[9][l];
#endif
    });
    best = std::min(best, now() - t0);
  }
  // iters/10 loop trips x 10 chains x 8 lanes x 2 flops, per thread
  return static_cast<double>(threads) * static_cast<double>(iters / 10) * 10 * 8 * 2 / best / 1e9;
}

}  // namespace kiln::bench
