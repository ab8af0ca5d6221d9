// OpEnv helpers and the capability check (supports_op) of the Vulkan backend.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "backend/ops.hpp"
#include "backend/vulkan/device.hpp"
#include "backend/vulkan/ops/ops.hpp"

namespace kiln::vk {

using backend::BackendError;
using backend::Support;
using backend::TensorRef;

bool fuse_off() {
  static const bool off = [] {
    const char* v = std::getenv("KILN_VULKAN_NO_FUSE");
    return v && *v && *v != '0';
  }();
  return off;
}

const Allocation& OpEnv::alloc(const TensorRef& t) const {
  auto* b = dynamic_cast<const VulkanBuffer*>(t.buffer);
  if (!b) fail("a tensor is not in a Vulkan buffer");
  return b->allocation();
}

// Each tensor is bound from its offset rounded down to 256 bytes (a multiple of every device's
// storage/texel offset alignment), so a tensor deep inside a large arena or weight file is still
// within maxStorageBufferRange / maxTexelBufferElements of its binding; kernels get offsets
// relative to that base (off()).
uint64_t OpEnv::base(const TensorRef& t) {
  return t.offset / 256 * 256;
}

void OpEnv::check_in_buffer(const TensorRef& t) const {
  if (t.offset + t.desc.bytes() > t.buffer->size())
    fail(fmt::format("tensor {} at offset {} ({} bytes) runs past the end of its {}-byte buffer", t.desc.str(),
                     t.offset, t.desc.bytes(), t.buffer->size()));
}

Arg OpEnv::tex(const TensorRef& t, VkFormat f) const {
  const Allocation& a = alloc(t);
  uint64_t texel = (f == VK_FORMAT_R32G32B32A32_SFLOAT || f == VK_FORMAT_R32G32B32A32_UINT) ? 16
                   : f == VK_FORMAT_R16G16B16A16_SFLOAT                                     ? 8
                                                                                            : 4;
  uint64_t b = base(t);
  check_in_buffer(t);
  // texel_reach is maxTexelBufferElements 16-byte texels; a view of smaller texels reaches less.
  uint64_t reach = std::min<uint64_t>(a.size - b, dev.policy().texel_reach / 16 * texel) / texel * texel;
  if (t.offset - b + t.desc.bytes() > reach)
    fail(fmt::format("tensor {} ({} bytes) exceeds the device's texel-buffer reach ({} bytes); split it", t.desc.str(),
                     t.desc.bytes(), reach));
  return Arg{&a, f, false, t.offset, t.desc.bytes(), b};
}

Arg OpEnv::ssbo(const TensorRef& t, bool write) const {
  const Allocation& a = alloc(t);
  uint64_t b = base(t);
  check_in_buffer(t);
  uint64_t reach = std::min<uint64_t>(a.size - b, dev.context().info().max_storage_range);
  if (t.offset - b + t.desc.bytes() > reach)
    fail(fmt::format("tensor {} ({} bytes) exceeds maxStorageBufferRange ({} bytes); split it", t.desc.str(),
                     t.desc.bytes(), reach));
  return Arg{&a, VK_FORMAT_UNDEFINED, write, t.offset, t.desc.bytes(), b};
}

uint32_t OpEnv::off(const TensorRef& t, uint32_t elem_bytes) const {
  uint64_t rel = t.offset - base(t);
  if (rel % elem_bytes) fail(fmt::format("tensor offset {} is not a multiple of {} bytes", t.offset, elem_bytes));
  return static_cast<uint32_t>(rel / elem_bytes);
}

const Pipeline& OpEnv::pipeline(const std::string& shader, const std::vector<Bind>& b,
                                const std::vector<uint32_t>& spec) const {
  return dev.pipelines().get(shader, b, spec);
}

std::string OpEnv::label() const {
  std::string s = op_name(node.op);
  if (node.op == KILN_OP_MATMUL || node.op == KILN_OP_MOE_MATMUL || node.op == KILN_OP_GET_ROWS)
    s += std::string(" ") + dtype_name(node.src[node.op == KILN_OP_GET_ROWS ? 0 : 1].desc.dtype);
  return s;
}

void OpEnv::dispatch(const Pipeline& p, const std::vector<Arg>& args, const std::vector<uint32_t>& push, uint32_t gx,
                     uint32_t gy, uint32_t gz) const {
  std::string l = label();
  rec.dispatch(p, args, push.data(), static_cast<uint32_t>(push.size() * 4), gx, gy, gz, l.c_str());
}

void OpEnv::dispatch_items(const Pipeline& p, const std::vector<Arg>& args, const std::vector<uint32_t>& push,
                           uint64_t items, uint32_t per_group) const {
  uint64_t groups = (items + per_group - 1) / per_group;
  if (!groups) return;
  uint64_t maxx = dev.context().info().max_groups[0];
  uint32_t gx = static_cast<uint32_t>(std::min(groups, maxx));
  uint32_t gy = static_cast<uint32_t>((groups + gx - 1) / gx);
  dispatch(p, args, push, gx, gy);
}

void OpEnv::fail(const std::string& what) const {
  throw BackendError(BackendError::Kind::invalid,
                     fmt::format("[backend vulkan] {}: {}", backend::describe(node), what));
}

// ------------------------------------------------------------------------------------------------

namespace {

bool is_float_cache(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

// Why the Vulkan kernels cannot take a kv_q8 / kv_q4 cache, if they cannot: its rows (the last
// dim) must be a multiple of 8 values (kv_group; an 8-dim group then has one scale) and start on
// a 4-byte boundary (the kernels address them in 32-bit words; rows are a multiple of 4 bytes).
std::optional<std::string> kv_cache_refusal(const TensorRef& t) {
  if (!kv_group(t.desc.last()))
    return fmt::format("{} rows of {} values (a multiple of 8 needed)", dtype_name(t.desc.dtype), t.desc.last());
  if (t.offset % 4)
    return fmt::format("{} cache at offset {} (a multiple of 4 bytes needed)", dtype_name(t.desc.dtype), t.offset);
  return std::nullopt;
}

}  // namespace

Support vulkan_supports(const VulkanDevice& dev, const backend::Node& n) {
  const DeviceInfo& d = const_cast<VulkanDevice&>(dev).context().info();
  auto src = [&](int i) -> const backend::TensorDesc& { return n.src[static_cast<size_t>(i)].desc; };
  auto f32 = [&](int i) { return src(i).dtype == DType::f32; };
  for (uint32_t i = 0; i < n.n_src; ++i)
    if (n.src[i].desc.numel() > INT32_MAX || n.src[i].offset / 2 > UINT32_MAX)
      return Support::no(fmt::format("source {} has more than 2^31 elements", i));
  switch (n.op) {
    case KILN_OP_MATMUL:
    case KILN_OP_MOE_MATMUL: {
      DType w = src(1).dtype;
      if (!f32(0)) return Support::no(fmt::format("{} activations (f32 only)", dtype_name(src(0).dtype)));
      if (!backend::is_weight_dtype(w)) return Support::no(fmt::format("{} weights", dtype_name(w)));
      if (is_quantized(w) && n.src[1].offset % 2) return Support::no("quantized weights at an odd byte offset");
      return Support::yes();
    }
    case KILN_OP_GET_ROWS: {
      DType w = src(0).dtype;
      if (!backend::is_weight_dtype(w)) return Support::no(fmt::format("{} tables", dtype_name(w)));
      if (is_quantized(w) && n.src[0].offset % 2) return Support::no("quantized table at an odd byte offset");
      return Support::yes();
    }
    case KILN_OP_SET_ROWS:
      if (!is_float_cache(src(0).dtype) && !is_kv_quantized(src(0).dtype))
        return Support::no(fmt::format("{} destination", dtype_name(src(0).dtype)));
      if (src(0).dtype != DType::f32 && !d.storage16)  // kv formats: their f16 scales
        return Support::no("16-bit destination without storageBuffer16BitAccess");
      if (is_kv_quantized(src(0).dtype)) {
        if (auto why = kv_cache_refusal(n.src[0])) return Support::no(*why);
        // Each slot's values quantized as whole rows of the destination's last dim.
        const int64_t slots = src(2).numel(), hd = src(0).last();
        if (slots && src(1).numel() % (slots * hd))
          return Support::no(fmt::format("rows of {} values per slot are not whole {}-value {} rows",
                                         src(1).numel() / slots, hd, dtype_name(src(0).dtype)));
      }
      return Support::yes();
    case KILN_OP_SLICE:
    case KILN_OP_CONCAT:
      if (is_packed(src(0).dtype)) return Support::no("quantized tensors");
      return Support::yes();
    case KILN_OP_ADD:
    case KILN_OP_MUL:
      if (!f32(0) || !f32(1)) return Support::no("non-f32 operands");
      return Support::yes();
    case KILN_OP_SCALE:
    case KILN_OP_SILU:
    case KILN_OP_GELU_TANH:
    case KILN_OP_SIGMOID:
    case KILN_OP_SOFTPLUS:
    case KILN_OP_SOFTCAP:
    case KILN_OP_EXP:
    case KILN_OP_L2_NORM:
    case KILN_OP_SOFTMAX:
    case KILN_OP_RMS_NORM:
    case KILN_OP_ROPE:
    case KILN_OP_TOP_K:
    case KILN_OP_MOE_SUM:
      if (!f32(0)) return Support::no(fmt::format("{} input (f32 only)", dtype_name(src(0).dtype)));
      if (n.op == KILN_OP_TOP_K && n.params.k > kTopKMost) return Support::no(fmt::format("k > {}", kTopKMost));
      return Support::yes();
    case KILN_OP_MOE_WEIGHTS:
      if (n.params.k > 64 || (n.src[1].desc.ndim == 2 && n.src[1].desc.ne[1] > 64))
        return Support::no("more than 64 experts per token");
      return Support::yes();
    case KILN_OP_ATTENTION: {
      for (int i : {1, 2}) {
        if (is_kv_quantized(src(i).dtype)) {
          if (auto why = kv_cache_refusal(n.src[static_cast<size_t>(i)])) return Support::no(*why);
        } else if (!is_float_cache(src(i).dtype)) {
          return Support::no(fmt::format("{} / {} cache", dtype_name(src(1).dtype), dtype_name(src(2).dtype)));
        }
      }
      int64_t dk = src(0).ndim == 3 ? src(0).ne[2] : 0, dv = src(2).ndim == 4 ? src(2).ne[3] : 0;
      const int64_t max_d = 8 * static_cast<int64_t>(attention_max_groups(dev.policy()));
      if (dk > max_d || dv > max_d) return Support::no(fmt::format("head dim {} / {} > {}", dk, dv, max_d));
      return Support::yes();
    }
    case KILN_OP_CONV1D_CAUSAL:
      if (src(1).ndim == 2 && src(1).ne[1] > 16) return Support::no(fmt::format("kernel width {} > 16", src(1).ne[1]));
      return Support::yes();
    case KILN_OP_GATED_DELTA:
      if (src(0).ndim == 3 && src(0).ne[2] > 256)
        return Support::no(fmt::format("key head dim {} > 256", src(0).ne[2]));
      return Support::yes();
    default:
      return Support::no("no Vulkan kernel for this op");
  }
}

}  // namespace kiln::vk
