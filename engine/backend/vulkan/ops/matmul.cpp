// MATMUL and MOE_MATMUL: one shader (matmul.comp) per weight dtype; the tile and the read path
// come from KernelPolicy::matmul (kernels.cpp). Up to three sibling MATMULs (the same x, e.g. a
// layer's q/k/v or gate/up projections) run as one dispatch: on lavapipe every dispatch costs
// ~30 µs of thread hand-off, and a decode step is hundreds of them.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"

namespace kiln::vk {


namespace {

const Allocation* allocation_of(const backend::TensorRef& t) {
  auto* b = dynamic_cast<const VulkanBuffer*>(t.buffer);
  return b ? &b->allocation() : nullptr;
}

bool same_tensor(const backend::TensorRef& a, const backend::TensorRef& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.desc.dtype == b.desc.dtype && a.desc.ndim == b.desc.ndim &&
         a.desc.ne == b.desc.ne;
}

// matmul.comp's push constants, field for field.
struct MatmulPush {
  uint32_t R, M, K, x_off, w_off, y_off, w_row, kslots, ids_off, ldy, ms;
  uint32_t g1, M1, w_off1, y_off1;  // sibling products (fused dispatch); g = 0: absent
  uint32_t g2, M2, w_off2, y_off2;
  uint32_t n_experts;
  std::vector<uint32_t> words() const {
    const auto* p = reinterpret_cast<const uint32_t*>(this);
    return {p, p + sizeof(*this) / 4};
  }
};

static_assert(sizeof(MatmulPush) == 20 * 4, "matmul.comp reads 20 words of push constants");

// Workgroups along y/z for R activation rows in tiles of tm (y is folded into z past its limit).
void row_grid(const DeviceInfo& d, int64_t R, uint32_t tm, uint32_t& gy, uint32_t& gz) {
  const uint64_t tiles = (static_cast<uint64_t>(R) + tm - 1) / tm;
  const uint64_t y = std::min<uint64_t>(tiles, d.max_groups[1]);
  gy = static_cast<uint32_t>(y);
  gz = static_cast<uint32_t>((tiles + y - 1) / y);
}

// Plain 2-D MATMUL whose shapes record_matmul accepts (it reports the errors of the others).
bool plain_matmul(const backend::Node& n) {
  if (n.op != KILN_OP_MATMUL || n.src[1].desc.ndim != 2) return false;
  const int64_t K = n.src[0].desc.last(), M = n.src[1].desc.ne[0];
  return K > 0 && M > 0 && n.src[1].desc.last() == K && n.src[0].desc.rows() > 0 &&
         n.dst.desc.numel() == n.src[0].desc.rows() * M && K % quant_block(n.src[1].desc.dtype) == 0;
}

// Whether w is f16 prepared by upload_weights (matmul.comp's CLEAN specialization).
uint32_t half_clean(const backend::TensorRef& w) {
  return w.desc.dtype == DType::f16 && static_cast<const VulkanBuffer*>(w.buffer)->half_clean(w.offset, w.desc.bytes())
             ? 1u
             : 0u;
}

// llvmpipe ends a shader's loops after 65535 passes per invocation, silently (kernels.hpp
// loop_budget). matmul.comp's passes: the lane's K chunks, the K % 8 tail, and for f16 the exact
// redo, which walks the chunks once per tile row. Realistic K is far inside (f16 TN 16 on
// lavapipe: K up to ~200K); past it the result would be wrong, so it is an error.
void check_loop_budget(const OpEnv& e, DType wt, const MatmulPlan& plan, int64_t K) {
  const uint32_t budget = e.dev.policy().loop_budget;
  if (!budget) return;
  const uint64_t per = is_quantized(wt) ? 32 : 8;
  const uint64_t chunks = (static_cast<uint64_t>(K) / per + plan.local_size - 1) / plan.local_size;
  const uint64_t passes = chunks * (wt == DType::f16 ? plan.tn + 2u : 1u) + plan.tn + 8;
  if (passes > budget)
    e.fail(
        fmt::format("K = {} needs {} loop passes per invocation; this device ends loops after {} (llvmpipe): "
                    "use a GPU or split K",
                    K, passes, budget));
}

}  // namespace

size_t fusable_matmuls(VulkanDevice& dev, const std::vector<backend::Node>& nodes, size_t i) {
  const backend::Node& a = nodes[i];
  if (fuse_off() || !plain_matmul(a)) return 1;
  const backend::TensorRef &x = a.src[0], &w = a.src[1];
  const Allocation* wa = allocation_of(w);
  const Allocation* ya = allocation_of(a.dst);
  if (!wa || !ya || overlap(a.dst, x)) return 1;
  const uint64_t wrow = row_bytes(w.desc.dtype, w.desc.last());
  uint64_t wlo = w.offset, whi = w.offset + w.desc.ne[0] * wrow;
  uint64_t ylo = a.dst.offset, yhi = a.dst.offset + a.dst.desc.bytes();
  size_t k = 1;
  for (; k < 3 && i + k < nodes.size(); ++k) {
    const backend::Node& b = nodes[i + k];
    if (!plain_matmul(b) || !same_tensor(b.src[0], x) || b.src[1].desc.dtype != w.desc.dtype ||
        b.src[1].desc.last() != w.desc.last() || allocation_of(b.src[1]) != wa || allocation_of(b.dst) != ya ||
        overlap(b.dst, x))
      break;
    bool clash = false;  // a sibling's output must not overlap an earlier one's output
    for (size_t j = 0; j < k; ++j) clash |= overlap(b.dst, nodes[i + j].dst);
    if (clash) break;
    const uint64_t nwlo = std::min<uint64_t>(wlo, b.src[1].offset),
                   nwhi = std::max<uint64_t>(whi, b.src[1].offset + b.src[1].desc.ne[0] * wrow);
    const uint64_t nylo = std::min<uint64_t>(ylo, b.dst.offset),
                   nyhi = std::max<uint64_t>(yhi, b.dst.offset + b.dst.desc.bytes());
    // One texel view over all the weights and one storage binding over all the outputs.
    if (nwhi - OpEnv::base({nullptr, nwlo, {}}) + 512 > dev.policy().texel_reach ||
        nyhi - OpEnv::base({nullptr, nylo, {}}) > dev.context().info().max_storage_range)
      break;
    wlo = nwlo, whi = nwhi, ylo = nylo, yhi = nyhi;
  }
  return k;
}

void record_matmul(const OpEnv& e, const backend::Node* siblings, size_t n_siblings) {
  const backend::Node& n = e.node;
  const bool moe = n.op == KILN_OP_MOE_MATMUL;
  const backend::TensorRef &x = n.src[0], &w = n.src[1];
  const DType wt = w.desc.dtype;
  const int64_t K = x.desc.last();
  int64_t M, R, kslots = 1;
  if (moe) {
    if (w.desc.ndim != 3 || n.src[2].desc.ndim != 2) e.fail("expected w [E, M, K] and ids [N, k]");
    M = w.desc.ne[1];
    kslots = n.src[2].desc.ne[1];
    R = n.src[2].desc.ne[0] * kslots;
  } else {
    if (w.desc.ndim != 2) e.fail("expected w [M, K]");
    M = w.desc.ne[0];
    R = x.desc.rows();
  }
  if (w.desc.last() != K) e.fail("x and w disagree on K");
  if (n.dst.desc.numel() != R * M) e.fail("result shape does not match");
  if (K % quant_block(wt))
    e.fail(fmt::format("{} K must be a multiple of its {}-value block", dtype_name(wt), quant_block(wt)));
  if (R == 0 || M == 0) return;
  if (K == 0) {
    e.rec.fill_zero(e.alloc(n.dst), n.dst.offset, n.dst.desc.bytes());
    return;
  }

  const bool quant = is_quantized(wt);
  const uint64_t wrow = row_bytes(wt, K);
  const uint32_t esize = wt == DType::f32 ? 4 : 2;
  const DeviceInfo& d = e.dev.context().info();
  // 16-byte texels everywhere (largest reach); the scalar path picks components out of them.
  const VkFormat xf = VK_FORMAT_R32G32B32A32_SFLOAT;
  const VkFormat wf = wt == DType::f32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;
  const std::string shader = std::string("matmul_") + dtype_name(wt);
  const uint32_t moe_mode = moe ? (x.desc.ndim == 2 ? 1u : 2u) : 0u;
  const std::vector<Bind> binds = {Bind::texel, Bind::texel, Bind::storage, Bind::storage, Bind::storage};
  const Arg flags{&e.flags, VK_FORMAT_UNDEFINED, false, 0, 16};  // err[2]: bad expert id (idempotent: no hazard)

  if (n_siblings > 0) {  // fusable_matmuls checked shapes, allocations and reach
    std::vector<const backend::Node*> parts = {&n};
    for (size_t i = 0; i < n_siblings; ++i) parts.push_back(&siblings[i]);
    uint64_t wlo = UINT64_MAX, whi = 0, ylo = UINT64_MAX, yhi = 0;
    bool aligned = x.offset % 16 == 0 && K % 8 == 0;
    uint32_t clean = 1;
    for (const backend::Node* p : parts) {
      clean &= half_clean(p->src[1]);
      wlo = std::min<uint64_t>(wlo, p->src[1].offset);
      whi = std::max<uint64_t>(whi, p->src[1].offset + static_cast<uint64_t>(p->src[1].desc.ne[0]) * wrow);
      ylo = std::min<uint64_t>(ylo, p->dst.offset);
      yhi = std::max<uint64_t>(yhi, p->dst.offset + p->dst.desc.bytes());
      if (!quant) aligned = aligned && p->src[1].offset % 16 == 0;
    }
    const uint64_t wbase = OpEnv::base({nullptr, wlo, {}}), ybase = OpEnv::base({nullptr, ylo, {}});
    MatmulPlan plan = e.dev.policy().matmul(wt, R, M, K, aligned, false);
    check_loop_budget(e, wt, plan, K);
    const uint64_t block_rows = static_cast<uint64_t>(plan.tn) * plan.row_stride;
    MatmulPush push{};
    push.R = u32(R), push.M = u32(M), push.K = u32(K), push.x_off = e.off(x, 4);
    push.w_row = u32(static_cast<int64_t>(wrow)), push.kslots = 1, push.ldy = u32(M), push.ms = plan.row_stride;
    uint64_t groups = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const backend::TensorRef &ws = parts[i]->src[1], &ys = parts[i]->dst;
      if ((ws.offset - wbase) % (quant ? 1 : esize) || (ys.offset - ybase) % 4) e.fail("misaligned sibling tensors");
      const uint32_t woff = u32(static_cast<int64_t>((ws.offset - wbase) / (quant ? 1 : esize)));
      const uint32_t yoff = u32(static_cast<int64_t>((ys.offset - ybase) / 4));
      const uint64_t Mi = static_cast<uint64_t>(ws.desc.ne[0]);
      const uint32_t g = u32(static_cast<int64_t>(groups));
      if (i == 0) push.w_off = woff, push.y_off = yoff;
      if (i == 1) push.g1 = g, push.M1 = u32(static_cast<int64_t>(Mi)), push.w_off1 = woff, push.y_off1 = yoff;
      if (i == 2) push.g2 = g, push.M2 = u32(static_cast<int64_t>(Mi)), push.w_off2 = woff, push.y_off2 = yoff;
      groups += (Mi + block_rows - 1) / block_rows * plan.row_stride;
    }
    if (groups > d.max_groups[0])
      e.fail(fmt::format("{} fused output features exceed the grid limit", groups * plan.tn));
    uint32_t gy = 1, gz = 1;
    row_grid(d, R, plan.tm, gy, gz);
    std::vector<Arg> args = {e.tex(x, xf), Arg{&e.alloc(w), wf, false, wlo, whi - wlo, wbase}, flags,
                             Arg{&e.alloc(n.dst), VK_FORMAT_UNDEFINED, true, ylo, yhi - ylo, ybase}, flags};
    const Pipeline& p =
        e.pipeline(shader, binds, {plan.local_size, plan.tm, plan.tn, plan.aligned ? 1u : 0u, 0u, clean});
    e.dispatch(p, args, push.words(), static_cast<uint32_t>(groups), gy, gz);
    return;
  }

