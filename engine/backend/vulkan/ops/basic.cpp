// Elementwise ops, row norms, softmax and RoPE.
#include <array>
#include <cmath>

#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"
#include "backend/ops.hpp"

namespace kiln::vk {

namespace {

/** `d`'s shape left-padded with 1s to 4 dims. */
std::array<int64_t, 4> pad4(const backend::TensorDesc& d) {
  std::array<int64_t, 4> s{1, 1, 1, 1};
  for (uint32_t i = 0; i < d.ndim; ++i) s[4 - d.ndim + i] = d.ne[i];
  return s;
}

/** t's elements [i0, i0 + n) as a flat f32 tensor. */
backend::TensorRef slice(const backend::TensorRef& t, int64_t i0, int64_t n) {
  backend::TensorRef s = t;
  s.offset = t.offset + static_cast<size_t>(i0) * 4;
  s.desc = backend::TensorDesc(DType::f32, {n});
  return s;
}

/** Elements per dispatch so that each of `ts` (flat f32 of `total` elements, sliced alike) fits in
 *  one storage binding: `total` when they all fit, else a multiple of `unit` (elements one window
 *  must keep together). Logits of a whole batch over a large vocabulary pass lavapipe's 128 MiB
 *  (Gemma 4's softcap over 262144-wide rows: 128 rows). */
int64_t element_window(const OpEnv& e, std::initializer_list<const backend::TensorRef*> ts, int64_t total,
                       int64_t unit) {
  const uint64_t reach = e.dev.policy().storage_reach;
  bool fits = true;
  for (const backend::TensorRef* t : ts) fits = fits && t->offset % 256 + static_cast<uint64_t>(total) * 4 <= reach;
  if (fits) return total;
  const int64_t win = static_cast<int64_t>((reach - 256) / 4) / unit * unit;
  if (win < 1)
    e.fail(fmt::format("{} elements that must stay in one dispatch exceed the storage-buffer reach ({} bytes)", unit,
                       reach));
  return win;
}

}  // namespace

bool fuses_unary_binary(const backend::Node& un, const backend::Node& bin) {
  if (!op_is_unary(un.op) || (bin.op != KILN_OP_ADD && bin.op != KILN_OP_MUL)) return false;
  if (un.op == KILN_OP_SOFTCAP && un.params.cap == 0.0f) return false;  // record_elementwise reports it
  const backend::TensorRef &x = un.src[0], &u = un.dst, &a = bin.src[0], &b = bin.src[1], &o = bin.dst;
  for (const backend::TensorRef* t : {&x, &u, &a, &b, &o})
    if (t->desc.dtype != DType::f32 || !t->buffer) return false;
  const int64_t total = x.desc.numel();
  if (u.desc.numel() != total || a.desc.numel() != total || o.desc.numel() != total) return false;
  if (a.buffer != u.buffer || a.offset != u.offset) return false;  // the binary op reads the unary result as a
  // b is read at broadcast positions by many invocations: it must not be written here at all.
  if (overlap(b, u) || overlap(b, o)) return false;
  return disjoint_or_same(x, u) && disjoint_or_same(x, o) && disjoint_or_same(u, o);
}

void record_elementwise(const OpEnv& e, const backend::Node* pre) {
  const backend::Node& n = e.node;
  // With a unary op fused in front (fuses_unary_binary), `a` is its input and `u` its output.
  const backend::TensorRef& a = pre ? pre->src[0] : n.src[0];
  const int64_t total = a.desc.numel();
  if (n.dst.desc.numel() != total) e.fail("result shape does not match");
  if (!total) return;
  if (n.op == KILN_OP_ADD || n.op == KILN_OP_MUL) {
    const backend::TensorRef& b = n.src[1];
    auto as = pad4(a.desc), bs = pad4(b.desc);
    std::array<uint32_t, 4> stride{};
    int64_t st = 1;
    for (int i = 3; i >= 0; --i) {
      if (bs[i] != as[i] && bs[i] != 1) e.fail("b does not broadcast onto a");
      stride[i] = bs[i] == 1 ? 0u : u32(st);
      st *= bs[i];
    }
    // binary.comp's index modes: b shaped like a, b one row over a's last dim, or general.
    uint32_t bmode = 2;
    if (b.desc.numel() == total)
      bmode = 0;
    else if (stride[3] == 1 && stride[0] == 0 && stride[1] == 0 && stride[2] == 0)
      bmode = 1;
    const backend::TensorRef& u = pre ? pre->dst : n.dst;
    const kiln_op_params pp = pre ? pre->params : kiln_op_params{};
    const Pipeline& p = e.pipeline("binary", {Bind::storage, Bind::storage, Bind::storage, Bind::storage},
                                   {static_cast<uint32_t>(n.op), pre ? static_cast<uint32_t>(pre->op) : 0u, bmode});
    // Windows of whole b-periods: one row of a for a broadcast row, one dim-0 slice in general
    // (b then moves by its dim-0 stride); every element's arithmetic is the same.
    const int64_t slice0 = as[1] * as[2] * as[3];
    const int64_t unit = bmode == 0 ? 1 : bmode == 1 ? as[3] : slice0;
    const int64_t win = element_window(e, {&a, &b, &n.dst, &u}, total, unit);
    for (int64_t i0 = 0; i0 < total; i0 += win) {
      const int64_t k = std::min(win, total - i0);
      const backend::TensorRef aw = win == total ? a : slice(a, i0, k), ow = win == total ? n.dst : slice(n.dst, i0, k),
                               uw = win == total ? u : slice(u, i0, k);
      backend::TensorRef bw = b;
      if (win != total && bmode == 0) bw = slice(b, i0, k);
      if (win != total && bmode == 2) {  // b's elements this window reads: its dim-0 slices i0/slice0 on
        const int64_t s0 = i0 / slice0, ns = k / slice0;
        bw = slice(b, s0 * stride[0], (ns - 1) * stride[0] + (stride[0] ? stride[0] : b.desc.numel()));
      }
      e.dispatch_items(p, {e.ssbo(aw), e.ssbo(bw), e.ssbo(ow, true), e.ssbo(uw, pre != nullptr)},
                       {u32(k), e.off(aw, 4), e.off(bw, 4), e.off(ow, 4), u32(as[1]), u32(as[2]), u32(as[3]), stride[0],
                        stride[1], stride[2], stride[3], e.off(uw, 4), fbits(pp.scale), fbits(pp.bias), fbits(pp.cap)},
                       static_cast<uint64_t>(k));
    }
    return;
  }
  const Pipeline& p = e.pipeline("unary", {Bind::storage, Bind::storage}, {static_cast<uint32_t>(n.op)});
  float cap = n.params.cap;
  if (n.op == KILN_OP_SOFTCAP && cap == 0.0f) e.fail("SOFTCAP needs cap != 0");
  const int64_t win = element_window(e, {&a, &n.dst}, total, 1);
  for (int64_t i0 = 0; i0 < total; i0 += win) {
    const int64_t k = std::min(win, total - i0);
    const backend::TensorRef aw = win == total ? a : slice(a, i0, k), ow = win == total ? n.dst : slice(n.dst, i0, k);
    e.dispatch_items(p, {e.ssbo(aw), e.ssbo(ow, true)},
                     {u32(k), e.off(aw, 4), e.off(ow, 4), fbits(n.params.scale), fbits(n.params.bias), fbits(cap)},
                     static_cast<uint64_t>(k));
  }
}

bool fuses_add_norm(const backend::Node& add, const backend::Node& norm) {
  if (add.op != KILN_OP_ADD || norm.op != KILN_OP_RMS_NORM || norm.params.mode > KILN_NORM_NONE) return false;
  const backend::TensorRef &a = add.src[0], &b = add.src[1], &s = add.dst, &x = norm.src[0], &o = norm.dst;
  for (const backend::TensorRef* t : {&a, &b, &s, &x, &o})
    if (t->desc.dtype != DType::f32 || !t->buffer) return false;
  const int64_t total = a.desc.numel();
  if (b.desc.numel() != total || s.desc.numel() != total || o.desc.numel() != total) return false;  // no broadcast
  if (x.buffer != s.buffer || x.offset != s.offset || x.desc.numel() != total) return false;  // norm reads the sum
  // A lane reads and writes only its own elements of its row (the sum before the norm), so a
  // tensor may be the very same range as another (an in-place sum, or a norm output the memory
  // planner put where a dead operand was); a partial overlap would mix rows or lanes.
  if (!disjoint_or_same(s, a) || !disjoint_or_same(s, b) || !disjoint_or_same(o, a) || !disjoint_or_same(o, b) ||
      !disjoint_or_same(o, s))
    return false;
  if (norm.params.mode != KILN_NORM_NONE &&
      (norm.n_src < 2 || norm.src[1].desc.numel() != x.desc.last() || overlap(o, norm.src[1])))
    return false;
  return true;
}

namespace {

/** RoPE's inverse frequencies for `rope` (validated), uploaded for this graph. */
const Allocation& rope_freqs(const OpEnv& e, const backend::Node& rope, int64_t D, int64_t& nd, int64_t& nf) {
  nd = rope.params.n_dims ? rope.params.n_dims : D;
  if (nd <= 0 || nd % 2 || nd > D) e.fail(fmt::format("n_dims {} must be positive, even and <= {}", nd, D));
  nf = rope.params.n_freq ? rope.params.n_freq : nd / 2;
  std::vector<float> freq(static_cast<size_t>(std::max<int64_t>(nd / 2, 1)));
  for (size_t i = 0; i < static_cast<size_t>(nd / 2); ++i)
    freq[i] = static_cast<float>(
        1.0 / std::pow(static_cast<double>(rope.params.theta), static_cast<double>(2 * i) / static_cast<double>(nd)));
  return e.temps.upload(freq.data(), freq.size() * 4);
}

}  // namespace

bool fuses_norm_rope(const backend::Node& norm, const backend::Node& rope) {
  if (norm.op != KILN_OP_RMS_NORM || rope.op != KILN_OP_ROPE || norm.params.mode > KILN_NORM_NONE) return false;
  if (rope.params.mode != KILN_ROPE_NEOX && rope.params.mode != KILN_ROPE_NORMAL) return false;
  const backend::TensorRef &x = norm.src[0], &o = norm.dst, &rx = rope.src[0], &pos = rope.src[1], &r = rope.dst;
  for (const backend::TensorRef* t : {&x, &o, &rx, &r})
    if (t->desc.dtype != DType::f32 || !t->buffer) return false;
  if (rx.desc.ndim != 3 || rope.n_src < 2 || !pos.buffer || pos.desc.numel() != rx.desc.ne[0]) return false;
  const int64_t total = x.desc.numel(), D = rx.desc.ne[2];
  if (o.desc.numel() != total || rx.desc.numel() != total || r.desc.numel() != total || x.desc.last() != D)
    return false;
  if (rx.buffer != o.buffer || rx.offset != o.offset) return false;  // the rope reads the norm's output
  const int64_t nd = rope.params.n_dims ? rope.params.n_dims : D;
  if (nd <= 0 || nd % 2 || nd > D) return false;  // record_rope reports it
  // A lane reads an element's x before writing it to o and r and no other lane touches it, so
  // r may be o or x exactly; it must not overlap anything else the dispatch reads.
  if (!disjoint_or_same(r, x) || !disjoint_or_same(r, o) || !disjoint_or_same(o, x) || overlap(r, pos) ||
      overlap(o, pos))
    return false;
  if (norm.params.mode != KILN_NORM_NONE &&
      (norm.n_src < 2 || norm.src[1].desc.numel() != D || overlap(o, norm.src[1]) || overlap(r, norm.src[1])))
    return false;
  return true;
}

bool fuses_norm_rope_pair(VulkanDevice& dev, const backend::Node& n1, const backend::Node& r1, const backend::Node& n2,
                          const backend::Node& r2) {
  if (!fuses_norm_rope(n1, r1) || !fuses_norm_rope(n2, r2)) return false;
  // One specialization, one frequency table and one position per token for both.
  const kiln_op_params &a = n1.params, &b = n2.params, &ra = r1.params, &rb = r2.params;
  if (a.mode != b.mode || a.eps != b.eps || ra.mode != rb.mode || ra.theta != rb.theta || ra.n_dims != rb.n_dims ||
      ra.n_freq != rb.n_freq)
    return false;
  const backend::TensorRef &pa = r1.src[1], &pb = r2.src[1];
  if (pa.buffer != pb.buffer || pa.offset != pb.offset || pa.desc.numel() != pb.desc.numel()) return false;
  if (n1.src[0].desc.last() != n2.src[0].desc.last()) return false;
  // Each of x, w, o and r is one binding over both tensors: the same buffer, within reach.
  const bool weighted = a.mode != KILN_NORM_NONE;
  std::vector<std::pair<const backend::TensorRef*, const backend::TensorRef*>> spans = {
      {&n1.src[0], &n2.src[0]}, {&n1.dst, &n2.dst}, {&r1.dst, &r2.dst}};
  if (weighted) spans.push_back({&n1.src[1], &n2.src[1]});
  for (const auto& [p, q] : spans) {
    if (p->buffer != q->buffer) return false;
    const uint64_t lo = OpEnv::base({nullptr, std::min(p->offset, q->offset), {}});
    const uint64_t hi = std::max(p->offset + p->desc.bytes(), q->offset + q->desc.bytes());
    if (hi - lo > dev.policy().storage_reach) return false;
  }
  // Workgroups of the two run in any order: neither may write what the other reads or writes.
  std::vector<const backend::TensorRef*> reads1 = {&n1.src[0], &pa}, reads2 = {&n2.src[0], &pb};
  if (weighted) reads1.push_back(&n1.src[1]), reads2.push_back(&n2.src[1]);
  for (const backend::TensorRef* w : {&n1.dst, &r1.dst}) {
    for (const backend::TensorRef* r : reads2)
      if (overlap(*w, *r)) return false;
    if (overlap(*w, n2.dst) || overlap(*w, r2.dst)) return false;
  }
  for (const backend::TensorRef* w : {&n2.dst, &r2.dst})
    for (const backend::TensorRef* r : reads1)
      if (overlap(*w, *r)) return false;
  return true;
}

void record_norm(const OpEnv& e, const backend::Node* add, const backend::Node* rope, const backend::Node* norm2,
                 const backend::Node* rope2) {
  const backend::Node& n = e.node;
  const backend::TensorRef& x = n.src[0];
  const int64_t D = x.desc.last(), rows = x.desc.rows();
  if (n.dst.desc.numel() != x.desc.numel()) e.fail("result shape does not match");
  if (!rows || !D) return;
  const int64_t all_rows = rows + (norm2 ? norm2->src[0].desc.rows() : 0);
  const uint32_t ls = e.dev.policy().row_local_size;
  uint64_t maxx = e.dev.context().info().max_groups[0];
  uint32_t gx = static_cast<uint32_t>(std::min<uint64_t>(static_cast<uint64_t>(all_rows), maxx));
  uint32_t gy = static_cast<uint32_t>((static_cast<uint64_t>(all_rows) + gx - 1) / gx);
  if (n.op == KILN_OP_SOFTMAX) {
    // softmax.comp: three passes of ceil(D / (4·subgroup)) loop iterations (llvmpipe's limit).
    const uint32_t budget = e.dev.policy().loop_budget;
    if (budget && 3 * ((D + 4 * ls - 1) / (4 * ls)) + 8 > budget)
      e.fail(
          fmt::format("a row of {} exceeds the loop iterations one kernel invocation may run on this device "
                      "(softmax rows up to {}): use a GPU",
                      D, (budget - 8) / 3 * 4 * ls));
    const Pipeline& p = e.pipeline("softmax", {Bind::storage, Bind::storage}, {ls});
    float scale = n.params.scale != 0.0f ? n.params.scale : 1.0f;
    e.dispatch(p, {e.ssbo(x), e.ssbo(n.dst, true)}, {u32(rows), u32(D), e.off(x, 4), e.off(n.dst, 4), fbits(scale)}, gx,
               gy);
    return;
  }
  uint32_t mode = 4;  // L2
  if (n.op == KILN_OP_RMS_NORM) {
    mode = static_cast<uint32_t>(n.params.mode);
    if (mode > KILN_NORM_GATED) e.fail(fmt::format("unknown RMS_NORM mode {}", n.params.mode));
  }
  bool has_w = mode == KILN_NORM_WEIGHT || mode == KILN_NORM_ONE_PLUS || mode == KILN_NORM_GATED;
  if (has_w && (n.n_src < 2 || n.src[1].desc.numel() != D)) e.fail("RMS_NORM needs w f32 [D]");
  if (mode == KILN_NORM_GATED && (n.n_src < 3 || n.src[2].desc.numel() != x.desc.numel()))
    e.fail("gated RMS_NORM needs z shaped like x");
  const backend::TensorRef& w = has_w ? n.src[1] : x;
  // With a fused ADD in front (fuses_add_norm): x and z are its operands, `sum` its result.
  const backend::TensorRef& xin = add ? add->src[0] : x;
  const backend::TensorRef& z = add ? add->src[1] : mode == KILN_NORM_GATED ? n.src[2] : x;
  const backend::TensorRef& sum = add ? add->dst : n.dst;
  // With a fused ROPE behind (fuses_norm_rope): positions, frequencies and its output; otherwise
  // those bindings repeat tensors the dispatch already reads or writes (never touched).
  uint32_t rope_mode = 0, H = 1, nd = 0, nf = 0;
  Arg pos = e.ssbo(x), freq = e.ssbo(x), rot = e.ssbo(n.dst, true);
  if (rope) {
    int64_t nd64 = 0, nf64 = 0;
    const Allocation& fa = rope_freqs(e, *rope, D, nd64, nf64);
    rope_mode = rope->params.mode == KILN_ROPE_NORMAL ? 2u : 1u;
    H = u32(rope->src[0].desc.ne[1]);
    nd = u32(nd64);
    nf = u32(nf64);
    pos = e.ssbo(rope->src[1]);
    freq = Arg{&fa, VK_FORMAT_UNDEFINED, false, 0, 0};
    rot = e.ssbo(rope->dst, true);
  }
  std::vector<Arg> args = {e.ssbo(xin), e.ssbo(w), e.ssbo(z), e.ssbo(n.dst, true), e.ssbo(sum, add != nullptr),
                           pos,         freq,      rot};
  // norm.comp's push constants, field for field.
  struct NormPush {
    uint32_t rows, D, x_off, w_off, z_off, o_off, eps, sum_off;
    uint32_t H, n_dims, n_freq, pos_off, r_off;           // ROPE
    uint32_t rows_a, H2, x_off2, w_off2, o_off2, r_off2;  // PAIR: the second norm + RoPE
  } pc{u32(rows),
       u32(D),
       e.off(xin, 4),
       e.off(w, 4),
       e.off(z, 4),
       e.off(n.dst, 4),
       fbits(n.params.eps),
       e.off(sum, 4),
       H,
       nd,
       nf,
       rope ? e.off(rope->src[1], 4) : 0u,
       rope ? e.off(rope->dst, 4) : 0u,
       u32(rows),
       1,
       0,
       0,
       0,
       0};
  static_assert(sizeof(NormPush) == 19 * 4, "norm.comp reads 19 words of push constants");
  if (norm2) {  // fuses_norm_rope_pair checked shapes, buffers, reach and overlaps
    // x, w, o and r become one binding each over both tensors; offsets count from its base.
    auto span = [&](const backend::TensorRef& a, const backend::TensorRef& b, bool write, uint32_t& off_a,
                    uint32_t& off_b) {
      e.check_in_buffer(a), e.check_in_buffer(b);
      const uint64_t lo = std::min(a.offset, b.offset),
                     hi = std::max(a.offset + a.desc.bytes(), b.offset + b.desc.bytes());
      const uint64_t base = OpEnv::base({nullptr, lo, {}});
      if ((a.offset - base) % 4 || (b.offset - base) % 4) e.fail("misaligned f32 tensors");
      off_a = u32(static_cast<int64_t>((a.offset - base) / 4)),
      off_b = u32(static_cast<int64_t>((b.offset - base) / 4));
      return Arg{&e.alloc(a), VK_FORMAT_UNDEFINED, write, lo, hi - lo, base};
    };
    args[0] = span(x, norm2->src[0], false, pc.x_off, pc.x_off2);
    if (has_w) args[1] = span(w, norm2->src[1], false, pc.w_off, pc.w_off2);
    args[3] = span(n.dst, norm2->dst, true, pc.o_off, pc.o_off2);
    args[7] = span(rope->dst, rope2->dst, true, pc.r_off, pc.r_off2);
    args[2] = args[0];  // z and sum are unused (no fused ADD, not gated): repeat bound tensors
    args[4] = args[3];
    pc.sum_off = pc.o_off;
    pc.rows = u32(all_rows);
    pc.H2 = u32(rope2->src[0].desc.ne[1]);
  }
  const auto* words = reinterpret_cast<const uint32_t*>(&pc);
  const Pipeline& p =
      e.pipeline("norm", std::vector<Bind>(8, Bind::storage), {ls, mode, add ? 1u : 0u, rope_mode, norm2 ? 1u : 0u});
  e.dispatch(p, args, std::vector<uint32_t>(words, words + sizeof(pc) / 4), gx, gy);
}

void record_rope(const OpEnv& e) {
  const backend::Node& n = e.node;
  const backend::TensorRef &x = n.src[0], &pos = n.src[1];
  if (x.desc.ndim != 3 || pos.desc.numel() != x.desc.ne[0]) e.fail("expected x [N, H, D] and positions i32 [N]");
  const int64_t N = x.desc.ne[0], H = x.desc.ne[1], D = x.desc.ne[2];
  int64_t nd = 0, nf = 0;
  const Allocation& fa = rope_freqs(e, n, D, nd, nf);
  if (!N || !H || !D) return;
  const Pipeline& p = e.pipeline("rope", {Bind::storage, Bind::storage, Bind::storage, Bind::storage},
                                 {n.params.mode == KILN_ROPE_NORMAL ? 1u : 0u});
  int64_t per_head = D - nd / 2;
  e.dispatch_items(
      p, {e.ssbo(x), e.ssbo(pos), e.ssbo(n.dst, true), Arg{&fa, VK_FORMAT_UNDEFINED, false, 0, 0}},
      {u32(N), u32(H), u32(D), u32(nd), u32(nf), e.off(x, 4), e.off(pos, 4), e.off(n.dst, 4), fbits(n.params.theta)},
      static_cast<uint64_t>(N * H * per_head));
}

}  // namespace kiln::vk
