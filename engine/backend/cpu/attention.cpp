// ATTENTION over the paged KV cache (ragged batches, causal, GQA, sliding windows, softcap, every
// cache format). A task is a block of one sequence's consecutive queries and one KV head: each key
// and value row is read once for every query head of the block that attends to it. Inside a task
// the logits run in nested tasks over key chunks and the weighted sum over slices of value columns,
// so a decode with few KV heads still uses every core; neither split changes any arithmetic.
// Each query's arithmetic (its logits, softmax and weighted sum, keys in position order) is the
// same whichever block holds it, so results do not depend on the batch. Keys go to the kernels in
// chunks (several dot products in flight, the value sum's accumulator kept in registers across
// keys); f32 / f16 / bf16 rows are read in place and widened in registers, the quantized KV
// formats widened row by row first.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "backend/reference/common.hpp"

namespace kiln::backend::simd {
namespace {

constexpr int64_t kQueryHeadsPerTask = 16;  // queries × query heads of one KV head per task

constexpr int64_t kKeyChunk = 128;   // key rows gathered per kernel call (and per nested logits task)
constexpr int64_t kValueSlice = 64;  // value columns per nested task of the weighted sum

/**
 * Pointers to the cache rows of keys [j0, j1] of a sequence's KV head, as the dot / axpy kernels
 * read them: in place (f32, f16, bf16) or widened into `wide` (the quantized KV formats).
 * Returns the kernel index (kF32, kF16, kBF16).
 */
template <class CellOf>
int gather_rows(DType t, const std::byte* cache, size_t row_bytes, int64_t hkv, int64_t head, int64_t d, int64_t j0,
                int64_t j1, const CellOf& cell_of, const void** rows, std::vector<float>& wide) {
  const int kind = t == DType::f16 ? kF16 : t == DType::bf16 ? kBF16 : kF32;
  const bool widen = t != DType::f32 && t != DType::f16 && t != DType::bf16;
  if (widen) wide.resize(static_cast<size_t>((j1 - j0 + 1) * d));
  for (int64_t j = j0; j <= j1; ++j) {
    const std::byte* row = cache + static_cast<size_t>(cell_of(j) * hkv + head) * row_bytes;
    if (!widen) {
      rows[j - j0] = row;
      continue;
    }
    float* w = wide.data() + (j - j0) * d;
    reference::row_to_f32(t, row, d, w);
    rows[j - j0] = w;
  }
  return kind;
}

struct Task {
  int32_t seq, q0, q1, head;  // queries [q0, q1) of `seq`, KV head `head`
};

}  // namespace

void run_attention(const Node& n) {
  const reference::AttentionShape a = reference::check_attention(n);
  const Kernels& k = kernels();
  const DType kt = n.src[1].desc.dtype, vt = n.src[2].desc.dtype;
  const size_t krow = row_bytes(kt, a.Dk), vrow = row_bytes(vt, a.Dv);
  const std::byte *kp = reference::bytes_of(n.src[1]), *vp = reference::bytes_of(n.src[2]);
  const float* qp = reference::f32_of(n.src[0]);
  float* out = reference::f32_of(n.dst);
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
    const reference::Seq& sq = a.seqs[static_cast<size_t>(task.seq)];
    const int32_t* blocks = a.table + static_cast<int64_t>(task.seq) * a.MB;
    const int64_t first = sq.kv_len - sq.q_len;  // position of query 0
    auto lo_of = [&](int64_t pos) { return a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : int64_t{0}; };
    const int64_t nq = task.q1 - task.q0, lo = lo_of(first + task.q0), hi = first + task.q1 - 1;
    const int64_t nkeys = hi - lo + 1, rows = nq * group;
    // rows: query i of the block, head g of the group -> row i * group + g
    std::vector<float> logits(static_cast<size_t>(rows * nkeys)), acc(static_cast<size_t>(rows * a.Dv), 0.0f),
        mx(static_cast<size_t>(rows), -INFINITY), sum(static_cast<size_t>(rows), 0.0f);
    auto cell_of = [&](int64_t j) { return static_cast<int64_t>(blocks[j / a.BS]) * a.BS + j % a.BS; };
    // Keys in chunks; query i reads keys [lo_of(pos), pos] of each chunk, in key order.
    auto for_queries = [&](int64_t c0, int64_t c1, const auto& body) {
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t pos = first + task.q0 + i, j0 = std::max(c0, lo_of(pos)), j1 = std::min(c1, pos);
        if (j0 <= j1)
          for (int64_t g = 0; g < group; ++g) body(i, i * group + g, j0, j1);
      }
    };
    // Logits, a chunk of keys per (nested) task: each logit is one dot product whoever computes it.
    const int64_t chunks = (nkeys + kKeyChunk - 1) / kKeyChunk;
    tbb::parallel_for(int64_t{0}, chunks, [&](int64_t ci) {
      const int64_t c0 = lo + ci * kKeyChunk, c1 = std::min(hi, c0 + kKeyChunk - 1);
      const void* chunk[kKeyChunk];
      std::vector<float> wide;
      const int kind = gather_rows(kt, kp, krow, a.Hkv, task.head, a.Dk, c0, c1, cell_of, chunk, wide);
      for_queries(c0, c1, [&](int64_t i, int64_t r, int64_t j0, int64_t j1) {
        const float* qr = qp + ((sq.q_start + task.q0 + i) * a.Hq + task.head * group + r % group) * a.Dk;
        float* l = logits.data() + r * nkeys + (j0 - lo);  // logits of keys j0..j1
        k.dot[kind](qr, chunk + (j0 - c0), j1 - j0 + 1, a.Dk, l);
        for (int64_t j = 0; j <= j1 - j0; ++j) {
          l[j] *= a.scale;
          if (a.cap > 0.0f) l[j] = a.cap * std::tanh(l[j] / a.cap);
        }
      });
    });
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t pos = first + task.q0 + i;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = i * group + g;
        float* l = logits.data() + r * nkeys;
        float& m = mx[static_cast<size_t>(r)];
        for (int64_t j = lo_of(pos); j <= pos; ++j) m = std::max(m, l[j - lo]);
        for (int64_t j = lo_of(pos); j <= pos; ++j) {
          l[j - lo] = std::exp(l[j - lo] - m);
          sum[static_cast<size_t>(r)] += l[j - lo];
        }
      }
    }
    // Values: columns of Dv in (nested) slices for caches read in place (each output column sums
    // its keys in key order whoever computes it); the quantized formats widen whole rows, in one.
    const bool in_place = vt == DType::f32 || vt == DType::f16 || vt == DType::bf16;
    const int64_t esize = vt == DType::f32 ? 4 : 2, slice = in_place ? kValueSlice : a.Dv;
    tbb::parallel_for(int64_t{0}, (a.Dv + slice - 1) / slice, [&](int64_t si) {
      const int64_t d0 = si * slice, dn = std::min(slice, a.Dv - d0);
      const void* chunk[kKeyChunk];
      std::vector<float> wide;
      for (int64_t c0 = lo; c0 <= hi; c0 += kKeyChunk) {
        const int64_t c1 = std::min(hi, c0 + kKeyChunk - 1);
        const int kind = gather_rows(vt, vp, vrow, a.Hkv, task.head, a.Dv, c0, c1, cell_of, chunk, wide);
        if (d0)
          for (int64_t j = 0; j <= c1 - c0; ++j) chunk[j] = static_cast<const std::byte*>(chunk[j]) + d0 * esize;
        for_queries(c0, c1, [&](int64_t, int64_t r, int64_t j0, int64_t j1) {
          k.axpy[kind](logits.data() + r * nkeys + (j0 - lo), chunk + (j0 - c0), j1 - j0 + 1,
                       acc.data() + r * a.Dv + d0, dn);
        });
      }
    });
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
