// Row-wise ops over the last dimension: RMS_NORM (weight, 1+weight, none, gated), L2_NORM, SOFTMAX.
// Each row's reduction is sum_squares()/a sequential loop: the order depends only on D.
#include <tbb/parallel_for.h>

#include <cmath>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {
namespace {

template <class F>
void for_rows(const Node& n, F f) {
  const TensorDesc& x = n.src[0].desc;
  if (x.dtype != DType::f32 || !n.dst.desc.same_shape(x)) fail(n, "expected f32 [..., D] -> same shape");
  const int64_t D = x.last();
  const float* xp = f32_of(n.src[0]);
  float* yp = f32_of(n.dst);
  tbb::parallel_for(int64_t{0}, x.rows(), [&](int64_t r) { f(r, xp + r * D, yp + r * D, D); });
}

}  // namespace

void run_rms_norm(const Node& n) {
  const int mode = n.params.mode;
  if (mode < KILN_NORM_WEIGHT || mode > KILN_NORM_GATED) fail(n, "unknown RMS_NORM mode");
  const int64_t D = n.src[0].desc.last();
  const bool has_w = mode != KILN_NORM_NONE;
  if (has_w && (n.n_src < 2 || n.src[1].desc.numel() != D || n.src[1].desc.dtype != DType::f32))
    fail(n, "the weight must be f32 [D]");
  if (mode == KILN_NORM_GATED && (n.n_src < 3 || !n.src[2].desc.same_shape(n.src[0].desc)))
    fail(n, "GATED needs z with the shape of x");
  const float* w = has_w ? f32_of(n.src[1]) : nullptr;
  const float* z = mode == KILN_NORM_GATED ? f32_of(n.src[2]) : nullptr;
  const float eps = n.params.eps;
  for_rows(n, [&](int64_t r, const float* x, float* y, int64_t d) {
    const float inv = 1.0f / std::sqrt(sum_squares(x, d) / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      const float xn = x[i] * inv;
      switch (mode) {
        case KILN_NORM_WEIGHT:
          y[i] = xn * w[i];
          break;
        case KILN_NORM_ONE_PLUS:
          y[i] = xn * (1.0f + w[i]);
          break;
        case KILN_NORM_NONE:
          y[i] = xn;
          break;
        default: {
          const float g = z[r * d + i];
          y[i] = xn * w[i] * (g / (1.0f + std::exp(-g)));
        }
      }
    }
  });
}

void run_l2_norm(const Node& n) {
  const float eps = n.params.eps;
  for_rows(n, [&](int64_t, const float* x, float* y, int64_t d) {
    const float inv = 1.0f / std::sqrt(sum_squares(x, d) + eps);
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv;
  });
}

void run_softmax(const Node& n) {
  const float scale = n.params.scale == 0.0f ? 1.0f : n.params.scale;
  for_rows(n, [&](int64_t, const float* x, float* y, int64_t d) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < d; ++i) mx = std::max(mx, x[i] * scale);
    float sum = 0.0f;
    for (int64_t i = 0; i < d; ++i) sum += (y[i] = std::exp(x[i] * scale - mx));
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < d; ++i) y[i] *= inv;
  });
}

}  // namespace kiln::backend::reference
