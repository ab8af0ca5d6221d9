// Data movement: GET_ROWS (embedding gather, dequantizing), SET_ROWS (KV-cache writes, converting),
// SLICE and CONCAT (copies along one axis).
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {
namespace {

/** Bytes and elements of one slice along axis 0 of `d`. */
struct Row0 {
  int64_t elems;
  size_t bytes;
};
Row0 row0(const TensorDesc& d) {
  const int64_t elems = d.ne[0] ? d.numel() / d.ne[0] : 0;
  return {elems, static_cast<size_t>(d.last() ? elems / d.last() : 0) * row_bytes(d.dtype, d.last())};
}

int norm_axis(const Node& n, int axis, uint32_t ndim) {
  const int a = axis < 0 ? axis + static_cast<int>(ndim) : axis;
  if (a < 0 || a >= static_cast<int>(ndim)) fail(n, fmt::format("axis {} outside a {}-d tensor", axis, ndim));
  return a;
}

}  // namespace

void run_get_rows(const Node& n) {
  const TensorRef &table = n.src[0], &ids = n.src[1];
  const Row0 r = row0(table.desc);
  if (n.dst.desc.dtype != DType::f32 || n.dst.desc.numel() != ids.desc.numel() * r.elems)
    fail(n, "result must be f32 [N, row of the table]");
  const int32_t* id = i32_of(ids);
  const int64_t rows = table.desc.ne[0];
  for (int64_t i = 0; i < ids.desc.numel(); ++i)
    if (id[i] < 0 || id[i] >= rows) fail(n, fmt::format("id {} at index {} outside [0, {})", id[i], i, rows));
  const std::byte* src = bytes_of(table);
  float* dst = f32_of(n.dst);
  tbb::parallel_for(int64_t{0}, ids.desc.numel(), [&](int64_t i) {
    row_to_f32(table.desc.dtype, src + static_cast<size_t>(id[i]) * r.bytes, r.elems, dst + i * r.elems);
  });
}

void run_set_rows(const Node& n) {
  const TensorRef &cache = n.src[0], &rows = n.src[1], &slots = n.src[2];
  const int64_t N = slots.desc.numel();
  const int64_t E = N ? rows.desc.numel() / N : 0;
  if (rows.desc.dtype != DType::f32 || rows.desc.numel() != N * E) fail(n, "rows must be f32 [N, ...]");
  if (E == 0 || cache.desc.numel() % E) fail(n, "cache rows must have the size of one source row");
  const int64_t R = cache.desc.numel() / E;
  const int32_t* slot = i32_of(slots);
  for (int64_t i = 0; i < N; ++i)
    if (slot[i] < -1 || slot[i] >= R) fail(n, fmt::format("slot {} at index {} outside [0, {})", slot[i], i, R));
  // The KV formats quantize each last-dim row (one head's keys or values) on its own.
  const DType t = cache.desc.dtype;
  const int64_t D = is_kv_quantized(t) ? cache.desc.last() : E;
  if (D <= 0 || E % D) fail(n, "rows must be whole rows of the destination's last dim");
  const size_t db = row_bytes(t, D), rb = db * static_cast<size_t>(E / D);
  const float* src = f32_of(rows);
  std::byte* dst = bytes_of(cache);
  tbb::parallel_for(int64_t{0}, N, [&](int64_t i) {
    if (slot[i] < 0) return;
    for (int64_t h = 0; h < E / D; ++h)
      row_from_f32(t, src + i * E + h * D, D, dst + static_cast<size_t>(slot[i]) * rb + static_cast<size_t>(h) * db);
  });
}

void run_slice(const Node& n) {
  const TensorDesc& s = n.src[0].desc;
  if (is_packed(s.dtype)) fail(n, "cannot slice quantized tensors");
  const int axis = norm_axis(n, n.params.axis, s.ndim);
  const int64_t dim = s.ne[static_cast<size_t>(axis)];
  const int64_t begin = n.params.begin, end = n.params.end ? n.params.end : dim;
  if (begin < 0 || end > dim || begin >= end) fail(n, fmt::format("range [{}, {}) outside [0, {})", begin, end, dim));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s.ne[static_cast<size_t>(i)];
  for (uint32_t i = static_cast<uint32_t>(axis) + 1; i < s.ndim; ++i) inner *= s.ne[i];
  const size_t es = row_bytes(s.dtype, 1);
  const std::byte* src = bytes_of(n.src[0]);
  std::byte* dst = bytes_of(n.dst);
  const size_t chunk = static_cast<size_t>((end - begin) * inner) * es;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o) * chunk, src + static_cast<size_t>((o * dim + begin) * inner) * es, chunk);
}

void run_concat(const Node& n) {
  const TensorDesc &a = n.src[0].desc, &b = n.src[1].desc;
  if (a.dtype != b.dtype || is_packed(a.dtype) || a.ndim != b.ndim)
    fail(n, "sources must have one plain dtype and rank");
  const int axis = norm_axis(n, n.params.axis, a.ndim);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= a.ne[static_cast<size_t>(i)];
  for (uint32_t i = static_cast<uint32_t>(axis) + 1; i < a.ndim; ++i) inner *= a.ne[i];
  const size_t es = row_bytes(a.dtype, 1);
  const size_t ca = static_cast<size_t>(a.ne[static_cast<size_t>(axis)] * inner) * es;
  const size_t cb = static_cast<size_t>(b.ne[static_cast<size_t>(axis)] * inner) * es;
  const std::byte *pa = bytes_of(n.src[0]), *pb = bytes_of(n.src[1]);
  std::byte* dst = bytes_of(n.dst);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + static_cast<size_t>(o) * (ca + cb), pa + static_cast<size_t>(o) * ca, ca);
    std::memcpy(dst + static_cast<size_t>(o) * (ca + cb) + ca, pb + static_cast<size_t>(o) * cb, cb);
  }
}

}  // namespace kiln::backend::reference
