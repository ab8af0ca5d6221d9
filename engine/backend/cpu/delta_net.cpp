// GATED_DELTA in the recurrent form, one token at a time per (sequence, value head), each token one
// kernel call (kernels.hpp delta_step: two vector passes over the head's state). A prefill runs
// the same steps as decoding, so a sequence resumed from a snapshot at any position gives the bits
// of an uninterrupted run, and a sequence's result never depends on the batch. The chunked form,
// when a graph asks for it by name (KILN_DELTA_CHUNKED), runs the reference kernel.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "backend/reference/common.hpp"
#include "backend/reference/reference_backend.hpp"

namespace kiln::backend::simd {

void run_gated_delta(const Node& n) {
  if (n.params.mode == KILN_DELTA_CHUNKED) return reference::run_node(n);
  const reference::DeltaShape d = reference::check_gated_delta(n);
  const float *qp = reference::f32_of(n.src[0]), *kp = reference::f32_of(n.src[1]), *vp = reference::f32_of(n.src[2]),
              *gp = reference::f32_of(n.src[3]), *bp = reference::f32_of(n.src[4]);
  float* sp = reference::f32_of(n.src[5]);
  float* op = reference::f32_of(n.dst);
  std::fill(op, op + d.N * d.Hv * d.Dv, 0.0f);  // rows no sequence covers, as the reference
  const auto step = kernels().delta_step;
  const int64_t R = d.Hv / d.Hk;
  tbb::parallel_for(int64_t{0}, static_cast<int64_t>(d.seqs.size()) * d.Hv, [&](int64_t task) {
    const reference::Seq& s = d.seqs[static_cast<size_t>(task / d.Hv)];
    const int64_t h = task % d.Hv, hk = h / R;
    float* S = sp + (static_cast<int64_t>(s.slot) * d.Hv + h) * d.Dk * d.Dv;
    if (s.kv_len == s.q_len) std::fill(S, S + d.Dk * d.Dv, 0.0f);  // first step: the slot's old state is not ours
    std::vector<float> u(static_cast<size_t>(d.Dv));
    for (int64_t i = 0; i < s.q_len; ++i) {
      const int64_t t = s.q_start + i;
      step(S, d.Dk, d.Dv, std::exp(gp[t * d.Hv + h]), bp[t * d.Hv + h], kp + (t * d.Hk + hk) * d.Dk,
           vp + (t * d.Hv + h) * d.Dv, qp + (t * d.Hk + hk) * d.Dk, u.data(), op + (t * d.Hv + h) * d.Dv);
    }
  });
}

}  // namespace kiln::backend::simd
