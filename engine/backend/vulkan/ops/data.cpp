// Data movement: GET_ROWS (dequantizing gather), SET_ROWS (cache writes with dtype conversion),
// SLICE and CONCAT (vkCmdCopyBuffer regions: no kernel needed).
#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"

namespace kiln::vk {

namespace {

int axis_of(const OpEnv& e, int axis, uint32_t ndim) {
  int a = axis < 0 ? axis + static_cast<int>(ndim) : axis;
  if (a < 0 || a >= static_cast<int>(ndim)) e.fail(fmt::format("axis {} outside a {}-d tensor", axis, ndim));
  return a;
}

/** Elements before `axis` (outer count) and bytes from `axis` inwards per unit of that axis. */
void split(const backend::TensorDesc& d, int axis, int64_t& outer, uint64_t& inner_bytes) {
  outer = 1;
  for (int i = 0; i < axis; ++i) outer *= d.ne[static_cast<size_t>(i)];
  int64_t inner = 1;
  for (uint32_t i = static_cast<uint32_t>(axis) + 1; i < d.ndim; ++i) inner *= d.ne[i];
  inner_bytes = static_cast<uint64_t>(inner) * (d.dtype == DType::f16 || d.dtype == DType::bf16 ? 2 : 4);
}

void copy_regions(const OpEnv& e, const backend::TensorRef& src, const backend::TensorRef& dst,
                  const std::vector<VkBufferCopy>& regions) {
  std::vector<VkBufferCopy> abs = regions;
  for (VkBufferCopy& r : abs) {
    r.srcOffset += src.offset;
    r.dstOffset += dst.offset;
  }
  e.rec.copy_regions(e.alloc(src), e.alloc(dst), abs);
}

// SET_ROWS geometry: N rows of D values into a destination of R rows. False when the shapes
// disagree (record_set_rows reports those).
bool set_rows_shape(const backend::Node& n, int64_t& N, int64_t& D, int64_t& R) {
  const backend::TensorRef &dst = n.src[0], &rows = n.src[1], &slots = n.src[2];
  N = slots.desc.numel(), D = N ? rows.desc.numel() / N : 0, R = D ? dst.desc.numel() / D : 0;
  return N > 0 && D > 0 && rows.desc.numel() == N * D && dst.desc.numel() % D == 0;
}

// A kv_q8 / kv_q4 destination quantizes each last-dim row of HD values on its own: a slot's D
// values must be whole such rows (kv_group(HD) != 0: HD a multiple of 8).
bool kv_rows(const backend::Node& n, int64_t D) {
  const int64_t hd = n.src[0].desc.last();
  return kv_group(hd) != 0 && D % hd == 0;
}

}  // namespace

bool fuses_set_rows(VulkanDevice& dev, const backend::Node& a, const backend::Node& b) {
  if (a.op != KILN_OP_SET_ROWS || b.op != KILN_OP_SET_ROWS || a.n_src < 3 || b.n_src < 3) return false;
  int64_t N, D, R, N2, D2, R2;
  if (!set_rows_shape(a, N, D, R) || !set_rows_shape(b, N2, D2, R2)) return false;
  const backend::TensorRef &s = a.src[2], &s2 = b.src[2];
  if (s.buffer != s2.buffer || s.offset != s2.offset || N != N2) return false;  // the same slots
  const DType dt = a.src[0].desc.dtype;
  if (b.src[0].desc.dtype != dt || (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16 && !is_kv_quantized(dt)))
    return false;
  if (is_kv_quantized(dt) && (!kv_rows(a, D) || !kv_rows(b, D2))) return false;
  // Neither write may touch what the other reads (rows, slots) or writes.
  for (const backend::TensorRef* w : {&a.src[0], &b.src[0]})
    for (const backend::TensorRef* r : {&a.src[1], &b.src[1], &s})
      if (overlap(*w, *r)) return false;
  if (overlap(a.src[0], b.src[0])) return false;
  // Each destination in one binding (record_set_rows windows a larger one, unfused).
  for (const backend::TensorRef* d : {&a.src[0], &b.src[0]})
    if (d->offset - OpEnv::base(*d) + d->desc.bytes() > dev.policy().storage_reach) return false;
  return true;
}

void record_set_rows(const OpEnv& e, const backend::Node* second) {
  const backend::Node& n = e.node;
  const backend::TensorRef &dst = n.src[0], &rows = n.src[1], &slots = n.src[2];
  int64_t N, D, R;
  if (!set_rows_shape(n, N, D, R)) {
    if (N && rows.desc.numel() != N * D) e.fail("rows and slots disagree");
    if (D && dst.desc.numel() % D) e.fail("destination rows do not match the row size");
    return;  // nothing to write
  }
  const DType dt = dst.desc.dtype;
  // kv_q8 / kv_q4 (set_rows_kv.comp): one invocation per group of G values of a head row of HD,
  // offsets in 4-byte words; the other dtypes (set_rows.comp): one per element, offsets in elements.
  const bool kv = is_kv_quantized(dt);
  const int64_t hd = dst.desc.last();
  if (kv && !kv_rows(n, D)) e.fail(fmt::format("{} rows of {} values are not whole rows of {}", dtype_name(dt), D, hd));
  const uint32_t mode = kv ? (dt == DType::kv_q8 ? 3u : 4u) : dt == DType::f32 ? 0u : dt == DType::f16 ? 1u : 2u;
  const uint32_t es = kv || mode == 0 ? 4 : 2;
  const Pipeline& p =
      e.pipeline(kv ? "set_rows_kv" : "set_rows", std::vector<Bind>(8, Bind::storage), {mode, second ? 1u : 0u});
  Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 4, 4};  // idempotent flag: no hazard
  std::vector<uint32_t> push = {u32(N), u32(D), u32(R), e.off(rows, 4), e.off(slots, 4), e.off(dst, es), 0, 0,
                                0,      0,      0,      u32(R)};
  if (kv) push.insert(push.end(), {u32(hd), 0});
  const auto items_of = [&](int64_t d, int64_t h) { return static_cast<uint64_t>(N * (kv ? d / kv_group(h) : d)); };
  uint64_t items = items_of(D, hd);
  // Bytes of one slot's row of the destination.
  const uint64_t reach = e.dev.policy().storage_reach,
                 slot_bytes = kv ? static_cast<uint64_t>(D / hd) * row_bytes(dt, hd) : static_cast<uint64_t>(D) * es;
  if (second || dst.offset - OpEnv::base(dst) + dst.desc.bytes() <= reach) {
    // Without a second write, its bindings repeat this one's (never touched).
    Arg rows2 = e.ssbo(rows), e32 = e.ssbo(dst, true), e16 = e.ssbo(dst, true);
    if (second) {  // fuses_set_rows checked shapes, slots, dtypes, overlaps and reach
      const backend::TensorRef &dst2 = second->src[0], &r2 = second->src[1];
      const int64_t D2 = r2.desc.numel() / N;
      push[6] = u32(D2), push[7] = u32(dst2.desc.numel() / D2), push[8] = e.off(r2, 4);
      push[9] = e.off(dst2, es);
      if (kv) push[13] = u32(dst2.desc.last());
      rows2 = e.ssbo(r2), e32 = e.ssbo(dst2, true), e16 = e.ssbo(dst2, true);
      items += items_of(D2, dst2.desc.last());
    }
    e.dispatch_items(p, {e.ssbo(rows), e.ssbo(slots), e.ssbo(dst, true), e.ssbo(dst, true), flags, rows2, e32, e16},
                     push, items);
    return;
  }
  // A destination beyond one binding (a large KV cache on lavapipe): windows of whole rows, each
  // bound from its own 256-byte aligned base; every window's dispatch skips the other slots.
  e.check_in_buffer(dst);
  if (slot_bytes + 256 > reach)
    e.fail(fmt::format("a destination row of {} bytes exceeds a storage binding", slot_bytes));
  const int64_t per = static_cast<int64_t>((reach - 256) / slot_bytes);
  for (int64_t lo = 0; lo < R; lo += per) {
    const int64_t hi = std::min(R, lo + per);
    const uint64_t start = dst.offset + static_cast<uint64_t>(lo) * slot_bytes,
                   base = OpEnv::base({nullptr, start, {}});
    const Arg win{&e.alloc(dst), VK_FORMAT_UNDEFINED, true, start, static_cast<uint64_t>(hi - lo) * slot_bytes, base};
    push[5] = u32(static_cast<int64_t>((start - base) / es)), push[10] = u32(lo), push[11] = u32(hi);
    e.dispatch_items(p, {e.ssbo(rows), e.ssbo(slots), win, win, flags, e.ssbo(rows), win, win}, push, items);
  }
}

