// Compute pipelines built on demand from the embedded SPIR-V, keyed by shader name + binding
// layout + specialization constants, with a VkPipelineCache persisted on disk (lavapipe JITs on
// first dispatch regardless; real GPUs save their compile time there).
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/vulkan/context.hpp"

namespace kiln::vk {

enum class Bind : uint8_t {
  texel,    ///< VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER (read-only, fast on lavapipe)
  storage,  ///< VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
};

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  std::vector<Bind> bindings;
  uint32_t local_size = 1;
  std::string name;  ///< shader name + spec constants, for profiles and errors
};

class Pipelines {
 public:
  explicit Pipelines(Context& ctx);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  /** spec[0] is the local size (constant_id 0); spec[i] is constant_id i. */
  const Pipeline& get(const std::string& shader, const std::vector<Bind>& bindings, const std::vector<uint32_t>& spec);
  static constexpr uint32_t kPushBytes = 128;  ///< the guaranteed minimum maxPushConstantsSize
  size_t size() const;
  /** "shader<spec0,spec1,...>" of every pipeline created so far (tests check variant choices). */
  std::vector<std::string> labels() const;

 private:
  Context& ctx_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  mutable std::mutex mu_;
  std::map<std::string, Pipeline> pipelines_;
  std::map<std::string, VkShaderModule> modules_;
};

}  // namespace kiln::vk
