// MATMUL (x · wᵀ) and MOE_MATMUL on the ISA kernels. Work is split into (weight rows × activation
// rows) blocks run by TBB; a block's weight rows stay in cache while its activation rows stream by.
// The split only decides who computes an element, never how (kernels.hpp), so results do not
// depend on the batch. Weights are read where they lie (in place in the mapped file).
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "backend/reference/common.hpp"
#include "backend/reference/reference_backend.hpp"

namespace kiln::backend::simd {
namespace {

constexpr int64_t kColBlock = 32;         // weight rows per task
constexpr int64_t kRowBlock = 32;         // activation rows per task
constexpr int64_t kSerialMacs = 1 << 15;  // below this a matmul runs on the calling thread

int weight_type(DType t) {
  switch (t) {
    case DType::f32:
      return kF32;
    case DType::f16:
      return kF16;
    case DType::bf16:
      return kBF16;
    case DType::q8_0:
      return kQ8_0;
    case DType::q4_0:
      return kQ4_0;
    case DType::q4_1:
      return kQ4_1;
    case DType::q5_0:
      return kQ5_0;
    case DType::q5_1:
      return kQ5_1;
    case DType::q2_k:
      return kQ2_K;
    case DType::q3_k:
      return kQ3_K;
    case DType::q4_k:
      return kQ4_K;
    case DType::q5_k:
      return kQ5_K;
    case DType::q6_k:
      return kQ6_K;
    case DType::iq4_nl:
      return kIQ4_NL;
    case DType::iq4_xs:
      return kIQ4_XS;
    default:
      return -1;
  }
}

/** Runs `tile` over rows × cols in blocks, in parallel when the work is worth it. */
void run_blocked(void (*fn)(const MatmulTile&), const MatmulTile& all) {
  const int64_t cb = (all.cols + kColBlock - 1) / kColBlock, rb = (all.rows + kRowBlock - 1) / kRowBlock;
  auto block = [&](int64_t task) {
    MatmulTile t = all;
    const int64_t c0 = (task / rb) * kColBlock, r0 = (task % rb) * kRowBlock;
    t.cols = std::min(kColBlock, all.cols - c0);
    t.rows = std::min(kRowBlock, all.rows - r0);
    t.x = all.x + r0 * all.x_stride;
    if (all.xq) t.xq = all.xq + static_cast<size_t>(r0) * all.xq_stride;
    t.w = all.w + static_cast<size_t>(c0) * all.w_stride;
    t.out = all.out + r0 * all.out_stride + c0;
    fn(t);
  };
  if (all.rows * all.cols * all.K < kSerialMacs) {
    for (int64_t task = 0; task < cb * rb; ++task) block(task);
    return;
  }
  tbb::parallel_for(int64_t{0}, cb * rb, block);
}

/**
 * For the block formats: the activation rows as 8-bit blocks (kernels.hpp), into `buf`; sets
 * t.xq. Rows are quantized in parallel when there are many.
 */
void quantize_activations(int wt, MatmulTile& t, std::unique_ptr<unsigned char[]>& buf) {
  if (wt < kQ8_0) return;
  t.xq_stride = static_cast<size_t>(t.K / 32 * kXqBlock);
  buf = std::make_unique_for_overwrite<unsigned char[]>(static_cast<size_t>(t.rows) * t.xq_stride);
  t.xq = buf.get();
  const auto q = kernels().quantize_rows;
  auto rows = [&](int64_t r0, int64_t r1) {
    q(t.x + r0 * t.x_stride, t.x_stride, r1 - r0, t.K, buf.get() + static_cast<size_t>(r0) * t.xq_stride, t.xq_stride);
  };
  if (t.rows * t.K < kSerialMacs) return rows(0, t.rows);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, t.rows, 8), [&](const auto& r) { rows(r.begin(), r.end()); });
}

}  // namespace

