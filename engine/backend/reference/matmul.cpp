// MATMUL (x · wᵀ) and MOE_MATMUL (per-slot expert weights). Work is split over weight rows; each
// output element is one dot() over K, so its value never depends on the batch.
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <vector>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {
namespace {

constexpr int64_t kRowBlock = 16;  // weight rows dequantized together
constexpr int64_t kRowTile = 64;   // activation rows per task

/** Weight rows [m0, m1) of a [.., K] matrix as f32: a pointer into the tensor or into `tmp`. */
const float* weight_rows(DType t, const std::byte* w, int64_t K, int64_t m0, int64_t m1, std::vector<float>& tmp) {
  const size_t rb = row_bytes(t, K);
  if (t == DType::f32) return reinterpret_cast<const float*>(w + static_cast<size_t>(m0) * rb);
  tmp.resize(static_cast<size_t>((m1 - m0) * K));
  for (int64_t m = m0; m < m1; ++m) row_to_f32(t, w + static_cast<size_t>(m) * rb, K, tmp.data() + (m - m0) * K);
  return tmp.data();
}

}  // namespace

MatmulShape check_matmul(const Node& n) {
  const TensorRef &x = n.src[0], &w = n.src[1];
  const int64_t K = x.desc.last(), M = w.desc.ne[0];
  if (x.desc.dtype != DType::f32 || w.desc.ndim != 2 || w.desc.ne[1] != K || n.dst.desc.last() != M ||
      n.dst.desc.rows() != x.desc.rows())
    fail(n, "expected x f32 [..., K], w [M, K] -> [..., M]");
  return {x.desc.rows(), K, M};
}

MoeShape check_moe_matmul(const Node& n) {
  const TensorRef &x = n.src[0], &w = n.src[1], &ids = n.src[2];
  if (w.desc.ndim != 3 || ids.desc.ndim != 2 || ids.desc.dtype != DType::i32)
    fail(n, "expected w [E, M, K], ids i32 [N, k]");
  MoeShape s;
  s.E = w.desc.ne[0], s.M = w.desc.ne[1], s.K = w.desc.ne[2];
  s.N = ids.desc.ne[0], s.k = ids.desc.ne[1];
  s.per_slot = x.desc.ndim == 3;
  if (x.desc.dtype != DType::f32 || x.desc.last() != s.K || x.desc.ne[0] != s.N ||
      (s.per_slot && x.desc.ne[1] != s.k) || n.dst.desc.numel() != s.N * s.k * s.M)
    fail(n, "expected x f32 [N, K] or [N, k, K] -> [N, k, M]");
  s.ids = i32_of(ids);
  for (int64_t p = 0; p < s.N * s.k; ++p)
    if (s.ids[p] < 0 || s.ids[p] >= s.E)
      fail(n, fmt::format("expert id {} at index {} outside [0, {})", s.ids[p], p, s.E));
  return s;
}

void run_matmul(const Node& n) {
  const MatmulShape shape = check_matmul(n);  // (plain names: clang 14 lambdas cannot capture bindings)
  const int64_t R = shape.R, K = shape.K, M = shape.M;
  const TensorRef &x = n.src[0], &w = n.src[1];
  const float* xp = f32_of(x);
  const std::byte* wp = bytes_of(w);
  float* out = f32_of(n.dst);
  // Tiles of (rows × weight rows) so x stays in cache for prefill shapes; the tiling only decides
  // who computes an element, never how, so results do not depend on R.
  const int64_t mblocks = (M + kRowBlock - 1) / kRowBlock, rblocks = (R + kRowTile - 1) / kRowTile;
  tbb::parallel_for(int64_t{0}, mblocks * rblocks, [&](int64_t task) {
    const int64_t m0 = (task / rblocks) * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
    const int64_t r0 = (task % rblocks) * kRowTile, r1 = std::min(R, r0 + kRowTile);
    std::vector<float> tmp;
    const float* wr = weight_rows(w.desc.dtype, wp, K, m0, m1, tmp);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t m = m0; m < m1; ++m) out[r * M + m] = dot(xp + r * K, wr + (m - m0) * K, K);
  });
}

void run_moe_matmul(const Node& n) {
  const MoeShape s = check_moe_matmul(n);
  const TensorRef &x = n.src[0], &w = n.src[1];
  const int64_t E = s.E, M = s.M, K = s.K, N = s.N, k = s.k;
  const bool per_slot = s.per_slot;
  // Pairs (n, j) grouped by expert, so each expert's weights are dequantized once.
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));
  for (int64_t p = 0; p < N * k; ++p) by_expert[static_cast<size_t>(s.ids[p])].push_back(p);
  const float* xp = f32_of(x);
  const std::byte* wp = bytes_of(w);
  float* out = f32_of(n.dst);
  const size_t expert_bytes = static_cast<size_t>(M) * row_bytes(w.desc.dtype, K);
  const int64_t blocks = (M + kRowBlock - 1) / kRowBlock;
  tbb::parallel_for(int64_t{0}, E * blocks, [&](int64_t task) {
    const auto& pairs = by_expert[static_cast<size_t>(task / blocks)];
    if (pairs.empty()) return;
    const int64_t m0 = (task % blocks) * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
    std::vector<float> tmp;
    const float* wr = weight_rows(w.desc.dtype, wp + static_cast<size_t>(task / blocks) * expert_bytes, K, m0, m1, tmp);
    for (int64_t p : pairs) {
      const float* xr = xp + (per_slot ? p : p / k) * K;
      for (int64_t m = m0; m < m1; ++m) out[p * M + m] = dot(xr, wr + (m - m0) * K, K);
    }
  });
}

}  // namespace kiln::backend::reference
