// MATMUL and MOE_MATMUL: one shader (matmul.comp) per weight dtype; the tile and the read path
// come from KernelPolicy::matmul (kernels.cpp).
#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"

namespace kiln::vk {

using backend::DType;

void record_matmul(const OpEnv& e) {
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
  if (backend::is_quantized(wt) && K % 32) e.fail("quantized K must be a multiple of 32");
  if (R == 0 || M == 0) return;
  if (K == 0) {
    e.rec.fill_zero(e.alloc(n.dst), n.dst.offset, n.dst.desc.bytes());
    return;
  }

  const bool quant = backend::is_quantized(wt);
  const uint64_t wrow = backend::row_bytes(wt, K);
  // Weights beyond one texel binding's reach (e.g. a 262144-row bf16 LM head) run as row blocks,
  // each bound from its own offset; a row's arithmetic does not change.
  int64_t block = M;
  const uint64_t reach = e.dev.policy().texel_reach;
  if (!moe && (w.offset % 256) + static_cast<uint64_t>(M) * wrow + 512 > reach) {
    block = static_cast<int64_t>((reach - 512) / wrow) / 4 * 4;
    if (block < 4) e.fail(fmt::format("a weight row of {} bytes exceeds the texel-buffer reach", wrow));
  }
  for (int64_t m0 = 0; m0 < M; m0 += block) {
    const int64_t mb = std::min(block, M - m0);
    backend::TensorRef ws = w;
    if (!moe) {
      ws.offset = w.offset + static_cast<size_t>(m0) * wrow;
      ws.desc = backend::TensorDesc(wt, {mb, K});
    }
    backend::TensorRef ys = n.dst;
    ys.offset = n.dst.offset + static_cast<size_t>(m0) * 4;
    ys.desc = backend::TensorDesc(DType::f32, {R * M - m0});  // the rows this block writes into

    // Operand alignment for vec4 / 8-wide texel reads (bindings start 256-byte aligned).
    bool aligned = x.offset % 16 == 0 && K % 8 == 0;
    if (!quant) aligned = aligned && ws.offset % 16 == 0;
    MatmulPlan plan = e.dev.policy().matmul(wt, R, mb, K, aligned, moe);
    uint32_t esize = wt == DType::f32 ? 4 : 2;
    // 16-byte texels everywhere (largest reach); the scalar path picks components out of them.
    VkFormat xf = VK_FORMAT_R32G32B32A32_SFLOAT;
    VkFormat wf = wt == DType::f32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;
    std::string shader = std::string("matmul_") + backend::dtype_name(wt);
    uint32_t moe_mode = moe ? (x.desc.ndim == 2 ? 1u : 2u) : 0u;
    std::vector<Bind> binds = {Bind::texel, Bind::texel, Bind::storage, Bind::storage};
    std::vector<Arg> args = {e.tex(x, xf), e.tex(ws, wf), moe ? e.ssbo(n.src[2]) : e.ssbo(x), e.ssbo(ys, true)};
    const Pipeline& p =
        e.pipeline(shader, binds, {plan.local_size, plan.tm, plan.tn, plan.aligned ? 1u : 0u, moe_mode});
    std::vector<uint32_t> push = {u32(R),
                                  u32(mb),
                                  u32(K),
                                  e.off(x, 4),
                                  e.off(ws, quant ? 1 : esize),  // bytes for quantized weights
                                  e.off(ys, 4),
                                  u32(static_cast<int64_t>(wrow)),
                                  u32(kslots),
                                  moe ? e.off(n.src[2], 4) : 0u,
                                  u32(M),
                                  plan.row_stride};
    // Blocks of tn·row_stride weight rows, row_stride workgroups each (matmul.comp).
    const uint64_t block_rows = static_cast<uint64_t>(plan.tn) * plan.row_stride;
    uint64_t gx = (static_cast<uint64_t>(mb) + block_rows - 1) / block_rows * plan.row_stride;
    uint64_t tiles = (static_cast<uint64_t>(R) + plan.tm - 1) / plan.tm;
    const DeviceInfo& d = e.dev.context().info();
    if (gx > d.max_groups[0]) e.fail(fmt::format("{} output features exceed the grid limit; split w", mb));
    uint64_t gy = std::min<uint64_t>(tiles, d.max_groups[1]);
    uint64_t gz = (tiles + gy - 1) / gy;
    e.dispatch(p, args, push, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(gz));
  }
}

}  // namespace kiln::vk
