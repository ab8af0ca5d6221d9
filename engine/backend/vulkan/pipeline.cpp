#include "backend/vulkan/pipeline.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/log.hpp"
#include "kiln_backend_vulkan_shaders.hpp"

namespace kiln::vk {

namespace {

std::string default_cache_path(const DeviceInfo& d) {
  if (const char* p = std::getenv("KILN_VULKAN_PIPELINE_CACHE")) return p;  // "" disables
  std::filesystem::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::filesystem::path(h) / ".cache";
  else
    return {};
  std::string dev;
  for (char c : d.name) dev += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return (base / "kiln" / fmt::format("vk-pipelines-{:04x}-{}.bin", d.vendor_id, dev)).string();
}

}  // namespace

Pipelines::Pipelines(Context& ctx) : ctx_(ctx) {
  cache_path_ = default_cache_path(ctx.info());
  std::vector<char> data;
  if (!cache_path_.empty()) {
    std::ifstream in(cache_path_, std::ios::binary);
    if (in) data.assign(std::istreambuf_iterator<char>(in), {});
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = data.size();  // the driver checks the header and ignores a foreign blob
  ci.pInitialData = data.empty() ? nullptr : data.data();
  if (vkCreatePipelineCache(ctx.device(), &ci, nullptr, &cache_) != VK_SUCCESS) {
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    check(vkCreatePipelineCache(ctx.device(), &ci, nullptr, &cache_), "vkCreatePipelineCache");
  }
}

Pipelines::~Pipelines() {
  VkDevice dev = ctx_.device();
  if (!cache_path_.empty() && cache_) {
    size_t n = 0;
    if (vkGetPipelineCacheData(dev, cache_, &n, nullptr) == VK_SUCCESS && n) {
      std::vector<char> data(n);
      if (vkGetPipelineCacheData(dev, cache_, &n, data.data()) == VK_SUCCESS) {
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(cache_path_).parent_path(), ec);
        std::string tmp = cache_path_ + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
        std::ofstream out(tmp, std::ios::binary);
        if (out.write(data.data(), static_cast<std::streamsize>(n))) {
          out.close();
          std::filesystem::rename(tmp, cache_path_, ec);  // atomic: concurrent processes never see half a file
        }
        if (ec) std::filesystem::remove(tmp, ec);
      }
    }
  }
  for (auto& [k, p] : pipelines_) {
    vkDestroyPipeline(dev, p.pipeline, nullptr);
    vkDestroyPipelineLayout(dev, p.layout, nullptr);
    vkDestroyDescriptorSetLayout(dev, p.set_layout, nullptr);
  }
  for (auto& [k, m] : modules_) vkDestroyShaderModule(dev, m, nullptr);
  if (cache_) vkDestroyPipelineCache(dev, cache_, nullptr);
}

size_t Pipelines::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pipelines_.size();
}

std::vector<std::string> Pipelines::labels() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, p] : pipelines_) out.push_back(key.substr(key.rfind(':') + 2));
  return out;
}

const Pipeline& Pipelines::get(const std::string& shader, const std::vector<Bind>& bindings,
                               const std::vector<uint32_t>& spec) {
  std::string key = shader;
  for (Bind b : bindings) key += b == Bind::texel ? ":t" : ":s";
  std::string label = shader;
  for (size_t i = 0; i < spec.size(); ++i) label += (i ? "," : "<") + std::to_string(spec[i]);
  if (!spec.empty()) label += ">";
  key += label;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  VkDevice dev = ctx_.device();
  VkShaderModule& mod = modules_[shader];
  if (!mod) {
    auto words = kiln_vulkan_shaders::find_shader(shader);
    if (words.empty()) {
      modules_.erase(shader);
      throw_error("[vulkan] internal: shader '{}' is not embedded (add it to engine/backend/vulkan/CMakeLists.txt)",
                  shader);
    }
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = words.size() * 4;
    mi.pCode = words.data();
    check(vkCreateShaderModule(dev, &mi, nullptr, &mod), "vkCreateShaderModule");
  }

  Pipeline p;
  p.bindings = bindings;
  p.name = label;
  p.local_size = spec.empty() ? 1 : spec[0];
  std::vector<VkDescriptorSetLayoutBinding> lb(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    lb[i].binding = static_cast<uint32_t>(i);
    lb[i].descriptorType =
        bindings[i] == Bind::texel ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    lb[i].descriptorCount = 1;
    lb[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = static_cast<uint32_t>(lb.size());
  li.pBindings = lb.data();
  check(vkCreateDescriptorSetLayout(dev, &li, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &p.set_layout;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pr;
  check(vkCreatePipelineLayout(dev, &pli, nullptr, &p.layout), "vkCreatePipelineLayout");

  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) entries[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(i * 4), 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  // Kernels that reduce with subgroup ops run one subgroup per workgroup: pin its size.
  const DeviceInfo& d = ctx_.info();
  bool subgroup_kernel =
      shader.rfind("matmul_", 0) == 0 || shader == "norm" || shader == "softmax" || shader == "attention";
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rs{
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  if (d.pin_subgroup && subgroup_kernel && p.local_size % d.subgroup_size == 0) {
    rs.requiredSubgroupSize = d.subgroup_size;
    ci.stage.pNext = &rs;
    ci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  ci.layout = p.layout;
  check(vkCreateComputePipelines(dev, cache_, 1, &ci, nullptr, &p.pipeline), "vkCreateComputePipelines");
  log::debug("[vulkan] pipeline {}", label);
  return pipelines_.emplace(key, std::move(p)).first->second;
}

}  // namespace kiln::vk