  // Weights beyond one texel binding's reach (e.g. a 262144-row bf16 LM head) run as row blocks,
  // each bound from its own offset; a row's arithmetic does not change.
  int64_t block = M;
  const uint64_t reach = e.dev.policy().texel_reach;
  if (!moe && (w.offset % 256) + static_cast<uint64_t>(M) * wrow + 512 > reach) {
    block = static_cast<int64_t>((reach - 512) / wrow) / 4 * 4;
    if (block < 4) e.fail(fmt::format("a weight row of {} bytes exceeds the texel-buffer reach", wrow));
  }
  // Outputs beyond one storage binding's reach (e.g. the logits of every position of a long prompt:
  // 300 x 151936 floats is 182 MB against lavapipe's 128 MiB) run as windows of whole rows, each
  // bound from its own offset (with its rows of x and, for MoE, of ids). Every row's arithmetic is
  // fixed by K alone (matmul.comp), so a window gives the bits the whole product would.
  const uint64_t yrow = static_cast<uint64_t>(M) * 4, yreach = e.dev.policy().storage_reach;
  int64_t rwin = R;
  if (n.dst.offset % 256 + static_cast<uint64_t>(R) * yrow > yreach) {
    rwin = static_cast<int64_t>((yreach - 256) / yrow);
    if (rwin >= 8) rwin = rwin / 8 * 8;                       // whole 8-row tiles
    if (moe && moe_mode == 1) rwin = rwin / kslots * kslots;  // whole tokens: x row = r / kslots
    if (rwin < 1)
      e.fail(fmt::format("one output row of {} bytes exceeds the storage-buffer reach ({} bytes)", yrow, yreach));
  }
  for (int64_t r0 = 0; r0 < R; r0 += rwin) {
    const int64_t rb = std::min(rwin, R - r0);
    backend::TensorRef xs = x;  // the activation rows of this window
    const int64_t x0 = moe_mode == 1 ? r0 / kslots : r0, xn = moe_mode == 1 ? (rb + kslots - 1) / kslots : rb;
    xs.offset = x.offset + static_cast<size_t>(x0 * K) * 4;
    xs.desc = backend::TensorDesc(DType::f32, {xn, K});
    backend::TensorRef ids;
    if (moe) {
      ids = n.src[2];
      ids.offset = ids.offset + static_cast<size_t>(r0) * 4;
      ids.desc = backend::TensorDesc(ids.desc.dtype, {rb});
    }
    for (int64_t m0 = 0; m0 < M; m0 += block) {
      const int64_t mb = std::min(block, M - m0);
      backend::TensorRef ws = w;
      if (!moe) {
        ws.offset = w.offset + static_cast<size_t>(m0) * wrow;
        ws.desc = backend::TensorDesc(wt, {mb, K});
      }
      backend::TensorRef ys = n.dst;
      ys.offset = n.dst.offset + static_cast<size_t>(r0 * M + m0) * 4;
      ys.desc = backend::TensorDesc(DType::f32, {rb * M - m0});  // the rows this block writes into

      // Operand alignment for vec4 / 8-wide texel reads (bindings start 256-byte aligned).
      bool aligned = xs.offset % 16 == 0 && K % 8 == 0;
      if (!quant) aligned = aligned && ws.offset % 16 == 0;
      MatmulPlan plan = e.dev.policy().matmul(wt, rb, mb, K, aligned, moe);
      check_loop_budget(e, wt, plan, K);
      // Binding 2 is the expert ids (MoE) or unused: the flags buffer stands in (x may pass the
      // storage reach).
      std::vector<Arg> args = {e.tex(xs, xf), e.tex(ws, wf), moe ? e.ssbo(ids) : flags, e.ssbo(ys, true), flags};
      const Pipeline& p = e.pipeline(
          shader, binds, {plan.local_size, plan.tm, plan.tn, plan.aligned ? 1u : 0u, moe_mode, half_clean(ws)});
      MatmulPush push{};
      push.R = u32(rb), push.M = u32(mb), push.K = u32(K), push.x_off = e.off(xs, 4);
      push.w_off = e.off(ws, quant ? 1 : esize);  // bytes for quantized weights
      push.y_off = e.off(ys, 4), push.w_row = u32(static_cast<int64_t>(wrow)), push.kslots = u32(kslots);
      push.ids_off = moe ? e.off(ids, 4) : 0u, push.ldy = u32(M), push.ms = plan.row_stride;
      push.n_experts = moe ? u32(w.desc.ne[0]) : 0u;
      // Blocks of tn·row_stride weight rows, row_stride workgroups each (matmul.comp).
      const uint64_t block_rows = static_cast<uint64_t>(plan.tn) * plan.row_stride;
      const uint64_t gx = (static_cast<uint64_t>(mb) + block_rows - 1) / block_rows * plan.row_stride;
      if (gx > d.max_groups[0]) e.fail(fmt::format("{} output features exceed the grid limit; split w", mb));
      uint32_t gy = 1, gz = 1;
      row_grid(d, rb, plan.tm, gy, gz);
      e.dispatch(p, args, push.words(), static_cast<uint32_t>(gx), gy, gz);
    }
  }
}

}  // namespace kiln::vk