void record_data(const OpEnv& e) {
  const backend::Node& n = e.node;
  switch (n.op) {
    case KILN_OP_GET_ROWS: {
      const backend::TensorRef &t = n.src[0], &ids = n.src[1];
      const DType wt = t.desc.dtype;
      const int64_t R = t.desc.ne[0], D = t.desc.numel() / std::max<int64_t>(R, 1), N = ids.desc.numel();
      if (n.dst.desc.numel() != N * D) e.fail("result shape does not match");
      if (!N || !D) return;
      const bool quant = is_quantized(wt);
      if (t.desc.last() % quant_block(wt))
        e.fail(fmt::format("{} rows must be whole {}-value blocks", dtype_name(wt), quant_block(wt)));
      // get_rows.comp: the formats other than q8_0 / q4_0 run one invocation per 32 values.
      const int64_t per_item = quant && wt != DType::q8_0 && wt != DType::q4_0 ? 32 : 1;
      const Pipeline& p = e.pipeline(std::string("get_rows_") + dtype_name(wt),
                                     {Bind::texel, Bind::storage, Bind::storage, Bind::storage}, {});
      VkFormat f = wt == DType::f32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;
      const uint64_t row = row_bytes(wt, D);  // D = one table row (all trailing dims)
      int64_t block = R;
      const uint64_t reach = e.dev.policy().texel_reach;
      if ((t.offset % 256) + static_cast<uint64_t>(R) * row + 512 > reach) {
        block = static_cast<int64_t>((reach - 512) / row);
        if (block < 1) e.fail(fmt::format("a table row of {} bytes exceeds the texel-buffer reach", row));
      }
      Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 4};  // idempotent flag: no hazard
      for (int64_t r0 = 0; r0 < R; r0 += block) {
        backend::TensorRef ts = t;
        const int64_t rb = std::min(block, R - r0);
        ts.offset = t.offset + static_cast<size_t>(r0) * row;
        ts.desc = backend::TensorDesc(wt, {rb, D});
        uint32_t w_off = e.off(ts, quant ? 1 : wt == DType::f32 ? 4 : 2);  // bytes for quantized tables
        e.dispatch_items(p, {e.tex(ts, f), e.ssbo(ids), e.ssbo(n.dst, true), flags},
                         {u32(N), u32(D), u32(R), w_off, u32(static_cast<int64_t>(quant ? row : 0)), e.off(ids, 4),
                          e.off(n.dst, 4), u32(r0), u32(rb)},
                         static_cast<uint64_t>(N * D / per_item));
      }
      return;
    }
    case KILN_OP_SET_ROWS:
      record_set_rows(e);
      return;
    case KILN_OP_SLICE: {
      const backend::TensorRef& x = n.src[0];
      int a = axis_of(e, n.params.axis, x.desc.ndim);
      int64_t size = x.desc.ne[static_cast<size_t>(a)];
      int64_t b = n.params.begin, en = n.params.end ? n.params.end : size;
      if (b < 0 || en > size || b > en) e.fail(fmt::format("range [{}, {}) outside axis size {}", b, en, size));
      int64_t outer;
      uint64_t inner;
      split(x.desc, a, outer, inner);
      std::vector<VkBufferCopy> regions;
      for (int64_t o = 0; o < outer && en > b; ++o)
        regions.push_back({static_cast<uint64_t>(o * size + b) * inner, static_cast<uint64_t>(o * (en - b)) * inner,
                           static_cast<uint64_t>(en - b) * inner});
      copy_regions(e, x, n.dst, regions);
      return;
    }
    case KILN_OP_CONCAT: {
      const backend::TensorRef &x = n.src[0], &y = n.src[1];
      int a = axis_of(e, n.params.axis, x.desc.ndim);
      int64_t sx = x.desc.ne[static_cast<size_t>(a)], sy = y.desc.ne[static_cast<size_t>(a)];
      int64_t outer;
      uint64_t inner;
      split(x.desc, a, outer, inner);
      std::vector<VkBufferCopy> rx, ry;
      for (int64_t o = 0; o < outer; ++o) {
        if (sx)
          rx.push_back({static_cast<uint64_t>(o * sx) * inner, static_cast<uint64_t>(o * (sx + sy)) * inner,
                        static_cast<uint64_t>(sx) * inner});
        if (sy)
          ry.push_back({static_cast<uint64_t>(o * sy) * inner, static_cast<uint64_t>(o * (sx + sy) + sx) * inner,
                        static_cast<uint64_t>(sy) * inner});
      }
      copy_regions(e, x, n.dst, rx);
      copy_regions(e, y, n.dst, ry);
      return;
    }
    default:
      e.fail("not a data op");
  }
}

}  // namespace kiln::vk
