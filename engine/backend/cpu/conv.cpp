// CONV1D_CAUSAL across channels: each output row is one kernel call over the K input rows it reads
// (the sequence's carried state rows, or zeros at its first step, then its new rows), with the
// taps' weights transposed once per call so both operands run along the channels. Rows are
// independent, so a sequence's tokens run in parallel; the state is rewritten after all of them
// have read it.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "backend/reference/common.hpp"

namespace kiln::backend::simd {

void run_conv1d(const Node& n) {
  const reference::ConvShape d = reference::check_conv1d(n);
  const int64_t C = d.C, K = d.K;
  const float *xp = reference::f32_of(n.src[0]), *wp = reference::f32_of(n.src[1]);
  float* sp = reference::f32_of(n.src[2]);
  float* yp = reference::f32_of(n.dst);
  std::fill(yp, yp + d.N * C, 0.0f);  // rows no sequence covers, as the reference
  std::vector<float> wt(static_cast<size_t>(K * C)), zeros(static_cast<size_t>(C), 0.0f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) wt[static_cast<size_t>(j * C + c)] = wp[c * K + j];
  // Input row i of sequence s: state row i (zeros when fresh) for i < K-1, else token i - (K-1).
  auto input = [&](const reference::Seq& s, int64_t i) -> const float* {
    if (i >= K - 1) return xp + (s.q_start + i - (K - 1)) * C;
    return s.kv_len == s.q_len ? zeros.data() : sp + (static_cast<int64_t>(s.slot) * (K - 1) + i) * C;
  };
  std::vector<std::pair<size_t, int64_t>> rows;  // (sequence, token)
  for (size_t s = 0; s < d.seqs.size(); ++s)
    for (int64_t t = 0; t < d.seqs[s].q_len; ++t) rows.emplace_back(s, t);
  const auto conv = kernels().conv_row;
  tbb::parallel_for(size_t{0}, rows.size(), [&](size_t r) {
    const reference::Seq& s = d.seqs[rows[r].first];
    const int64_t t = rows[r].second;
    std::vector<const float*> in(static_cast<size_t>(K));
    for (int64_t j = 0; j < K; ++j) in[static_cast<size_t>(j)] = input(s, t + j);
    conv(in.data(), wt.data(), K, C, yp + (s.q_start + t) * C);
  });
  // The new state: the last K-1 input rows, which may include old state rows (short steps).
  std::vector<float> keep(static_cast<size_t>((K - 1) * C));
  for (const reference::Seq& s : d.seqs) {
    for (int64_t j = 0; j < K - 1; ++j) {
      const float* src = input(s, s.q_len + j);
      std::copy(src, src + C, keep.begin() + j * C);
    }
    std::copy(keep.begin(), keep.end(), sp + static_cast<int64_t>(s.slot) * (K - 1) * C);
  }
}

}  // namespace kiln::backend::simd
