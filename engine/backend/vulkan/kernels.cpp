#include "backend/vulkan/kernels.hpp"

#include <algorithm>
#include <cstdlib>

namespace kiln::vk {

KernelPolicy choose_policy(const DeviceInfo& d) {
  KernelPolicy p;
  p.subgroup = d.subgroup_size;
  p.row_local_size = d.subgroup_size;
  p.texel_weights = true;  // see kernels.hpp: fastest on lavapipe, good on GPUs
  p.texel_reach = d.max_texel_elements * 16;
  if (const char* r = std::getenv("KILN_VULKAN_TEXEL_REACH"); r && *r)
    p.texel_reach = std::min<uint64_t>(p.texel_reach, std::max<uint64_t>(std::strtoull(r, nullptr, 10), 1024));
  return p;
}

MatmulPlan KernelPolicy::matmul(backend::DType w, int64_t R, int64_t K, bool operands_aligned, bool moe) const {
  MatmulPlan m;
  m.local_size = subgroup;
  m.aligned = operands_aligned && K % 8 == 0;
  m.tn = 4;
  // Decode-sized batches: one activation row per workgroup (weights streamed once per row is the
  // bandwidth bound anyway). Larger batches: share each weight load across TM rows. The tile never
  // changes a row's reduction order (matmul.comp), so this choice keeps batch invariance.
  if (moe || R < 4) m.tm = 1;
  else if (backend::is_quantized(w)) m.tm = 4;  // a 32-block of activations per row lives in registers
  else m.tm = 8;
  return m;
}

}  // namespace kiln::vk
