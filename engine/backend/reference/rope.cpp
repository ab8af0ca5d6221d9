// ROPE with explicit per-token positions: NEOX (rotate-half) or NORMAL (adjacent pairs), rotated
// span n_dims, and n_freq pairs with a non-zero frequency (Gemma 4 proportional RoPE).
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {

void run_rope(const Node& n) {
  const TensorDesc &x = n.src[0].desc, &pos = n.src[1].desc;
  if (x.dtype != DType::f32 || x.ndim != 3 || pos.dtype != DType::i32 || pos.numel() != x.ne[0] ||
      !n.dst.desc.same_shape(x))
    fail(n, "expected x f32 [N, H, D], positions i32 [N]");
  const int64_t N = x.ne[0], H = x.ne[1], D = x.ne[2];
  const int64_t n_dims = n.params.n_dims ? n.params.n_dims : D;
  if (n_dims % 2 || n_dims > D) fail(n, "n_dims must be even and at most the head dim");
  const int64_t half = n_dims / 2;
  const int64_t n_freq = n.params.n_freq ? std::min<int64_t>(n.params.n_freq, half) : half;
  // inv_freq in fp32 as HF computes it: 1 / theta^(2i / n_dims).
  std::vector<float> inv_freq(static_cast<size_t>(half), 0.0f);
  for (int64_t i = 0; i < n_freq; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(static_cast<double>(n.params.theta), static_cast<double>(2 * i) / static_cast<double>(n_dims)));
  const bool neox = n.params.mode == KILN_ROPE_NEOX;
  const float* xp = f32_of(n.src[0]);
  const int32_t* pp = i32_of(n.src[1]);
  float* yp = f32_of(n.dst);
  tbb::parallel_for(int64_t{0}, N, [&](int64_t t) {
    const float p = static_cast<float>(pp[t]);
    for (int64_t h = 0; h < H; ++h) {
      const float* xr = xp + (t * H + h) * D;
      float* yr = yp + (t * H + h) * D;
      for (int64_t d = 0; d < D; ++d) yr[d] = xr[d];
      for (int64_t i = 0; i < n_freq; ++i) {
        const float angle = p * inv_freq[static_cast<size_t>(i)];
        const float c = std::cos(angle), s = std::sin(angle);
        const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        yr[a] = xr[a] * c - xr[b] * s;
        yr[b] = xr[b] * c + xr[a] * s;
      }
    }
  });
}

}  // namespace kiln::backend::reference
