// CONV1D_CAUSAL: depthwise causal convolution over each sequence's tokens, prefixed by the K−1
// inputs carried in its state slot (zeros for a sequence at its first step, kv_len == q_len: a
// slot is reused without being cleared); the state is updated in place to the last K−1 inputs.
#include <tbb/parallel_for.h>

#include <vector>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {

ConvShape check_conv1d(const Node& n) {
  const TensorDesc &x = n.src[0].desc, &w = n.src[1].desc, &st = n.src[2].desc;
  if (x.dtype != DType::f32 || x.ndim != 2 || w.dtype != DType::f32 || w.ndim != 2 || st.dtype != DType::f32 ||
      st.ndim != 3 || !n.dst.desc.same_shape(x))
    fail(n, "expected x f32 [N, C], w f32 [C, K], state f32 [slots, K-1, C]");
  ConvShape d;
  d.N = x.ne[0], d.C = x.ne[1], d.K = w.ne[1];
  if (w.ne[0] != d.C || st.ne[1] != d.K - 1 || st.ne[2] != d.C || d.K < 1)
    fail(n, "w / state do not match x's channels and K");
  d.seqs = read_seqs(n, n.src[3], d.N, st.ne[0]);
  return d;
}

void run_conv1d(const Node& n) {
  const ConvShape d = check_conv1d(n);
  const int64_t N = d.N, C = d.C, K = d.K;
  const auto& seqs = d.seqs;
  const float *xp = f32_of(n.src[0]), *wp = f32_of(n.src[1]);
  float* sp = f32_of(n.src[2]);
  float* yp = f32_of(n.dst);
  std::fill(yp, yp + N * C, 0.0f);
  constexpr int64_t kBlock = 64;
  const int64_t cblocks = (C + kBlock - 1) / kBlock;
  tbb::parallel_for(int64_t{0}, static_cast<int64_t>(seqs.size()) * cblocks, [&](int64_t task) {
    const Seq& s = seqs[static_cast<size_t>(task / cblocks)];
    const int64_t c0 = (task % cblocks) * kBlock, c1 = std::min(C, c0 + kBlock);
    float* state = sp + static_cast<int64_t>(s.slot) * (K - 1) * C;
    std::vector<float> in(static_cast<size_t>(K - 1 + s.q_len));
    const bool fresh = s.kv_len == s.q_len;
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t j = 0; j < K - 1; ++j) in[static_cast<size_t>(j)] = fresh ? 0.0f : state[j * C + c];
      for (int64_t t = 0; t < s.q_len; ++t) in[static_cast<size_t>(K - 1 + t)] = xp[(s.q_start + t) * C + c];
      const float* wc = wp + c * K;
      for (int64_t t = 0; t < s.q_len; ++t) {
        float acc = 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += wc[j] * in[static_cast<size_t>(t + j)];
        yp[(s.q_start + t) * C + c] = acc;
      }
      for (int64_t j = 0; j < K - 1; ++j) state[j * C + c] = in[static_cast<size_t>(s.q_len + j)];
    }
  });
}

}  // namespace kiln::backend::reference
