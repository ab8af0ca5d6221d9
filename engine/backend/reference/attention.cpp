// ATTENTION over a paged KV cache for a ragged batch (prefill chunks and decode alike): causal,
// GQA, optional sliding window and logit softcap. One (token, head) at a time, keys in position
// order, so a sequence's result never depends on the rest of the batch.
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {

AttentionShape check_attention(const Node& n) {
  const TensorRef &q = n.src[0], &kc = n.src[1], &vc = n.src[2], &bt = n.src[3];
  const TensorDesc &qd = q.desc, &kd = kc.desc, &vd = vc.desc;
  if (qd.dtype != DType::f32 || qd.ndim != 3 || kd.ndim != 4 || vd.ndim != 4 || bt.desc.dtype != DType::i32 ||
      bt.desc.ndim != 2)
    fail(n, "expected q f32 [N, Hq, Dk], caches [B, BS, Hkv, D], block_table i32 [S, MB]");
  AttentionShape a;
  a.N = qd.ne[0], a.Hq = qd.ne[1], a.Dk = qd.ne[2];
  a.B = kd.ne[0], a.BS = kd.ne[1], a.Hkv = kd.ne[2], a.Dv = vd.ne[3];
  if (kd.ne[3] != a.Dk || vd.ne[0] != a.B || vd.ne[1] != a.BS || vd.ne[2] != a.Hkv || a.Hkv == 0 || a.Hq % a.Hkv ||
      n.dst.desc.numel() != a.N * a.Hq * a.Dv)
    fail(n, "cache shapes do not match q (and Hq must be a multiple of Hkv)");
  a.seqs = read_seqs(n, n.src[4], a.N, -1);
  a.MB = bt.desc.ne[1];
  if (bt.desc.ne[0] != static_cast<int64_t>(a.seqs.size())) fail(n, "block_table needs one row per sequence");
  a.table = i32_of(bt);
  a.window = n.params.window;
  // Validate every block a query will read before any work starts.
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    const int64_t first_pos = a.seqs[s].kv_len - a.seqs[s].q_len;
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, first_pos - a.window + 1) : 0;
    for (int64_t blk = lo / a.BS; blk <= (a.seqs[s].kv_len - 1) / a.BS; ++blk) {
      if (blk >= a.MB) fail(n, fmt::format("sequence {} needs block {} but block_table has {} columns", s, blk, a.MB));
      const int32_t b = a.table[static_cast<int64_t>(s) * a.MB + blk];
      if (b < 0 || b >= a.B) fail(n, fmt::format("sequence {} block {} maps to {} outside [0, {})", s, blk, b, a.B));
    }
  }
  a.scale = n.params.scale != 0.0f ? n.params.scale : 1.0f / std::sqrt(static_cast<float>(a.Dk));
  a.cap = n.params.cap;
  return a;
}

void run_attention(const Node& n) {
  const AttentionShape a = check_attention(n);
  const TensorRef &q = n.src[0], &kc = n.src[1], &vc = n.src[2];
  const TensorDesc &kd = kc.desc, &vd = vc.desc;
  const int64_t N = a.N, Hq = a.Hq, Dk = a.Dk, BS = a.BS, Hkv = a.Hkv, Dv = a.Dv, MB = a.MB;
  const auto& seqs = a.seqs;
  const int32_t* table = a.table;
  const int64_t window = a.window;
  const float scale = a.scale, cap = a.cap;
  const int64_t group = Hq / Hkv;
  const size_t krow = row_bytes(kd.dtype, Dk), vrow = row_bytes(vd.dtype, Dv);
  const std::byte *kp = bytes_of(kc), *vp = bytes_of(vc);
  const float* qp = f32_of(q);
  float* out = f32_of(n.dst);
  std::fill(out, out + N * Hq * Dv, 0.0f);

  // Work items: (sequence, query index) pairs, flattened.
  std::vector<std::pair<int32_t, int32_t>> items;
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int32_t i = 0; i < seqs[s].q_len; ++i) items.emplace_back(static_cast<int32_t>(s), i);
  tbb::parallel_for(size_t{0}, items.size(), [&](size_t it) {
    const Seq& sq = seqs[static_cast<size_t>(items[it].first)];
    const int64_t t = sq.q_start + items[it].second;
    const int64_t pos = sq.kv_len - sq.q_len + items[it].second;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    const int32_t* row = table + static_cast<int64_t>(items[it].first) * MB;
    std::vector<float> logits(static_cast<size_t>(pos - lo + 1)), kf(static_cast<size_t>(Dk)),
        vf(static_cast<size_t>(Dv)), acc(static_cast<size_t>(Dv));
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      const float* qr = qp + (t * Hq + h) * Dk;
      float mx = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t cell = static_cast<int64_t>(row[j / BS]) * BS + j % BS;
        row_to_f32(kd.dtype, kp + static_cast<size_t>(cell * Hkv + hk) * krow, Dk, kf.data());
        float l = dot(qr, kf.data(), Dk) * scale;
        if (cap > 0.0f) l = cap * std::tanh(l / cap);
        logits[static_cast<size_t>(j - lo)] = l;
        mx = std::max(mx, l);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float sum = 0.0f;
      for (int64_t j = lo; j <= pos; ++j) {
        const float p = std::exp(logits[static_cast<size_t>(j - lo)] - mx);
        sum += p;
        const int64_t cell = static_cast<int64_t>(row[j / BS]) * BS + j % BS;
        row_to_f32(vd.dtype, vp + static_cast<size_t>(cell * Hkv + hk) * vrow, Dv, vf.data());
        for (int64_t d = 0; d < Dv; ++d) acc[static_cast<size_t>(d)] += p * vf[static_cast<size_t>(d)];
      }
      float* o = out + (t * Hq + h) * Dv;
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < Dv; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
    }
  });
}

}  // namespace kiln::backend::reference
