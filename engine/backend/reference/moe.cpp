// Mixture-of-experts routing: TOP_K (ids), MOE_WEIGHTS (softmax over all experts, gather,
// renormalize, optional per-expert scale) and MOE_SUM (weighted sum over the k slots, in order).
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <cstring>

#include "backend/ops.hpp"
#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {

/** Larger key, larger value; -0 and +0 share a key; NaN ranks below -inf (as the Vulkan kernels). */
static uint32_t rank_key(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0;
  if ((u & 0x7fffffffu) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void run_top_k(const Node& n) {
  const TensorDesc& x = n.src[0].desc;
  const int64_t E = x.last(), k = n.params.k, rows = x.rows();
  const bool values = n.params.mode == kTopKValues;
  const int64_t width = values ? 2 * k : k;
  if (x.dtype != DType::f32 || k < 1 || k > E || n.dst.desc.dtype != DType::i32 || n.dst.desc.numel() != rows * width)
    fail(n, "expected f32 [N, E] -> i32 [N, k] (or [N, 2k] with values) with 1 <= k <= E");
  const float* xp = f32_of(n.src[0]);
  int32_t* ids = i32_of(n.dst);
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    const float* row = xp + r * E;
    int32_t* out = ids + r * width;
    // Insertion into a sorted list of k: descending value, ties to the lower index (strict >).
    int64_t filled = 0;
    for (int64_t e = 0; e < E; ++e) {
      int64_t pos = filled;
      while (pos > 0 && rank_key(row[e]) > rank_key(row[out[pos - 1]])) --pos;
      if (pos >= k) continue;
      for (int64_t m = std::min(filled, k - 1); m > pos; --m) out[m] = out[m - 1];
      out[pos] = static_cast<int32_t>(e);
      filled = std::min(filled + 1, k);
    }
    if (values)
      for (int64_t j = 0; j < k; ++j) std::memcpy(out + k + j, row + out[j], 4);
  });
}

void run_moe_weights(const Node& n) {
  const TensorDesc &x = n.src[0].desc, &ids = n.src[1].desc;
  const int64_t E = x.last(), rows = x.rows(), k = ids.last();
  if (x.dtype != DType::f32 || ids.dtype != DType::i32 || ids.rows() != rows || n.dst.desc.numel() != rows * k)
    fail(n, "expected logits f32 [N, E], ids i32 [N, k] -> f32 [N, k]");
  const float* scale = nullptr;
  if (n.n_src > 2) {
    if (n.src[2].desc.dtype != DType::f32 || n.src[2].desc.numel() != E) fail(n, "per-expert scale must be f32 [E]");
    scale = f32_of(n.src[2]);
  }
  const bool renorm = (static_cast<uint32_t>(n.params.mode) & KILN_MOE_RENORMALIZE) != 0;
  const float* xp = f32_of(n.src[0]);
  const int32_t* ip = i32_of(n.src[1]);
  float* out = f32_of(n.dst);
  for (int64_t i = 0; i < rows * k; ++i)
    if (ip[i] < 0 || ip[i] >= E) fail(n, fmt::format("expert id {} at index {} outside [0, {})", ip[i], i, E));
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    const float* l = xp + r * E;
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - mx);
    float* w = out + r * k;
    float picked = 0.0f;
    for (int64_t j = 0; j < k; ++j) picked += (w[j] = std::exp(l[ip[r * k + j]] - mx) / sum);
    for (int64_t j = 0; j < k; ++j) {
      if (renorm) w[j] /= picked;
      if (scale) w[j] *= scale[ip[r * k + j]];
    }
  });
}

void run_moe_sum(const Node& n) {
  const TensorDesc &y = n.src[0].desc, &w = n.src[1].desc;
  if (y.ndim != 3 || y.dtype != DType::f32 || w.dtype != DType::f32 || w.numel() != y.ne[0] * y.ne[1] ||
      n.dst.desc.numel() != y.ne[0] * y.ne[2])
    fail(n, "expected y f32 [N, k, M], w f32 [N, k] -> f32 [N, M]");
  const int64_t N = y.ne[0], k = y.ne[1], M = y.ne[2];
  const float *yp = f32_of(n.src[0]), *wp = f32_of(n.src[1]);
  float* out = f32_of(n.dst);
  tbb::parallel_for(int64_t{0}, N, [&](int64_t r) {
    float* o = out + r * M;
    for (int64_t m = 0; m < M; ++m) o[m] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = wp[r * k + j];
      const float* yr = yp + (r * k + j) * M;
      for (int64_t m = 0; m < M; ++m) o[m] += wj * yr[m];
    }
  });
}

}  // namespace kiln::backend::reference
