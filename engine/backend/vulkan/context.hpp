// Vulkan instance, physical-device choice and logical device: the one object every other file of
// the Vulkan backend hangs off. Creating it never aborts: every failure is a kiln::HostError whose
// message starts with "[vulkan]" and says what to do (install a driver, pin an ICD, ...).
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <mutex>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::vk {

/** Throws HostError "[vulkan] <what>: <VkResult name> (<hint>)" when r is not VK_SUCCESS. */
void check(VkResult r, const char* what);
const char* result_name(VkResult r);

struct ContextOptions {
  /** Device index ("0") or case-insensitive substring of its name; empty = best by type.
   *  The environment variable KILN_VULKAN_DEVICE overrides it. */
  std::string device;
  /** Physical device index (vkEnumeratePhysicalDevices order); >= 0 wins over `device` and the
   *  environment (the registry opens each device this way). */
  int index = -1;
  /** Enable VK_LAYER_KHRONOS_validation and count its messages (also KILN_VULKAN_VALIDATION=1). */
  bool validation = false;
};

/** What kernels and the allocator need to know about the chosen device. */
struct DeviceInfo {
  std::string name;
  uint32_t index = 0;  ///< in vkEnumeratePhysicalDevices order (the N of "vulkan:N")
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0;
  VkDriverId driver_id = {};
  uint32_t api_version = 0;
  uint32_t subgroup_size = 1;
  bool subgroup_arithmetic = false;
  bool is_lavapipe = false;
  bool shader_float16 = false, shader_int8 = false, storage16 = false, storage8 = false;
  bool host_import = false;              ///< VK_EXT_external_memory_host enabled
  uint64_t min_import_alignment = 4096;
  bool pin_subgroup = false;          ///< subgroupSizeControl + computeFullSubgroups enabled (1.3)
  bool timestamps = false;
  double timestamp_period_ns = 1.0;
  uint32_t timestamp_valid_bits = 0;
  uint64_t max_storage_range = 0, max_texel_elements = 0, max_alloc_size = 0;
  uint64_t storage_align = 16, texel_align = 16;
  uint32_t max_groups[3] = {65535, 65535, 65535};
  uint32_t max_push_constants = 128;
  uint32_t max_shared_bytes = 16384;     ///< maxComputeSharedMemorySize
  uint64_t device_local_bytes = 0;       ///< size of the largest DEVICE_LOCAL heap
  std::string type_name() const;
};

class Context {
 public:
  explicit Context(const ContextOptions& opts = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkInstance instance() const { return instance_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  /** vkQueueSubmit must not race on one queue: take this around submits. */
  std::mutex& queue_mutex() { return queue_mu_; }
  uint32_t queue_family() const { return queue_family_; }
  const DeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceMemoryProperties& memory_properties() const { return mem_props_; }

  /** Messages VK_LAYER_KHRONOS_validation reported (warnings and errors) since creation. */
  uint64_t validation_messages() const { return validation_messages_.load(); }
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  /** The last validation message, for test failures. */
  std::string last_validation_message() const;

  PFN_vkGetMemoryHostPointerPropertiesEXT get_host_pointer_props = nullptr;

  /** Number of physical devices the loader reports (0 when no loader/driver works). */
  static uint32_t count_devices();
  /** One line per Vulkan device the loader sees ("0: llvmpipe (cpu)"), for messages and `kiln`. */
  static std::vector<std::string> list_devices();

 private:
  void create_instance(bool validation);
  void pick_device(const std::string& want, int index);
  void create_device();

  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  DeviceInfo info_;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  std::atomic<uint64_t> validation_messages_{0};
  mutable std::mutex message_mu_;
  std::mutex queue_mu_;
  std::string last_message_;

  friend VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                       VkDebugUtilsMessageTypeFlagsEXT,
                                                       const VkDebugUtilsMessengerCallbackDataEXT*, void*);
};

}  // namespace kiln::vk
