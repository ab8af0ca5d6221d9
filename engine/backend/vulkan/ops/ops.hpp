// Op recording on Vulkan: one function per op family records the dispatches of one node into the
// graph's command buffer, and one checks whether a node can run (supports_op). Shared helpers turn
// TensorRefs into kernel arguments and element offsets.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/vulkan/command.hpp"
#include "backend/vulkan/kernels.hpp"
#include "backend/vulkan/pipeline.hpp"

namespace kiln::vk {

class VulkanDevice;
class GraphTemps;

struct OpEnv {
  VulkanDevice& dev;
  Recorder& rec;
  const backend::Node& node;
  const Allocation& flags;  ///< the executable's error flags (words 0-4) and a sink (word 7)
  GraphTemps& temps;        ///< the executable's small tables and scratch

  const Allocation& alloc(const backend::TensorRef& t) const;
  /** Texel-view argument over t's allocation (offsets go in push constants). */
  Arg tex(const backend::TensorRef& t, VkFormat f) const;
  Arg ssbo(const backend::TensorRef& t, bool write = false) const;
  /** Fails with a clear message when t does not fit in its buffer. */
  void check_in_buffer(const backend::TensorRef& t) const;
  /** Binding start of t within its allocation (t.offset rounded down to 256). */
  static uint64_t base(const backend::TensorRef& t);
  /** (t.offset - base(t)) / elem_bytes: the element offset kernels add, checking divisibility. */
  uint32_t off(const backend::TensorRef& t, uint32_t elem_bytes) const;
  const Pipeline& pipeline(const std::string& shader, const std::vector<Bind>& b,
                           const std::vector<uint32_t>& spec) const;
  void dispatch(const Pipeline& p, const std::vector<Arg>& args, const std::vector<uint32_t>& push, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1) const;
  /** One 64-wide workgroup per 64 items, folded into y beyond the x grid limit. */
  void dispatch_items(const Pipeline& p, const std::vector<Arg>& args, const std::vector<uint32_t>& push,
                      uint64_t items, uint32_t per_group = 64) const;
  [[noreturn]] void fail(const std::string& what) const;
  std::string label() const;
};

inline uint32_t fbits(float f) {
  return std::bit_cast<uint32_t>(f);
}
/** Whether two tensors share any byte. */
inline bool overlap(const backend::TensorRef& p, const backend::TensorRef& q) {
  return p.buffer == q.buffer && p.offset < q.offset + q.desc.bytes() && q.offset < p.offset + p.desc.bytes();
}
/** Disjoint, or exactly the same bytes: safe for a fused kernel whose invocations read and write
 *  only their own elements. */
inline bool disjoint_or_same(const backend::TensorRef& p, const backend::TensorRef& q) {
  return !overlap(p, q) || (p.offset == q.offset && p.desc.bytes() == q.desc.bytes());
}

/** TOP_K rows at least this long, or k over 64, take the workgroup-per-row kernel (top_k_rows.comp);
 *  k is at most kTopKMost. */
constexpr int64_t kTopKRowsFrom = 1024, kTopKMost = 1024;

inline uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}

/** MATMUL, MOE_MATMUL; with siblings: those MATMULs too, in the same dispatch. */
void record_matmul(const OpEnv& e, const backend::Node* siblings = nullptr, size_t n_siblings = 0);
/** How many MATMULs from nodes[i] on (1-3) record_matmul can run as one dispatch. */
size_t fusable_matmuls(VulkanDevice& dev, const std::vector<backend::Node>& nodes, size_t i);
/** ADD, MUL, unary ops; `pre`: a unary op right before an ADD/MUL that reads its result, run in
 *  the same dispatch (see fuses_unary_binary). */
void record_elementwise(const OpEnv& e, const backend::Node* pre = nullptr);
/** Whether unary `un` followed by ADD/MUL `bin` reading its result (as a) can be one dispatch. */
bool fuses_unary_binary(const backend::Node& un, const backend::Node& bin);
/** RMS_NORM, L2_NORM, SOFTMAX; `add`: the ADD right before an RMS_NORM of its result, run in the
 *  same dispatch (see fuses_add_norm); `rope`: a ROPE right after it of its output, likewise
 *  (see fuses_norm_rope). */
void record_norm(const OpEnv& e, const backend::Node* add = nullptr, const backend::Node* rope = nullptr,
                 const backend::Node* norm2 = nullptr, const backend::Node* rope2 = nullptr);
/** Whether norm+rope pairs (n1, r1) and (n2, r2) (Qwen3's q and k heads) can run as one
 *  dispatch: each pair fuses, same parameters and positions, each of x/w/o/r of the two in one
 *  buffer within a binding's reach, and no write of one touching what the other reads or writes. */
bool fuses_norm_rope_pair(VulkanDevice& dev, const backend::Node& n1, const backend::Node& r1, const backend::Node& n2,
                          const backend::Node& r2);
/** Whether `norm` (RMS, not gated) followed by a `rope` of its output can be one dispatch. */
bool fuses_norm_rope(const backend::Node& norm, const backend::Node& rope);
/** Whether `add` followed by `norm` can run as one dispatch (same shapes, norm reads the sum, no
 *  overlaps that would mix elements between lanes). */
bool fuses_add_norm(const backend::Node& add, const backend::Node& norm);
void record_rope(const OpEnv& e);
void record_data(const OpEnv& e);  // GET_ROWS, SET_ROWS, SLICE, CONCAT
/** SET_ROWS; `second`: the SET_ROWS right after it, run in the same dispatch (fuses_set_rows). */
void record_set_rows(const OpEnv& e, const backend::Node* second = nullptr);
/** Whether two SET_ROWS with the same slots and destination dtype (a layer's K and V cache
 *  writes) can be one dispatch: no write overlaps the other's reads or write. */
bool fuses_set_rows(VulkanDevice& dev, const backend::Node& a, const backend::Node& b);
void record_attention(const OpEnv& e);
void record_recurrent(const OpEnv& e);  // CONV1D_CAUSAL, GATED_DELTA
void record_moe(const OpEnv& e);        // TOP_K, MOE_WEIGHTS, MOE_SUM

/** KILN_VULKAN_NO_FUSE=1: record every node as its own dispatch (A/B benchmarks and tests). */
bool fuse_off();

/** Op/dtype/shape capability check for this device (cheap, content independent). */
backend::Support vulkan_supports(const VulkanDevice& dev, const backend::Node& n);

}  // namespace kiln::vk