void run_matmul(const Node& n) {
  const reference::MatmulShape shape =
      reference::check_matmul(n);  // (plain names: clang 14 lambdas cannot capture bindings)
  const int64_t R = shape.R, K = shape.K, M = shape.M;
  const TensorRef &x = n.src[0], &w = n.src[1];
  const int wt = weight_type(w.desc.dtype);
  if (wt < 0 || K % quant_block(w.desc.dtype)) return reference::run_node(n);
  MatmulTile t{};
  t.x = reference::f32_of(x);
  t.x_stride = K;
  t.w = reinterpret_cast<const unsigned char*>(reference::bytes_of(w));
  t.w_stride = row_bytes(w.desc.dtype, K);
  t.out = reference::f32_of(n.dst);
  t.out_stride = M;
  t.K = K;
  t.rows = R;
  t.cols = M;
  std::unique_ptr<unsigned char[]> xq;
  quantize_activations(wt, t, xq);
  run_blocked(kernels().matmul[wt], t);
}

void run_moe_matmul(const Node& n) {
  const reference::MoeShape s = reference::check_moe_matmul(n);
  const TensorRef &x = n.src[0], &w = n.src[1];
  const int64_t E = s.E, M = s.M, K = s.K, N = s.N, k = s.k;
  const int wt = weight_type(w.desc.dtype);
  if (wt < 0 || K % quant_block(w.desc.dtype)) return reference::run_node(n);
  const int32_t* id = s.ids;
  // Pairs (n, j) grouped by expert, each expert's activation rows gathered once into one matrix
  // (xs, expert after expert) so a task runs the tiles over rows × a block of that expert's weights.
  std::vector<int64_t> count(static_cast<size_t>(E) + 1, 0);
  for (int64_t p = 0; p < N * k; ++p) ++count[static_cast<size_t>(id[p]) + 1];
  for (int64_t e = 0; e < E; ++e) count[static_cast<size_t>(e) + 1] += count[static_cast<size_t>(e)];
  std::vector<int64_t> pair_at(static_cast<size_t>(N * k)), fill(count.begin(), count.end() - 1);
  for (int64_t p = 0; p < N * k; ++p) pair_at[static_cast<size_t>(fill[static_cast<size_t>(id[p])]++)] = p;
  const float* xp = reference::f32_of(x);
  auto xs = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(N * k * K));
  auto ys = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(N * k * M));
  for (int64_t i = 0; i < N * k; ++i) {
    const int64_t p = pair_at[static_cast<size_t>(i)];
    const float* xr = xp + (s.per_slot ? p : p / k) * K;
    std::copy(xr, xr + K, xs.get() + i * K);
  }
  MatmulTile all{};  // every gathered row, for the 8-bit activations of the block formats
  all.x = xs.get();
  all.x_stride = K;
  all.K = K;
  all.rows = N * k;
  std::unique_ptr<unsigned char[]> xq;
  quantize_activations(wt, all, xq);
  const auto* wp = reinterpret_cast<const unsigned char*>(reference::bytes_of(w));
  const size_t rb = row_bytes(w.desc.dtype, K);
  const auto fn = kernels().matmul[wt];
  std::vector<MatmulTile> experts;  // one tile per expert with pairs: its rows × all its weights
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = count[static_cast<size_t>(e)], rows = count[static_cast<size_t>(e) + 1] - r0;
    if (!rows) continue;
    MatmulTile t{};
    t.x = xs.get() + r0 * K;
    t.x_stride = K;
    t.w = wp + static_cast<size_t>(e) * static_cast<size_t>(M) * rb;
    t.w_stride = rb;
    t.out = ys.get() + r0 * M;
    t.out_stride = M;
    t.K = K;
    t.rows = rows;
    t.cols = M;
    if (all.xq) t.xq = all.xq + static_cast<size_t>(r0) * all.xq_stride, t.xq_stride = all.xq_stride;
    experts.push_back(t);
  }
  const bool parallel = N * k * M * K >= kSerialMacs;
  if (parallel)
    tbb::parallel_for(size_t{0}, experts.size(), [&](size_t e) { run_blocked(fn, experts[e]); });
  else
    for (const MatmulTile& t : experts) run_blocked(fn, t);
  float* out = reference::f32_of(n.dst);
  for (int64_t i = 0; i < N * k; ++i)
    std::copy(ys.get() + i * M, ys.get() + (i + 1) * M, out + pair_at[static_cast<size_t>(i)] * M);
}

}  // namespace kiln::backend::simd
