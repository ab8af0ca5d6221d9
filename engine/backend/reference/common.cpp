// Row conversions for the kernels (core/convert.hpp) and seqs validation.
#include "backend/reference/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/ops.hpp"
#include "core/convert.hpp"

namespace kiln::backend::reference {

void row_to_f32(DType t, const std::byte* src, int64_t n, float* dst) {
  if (!to_f32(t, src, n, dst)) throw_error("[backend cpu] cannot read {} values as f32", dtype_name(t));
}

void row_from_f32(DType t, const float* src, int64_t n, std::byte* dst) {
  if (!from_f32(t, src, n, dst)) throw_error("[backend cpu] cannot store f32 values as {}", dtype_name(t));
}

void fail(const Node& node, const std::string& what) {
  throw BackendError(BackendError::Kind::invalid,
                     fmt::format("[backend cpu] {}: {} (a graph-building bug: the graph builder should have "
                                 "refused this)",
                                 describe(node), what));
}

std::vector<Seq> read_seqs(const Node& node, const TensorRef& seqs, int64_t n_tokens, int64_t n_slots) {
  if (seqs.desc.dtype != DType::i32 || seqs.desc.ndim != 2 || seqs.desc.ne[1] != kSeqColumns)
    fail(node, "seqs must be i32 [S, 4], got " + seqs.desc.str());
  const int32_t* p = i32_of(seqs);
  std::vector<Seq> out(static_cast<size_t>(seqs.desc.ne[0]));
  std::set<int32_t> slots;
  for (size_t s = 0; s < out.size(); ++s) {
    Seq q{p[4 * s], p[4 * s + 1], p[4 * s + 2], p[4 * s + 3]};
    if (q.q_start < 0 || q.q_len < 1 || q.q_start + static_cast<int64_t>(q.q_len) > n_tokens || q.kv_len < q.q_len)
      fail(node, fmt::format("seqs row {} = {{q_start {}, q_len {}, kv_len {}}} does not fit {} tokens", s, q.q_start,
                             q.q_len, q.kv_len, n_tokens));
    if (n_slots >= 0) {
      if (q.slot < 0 || q.slot >= n_slots)
        fail(node, fmt::format("seqs row {}: state slot {} outside [0, {})", s, q.slot, n_slots));
      if (!slots.insert(q.slot).second) fail(node, fmt::format("seqs row {}: state slot {} used twice", s, q.slot));
    }
    out[s] = q;
  }
  // Rows of different sequences must not overlap (kernels write them in parallel).
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (const Seq& q : out) ranges.emplace_back(q.q_start, q.q_start + q.q_len);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      fail(node, fmt::format("sequences overlap: rows [{}, {}) and [{}, {})", ranges[i - 1].first, ranges[i - 1].second,
                             ranges[i].first, ranges[i].second));
  return out;
}

}  // namespace kiln::backend::reference
