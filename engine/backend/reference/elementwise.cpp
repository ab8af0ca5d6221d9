// Elementwise ops: ADD / MUL with numpy broadcasting of src1, and the unary activations.
#include <tbb/parallel_for.h>

#include <cmath>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {

void run_binary(const Node& n) {
  const TensorDesc &a = n.src[0].desc, &b = n.src[1].desc;
  if (a.dtype != DType::f32 || b.dtype != DType::f32 || b.ndim > a.ndim || !n.dst.desc.same_shape(a))
    fail(n, "expected f32 sources with src1 broadcastable to src0");
  // Strides of b aligned to a's dims (0 where b broadcasts).
  std::array<int64_t, kMaxDims> bstride{};
  int64_t s = 1;
  for (int i = static_cast<int>(a.ndim) - 1, j = static_cast<int>(b.ndim) - 1; i >= 0; --i, --j) {
    const int64_t bd = j >= 0 ? b.ne[static_cast<size_t>(j)] : 1;
    if (bd != 1 && bd != a.ne[static_cast<size_t>(i)]) fail(n, "src1 does not broadcast to src0");
    bstride[static_cast<size_t>(i)] = bd == 1 ? 0 : s;
    s *= bd;
  }
  const float *pa = f32_of(n.src[0]), *pb = f32_of(n.src[1]);
  float* out = f32_of(n.dst);
  const bool add = n.op == KILN_OP_ADD;
  const int64_t last = a.last(), rows = a.rows();
  const int64_t bs_last = bstride[a.ndim - 1];
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    // Offset of this row in b: decompose r over a's leading dims.
    int64_t boff = 0, rem = r;
    for (int i = static_cast<int>(a.ndim) - 2; i >= 0; --i) {
      const int64_t d = a.ne[static_cast<size_t>(i)];
      boff += (rem % d) * bstride[static_cast<size_t>(i)];
      rem /= d;
    }
    const float* ar = pa + r * last;
    float* o = out + r * last;
    for (int64_t c = 0; c < last; ++c) {
      const float bv = pb[boff + c * bs_last];
      o[c] = add ? ar[c] + bv : ar[c] * bv;
    }
  });
}

void run_unary(const Node& n) {
  const TensorDesc& a = n.src[0].desc;
  if (a.dtype != DType::f32 || !n.dst.desc.same_shape(a)) fail(n, "expected f32 [...] -> same shape");
  const float* x = f32_of(n.src[0]);
  float* y = f32_of(n.dst);
  const kiln_op_params& p = n.params;
  const int64_t total = a.numel();
  auto apply = [&](auto f) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, total, 4096), [&](const tbb::blocked_range<int64_t>& r) {
      for (int64_t i = r.begin(); i < r.end(); ++i) y[i] = f(x[i]);
    });
  };
  switch (n.op) {
    case KILN_OP_SCALE:
      return apply([s = p.scale, b = p.bias](float v) { return v * s + b; });
    case KILN_OP_SILU:
      return apply([](float v) { return v / (1.0f + std::exp(-v)); });
    case KILN_OP_SIGMOID:
      return apply([](float v) { return 1.0f / (1.0f + std::exp(-v)); });
    case KILN_OP_GELU_TANH:
      return apply([](float v) {
        constexpr float k = 0.7978845608028654f;  // √(2/π)
        return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
      });
    case KILN_OP_SOFTPLUS:
      return apply([](float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); });
    case KILN_OP_SOFTCAP:
      return apply([c = p.cap](float v) { return c * std::tanh(v / c); });
    case KILN_OP_EXP:
      return apply([](float v) { return std::exp(v); });
    default:
      fail(n, "not a unary op");
  }
}

}  // namespace kiln::backend::reference
