// ATTENTION over the paged KV cache (ragged batches, causal, GQA, sliding windows, softcap, every
// cache format). A task is a block of one sequence's consecutive queries and one KV head: each key
// and value row is read once for every query head of the block that attends to it.
// Each query's arithmetic (its logits, softmax and weighted sum, keys in position order) is the
// same whichever block holds it, so results do not depend on the batch. f32 / f16 / bf16 rows are
// read in place and widened in registers; the quantized KV formats are widened row by row first.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/common.hpp"
#include "backend/simd/ops.hpp"

namespace kiln::backend::simd {
namespace {

constexpr int64_t kQueryHeadsPerTask = 16;  // queries × query heads of one KV head per task

/** A cache row as the dot / axpy kernels read it: in place (f32, f16, bf16) or widened into
    `tmp` (the quantized KV formats). */
struct Row {
  const void* p;
  int kind;  // kF32, kF16 or kBF16
};
Row cache_row(DType t, const std::byte* row, int64_t d, float* tmp) {
  switch (t) {
    case DType::f32:
      return {row, kF32};
    case DType::f16:
      return {row, kF16};
    case DType::bf16:
      return {row, kBF16};
    default:
      cpu::row_to_f32(t, row, d, tmp);
      return {tmp, kF32};
  }
}

struct Task {
  int32_t seq, q0, q1, head;  // queries [q0, q1) of `seq`, KV head `head`
};

}  // namespace

void run_attention(const Node& n) {
  const cpu::AttentionShape a = cpu::check_attention(n);
  const Kernels& k = kernels();
  const DType kt = n.src[1].desc.dtype, vt = n.src[2].desc.dtype;
  const size_t krow = row_bytes(kt, a.Dk), vrow = row_bytes(vt, a.Dv);
  const std::byte *kp = cpu::bytes_of(n.src[1]), *vp = cpu::bytes_of(n.src[2]);
  const float* qp = cpu::f32_of(n.src[0]);
  float* out = cpu::f32_of(n.dst);
  std::fill(out, out + a.N * a.Hq * a.Dv, 0.0f);  // rows no sequence covers, as the reference
  const int64_t group = a.Hq / a.Hkv, qblock = std::max<int64_t>(1, kQueryHeadsPerTask / group);

  std::vector<Task> tasks;
  for (size_t s = 0; s < a.seqs.size(); ++s)
    for (int32_t q0 = 0; q0 < a.seqs[s].q_len; q0 += static_cast<int32_t>(qblock))
      for (int32_t h = 0; h < a.Hkv; ++h)
        tasks.push_back(
            {static_cast<int32_t>(s), q0, static_cast<int32_t>(std::min<int64_t>(a.seqs[s].q_len, q0 + qblock)), h});

  tbb::parallel_for(size_t{0}, tasks.size(), [&](size_t ti) {
    const Task& task = tasks[ti];
    const cpu::Seq& sq = a.seqs[static_cast<size_t>(task.seq)];
    const int32_t* blocks = a.table + static_cast<int64_t>(task.seq) * a.MB;
    const int64_t first = sq.kv_len - sq.q_len;  // position of query 0
    auto lo_of = [&](int64_t pos) { return a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : int64_t{0}; };
    const int64_t nq = task.q1 - task.q0, lo = lo_of(first + task.q0), hi = first + task.q1 - 1;
    const int64_t nkeys = hi - lo + 1, rows = nq * group;
    // rows: query i of the block, head g of the group -> row i * group + g
    std::vector<float> logits(static_cast<size_t>(rows * nkeys)), acc(static_cast<size_t>(rows * a.Dv), 0.0f),
        mx(static_cast<size_t>(rows), -INFINITY), sum(static_cast<size_t>(rows), 0.0f),
        tmp(static_cast<size_t>(std::max(a.Dk, a.Dv)));
    auto cell_of = [&](int64_t j) { return static_cast<int64_t>(blocks[j / a.BS]) * a.BS + j % a.BS; };
    for (int64_t j = lo; j <= hi; ++j) {
      const Row kr = cache_row(kt, kp + static_cast<size_t>(cell_of(j) * a.Hkv + task.head) * krow, a.Dk, tmp.data());
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t pos = first + task.q0 + i;
        if (j > pos || j < lo_of(pos)) continue;
        const int64_t t = sq.q_start + task.q0 + i;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = i * group + g;
          float l = k.dot[kr.kind](qp + (t * a.Hq + task.head * group + g) * a.Dk, kr.p, a.Dk) * a.scale;
          if (a.cap > 0.0f) l = a.cap * std::tanh(l / a.cap);
          logits[static_cast<size_t>(r * nkeys + j - lo)] = l;
          mx[static_cast<size_t>(r)] = std::max(mx[static_cast<size_t>(r)], l);
        }
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t pos = first + task.q0 + i;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = i * group + g;
        float* l = logits.data() + r * nkeys;
        for (int64_t j = lo_of(pos); j <= pos; ++j) {
          l[j - lo] = std::exp(l[j - lo] - mx[static_cast<size_t>(r)]);
          sum[static_cast<size_t>(r)] += l[j - lo];
        }
      }
    }
    for (int64_t j = lo; j <= hi; ++j) {
      const Row vr = cache_row(vt, vp + static_cast<size_t>(cell_of(j) * a.Hkv + task.head) * vrow, a.Dv, tmp.data());
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t pos = first + task.q0 + i;
        if (j > pos || j < lo_of(pos)) continue;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = i * group + g;
          k.axpy[vr.kind](logits[static_cast<size_t>(r * nkeys + j - lo)], vr.p, acc.data() + r * a.Dv, a.Dv);
        }
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t t = sq.q_start + task.q0 + i;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = i * group + g;
        const float inv = 1.0f / sum[static_cast<size_t>(r)];
        float* o = out + (t * a.Hq + task.head * group + g) * a.Dv;
        for (int64_t d = 0; d < a.Dv; ++d) o[d] = acc[static_cast<size_t>(r * a.Dv + d)] * inv;
      }
    }
  });
}

}  // namespace kiln::backend::simd
