#include "backend/vulkan/context.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::vk {

const char* result_name(VkResult r) {
  switch (r) {
#define K(x) \
  case x:    \
    return #x;
    K(VK_SUCCESS) K(VK_NOT_READY) K(VK_TIMEOUT) K(VK_INCOMPLETE) K(VK_ERROR_OUT_OF_HOST_MEMORY)
    K(VK_ERROR_OUT_OF_DEVICE_MEMORY) K(VK_ERROR_INITIALIZATION_FAILED) K(VK_ERROR_DEVICE_LOST)
    K(VK_ERROR_MEMORY_MAP_FAILED) K(VK_ERROR_LAYER_NOT_PRESENT) K(VK_ERROR_EXTENSION_NOT_PRESENT)
    K(VK_ERROR_FEATURE_NOT_PRESENT) K(VK_ERROR_INCOMPATIBLE_DRIVER) K(VK_ERROR_TOO_MANY_OBJECTS)
    K(VK_ERROR_FORMAT_NOT_SUPPORTED) K(VK_ERROR_FRAGMENTED_POOL) K(VK_ERROR_OUT_OF_POOL_MEMORY)
    K(VK_ERROR_INVALID_EXTERNAL_HANDLE) K(VK_ERROR_UNKNOWN)
#undef K
    default:
      return "VkResult(?)";
  }
}

void check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  const char* hint = "";
  switch (r) {
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      hint = " (no Vulkan driver: install mesa-vulkan-drivers for lavapipe or a GPU driver, or set "
             "VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json)";
      break;
    case VK_ERROR_INITIALIZATION_FAILED:
      hint = " (a driver is installed but found no device; pin lavapipe with "
             "VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json)";
      break;
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      hint = " (free memory: smaller cache.memory, fewer sequences or a smaller model)";
      break;
    case VK_ERROR_DEVICE_LOST:
      hint = " (the device was lost: a kernel faulted or the driver reset; restart the process)";
      break;
    default:
      break;
  }
  throw_error("[vulkan] {}: {}{}", what, result_name(r), hint);
}

std::string DeviceInfo::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* self = static_cast<Context*>(user);
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    self->validation_messages_.fetch_add(1);
    std::string msg = data && data->pMessage ? data->pMessage : "(no message)";
    log::error("[vulkan] validation: {}", msg);
    std::lock_guard<std::mutex> lock(self->message_mu_);
    self->last_message_ = std::move(msg);
  }
  return VK_FALSE;
}

std::string Context::last_validation_message() const {
  std::lock_guard<std::mutex> lock(message_mu_);
  return last_message_;
}

namespace {

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

bool has_instance_ext(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

bool has_device_ext(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::vector<VkPhysicalDevice> enumerate(VkInstance inst) {
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices(inst, &n, nullptr);
  if (r == VK_ERROR_INITIALIZATION_FAILED) n = 0;  // only hardware ICDs and no GPU: same as none
  else check(r, "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> devs(n);
  if (n) check(vkEnumeratePhysicalDevices(inst, &n, devs.data()), "vkEnumeratePhysicalDevices");
  return devs;
}

}  // namespace

Context::Context(const ContextOptions& opts) {
  std::string want = opts.device;
  if (const char* env = std::getenv("KILN_VULKAN_DEVICE"); env && *env) want = env;
  bool validation = opts.validation || env_true("KILN_VULKAN_VALIDATION");
  try {
    create_instance(validation);
    pick_device(want, opts.index);
    create_device();
  } catch (...) {
    if (device_) vkDestroyDevice(device_, nullptr);
    if (messenger_) {
      auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
      if (destroy) destroy(instance_, messenger_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
    throw;
  }
}

Context::~Context() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    vkDestroyDevice(device_, nullptr);
  }
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

void Context::create_instance(bool validation) {
  uint32_t loader_version = VK_API_VERSION_1_0;
  auto enum_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (enum_version) enum_version(&loader_version);
  if (loader_version < VK_API_VERSION_1_2)
    throw_error("[vulkan] the Vulkan loader is {}.{}; kiln needs 1.2 or newer (update libvulkan1)",
                VK_API_VERSION_MAJOR(loader_version), VK_API_VERSION_MINOR(loader_version));

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);

  std::vector<const char*> layers, exts;
  if (validation) {
    if (!has_layer("VK_LAYER_KHRONOS_validation"))
      throw_error("[vulkan] validation was asked for (KILN_VULKAN_VALIDATION=1) but VK_LAYER_KHRONOS_validation "
                  "is not installed (apt-get install vulkan-validationlayers)");
    layers.push_back("VK_LAYER_KHRONOS_validation");
  }
  // The messenger also catches messages from a layer enabled through VK_INSTANCE_LAYERS.
  bool debug_utils = has_instance_ext(VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
                     (validation || std::getenv("VK_INSTANCE_LAYERS") != nullptr);
  if (debug_utils) exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  check(vkCreateInstance(&ci, nullptr, &instance_), "vkCreateInstance");

  if (debug_utils) {
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = debug_callback;
    mi.pUserData = this;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create) check(create(instance_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
  }
}

uint32_t Context::count_devices() { return static_cast<uint32_t>(list_devices().size()); }

std::vector<std::string> Context::list_devices() {
  // One instance for the whole process, never destroyed. Destroying an instance makes the loader
  // dlclose every driver it probed, so whatever a driver leaked while probing (Mesa's drivers leak
  // a little on hosts without their hardware) would be reported from an unmapped "<unknown
  // module>" that no LeakSanitizer suppression can name. Kept open, the drivers stay mapped and
  // device.cpp's suppressions match them by name.
  static const VkInstance inst = [] {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    VkInstance i = VK_NULL_HANDLE;
    return vkCreateInstance(&ci, nullptr, &i) == VK_SUCCESS ? i : VK_NULL_HANDLE;
  }();
  std::vector<std::string> out;
  if (!inst) return out;
  try {
    auto devs = enumerate(inst);
    for (size_t i = 0; i < devs.size(); ++i) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(devs[i], &p);
      DeviceInfo d;
      d.type = p.deviceType;
      out.push_back(std::to_string(i) + ": " + p.deviceName + " (" + d.type_name() + ")");
    }
  } catch (...) {
  }
  return out;
}

void Context::pick_device(const std::string& want, int index) {
  auto devs = enumerate(instance_);
  if (devs.empty())
    throw_error("[vulkan] no Vulkan device found (install mesa-vulkan-drivers for the lavapipe CPU device or a "
                "GPU driver; VK_LOADER_DEBUG=driver shows what the loader tried)");
  std::vector<VkPhysicalDeviceProperties> props(devs.size());
  for (size_t i = 0; i < devs.size(); ++i) vkGetPhysicalDeviceProperties(devs[i], &props[i]);

  size_t pick = devs.size();
  if (index >= 0) {
    if (static_cast<size_t>(index) >= devs.size())
      throw_error("[vulkan] device index {} but the loader reports {} device(s)", index, devs.size());
    pick = static_cast<size_t>(index);
  } else if (!want.empty()) {
    bool numeric = std::all_of(want.begin(), want.end(), [](unsigned char c) { return std::isdigit(c); });
    if (numeric) {
      size_t idx = std::stoul(want);
      if (idx < devs.size()) pick = idx;
    } else {
      for (size_t i = 0; i < devs.size() && pick == devs.size(); ++i)
        if (lower(props[i].deviceName).find(lower(want)) != std::string::npos) pick = i;
    }
    if (pick == devs.size()) {
      std::string names;
      for (size_t i = 0; i < devs.size(); ++i) names += fmt::format("{}{}: {}", i ? ", " : "", i, props[i].deviceName);
      throw_error("[vulkan] no Vulkan device matches '{}' (KILN_VULKAN_DEVICE or backend.device); devices: {}", want,
                  names);
    }
  } else {
    for (size_t i = 0; i < devs.size(); ++i) {
      if (props[i].apiVersion < VK_API_VERSION_1_2) continue;
      if (pick == devs.size() || type_rank(props[i].deviceType) < type_rank(props[pick].deviceType)) pick = i;
    }
    if (pick == devs.size())
      throw_error("[vulkan] no Vulkan 1.2 device found ({} device(s) all older); update the driver", devs.size());
  }
  physical_ = devs[pick];
  const auto& p = props[pick];
  if (p.apiVersion < VK_API_VERSION_1_2)
    throw_error("[vulkan] device '{}' supports Vulkan {}.{}; kiln needs 1.2", p.deviceName,
                VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));

  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceVulkan12Properties p12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  sg.pNext = &p12;
  p12.pNext = &m3;
  bool import_ext = has_device_ext(physical_, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  if (import_ext) m3.pNext = &hostp;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  vkGetPhysicalDeviceProperties2(physical_, &p2);

  info_.name = p.deviceName;
  info_.index = static_cast<uint32_t>(pick);
  info_.type = p.deviceType;
  info_.vendor_id = p.vendorID;
  info_.driver_id = p12.driverID;
  info_.api_version = p.apiVersion;
  info_.subgroup_size = sg.subgroupSize;
  info_.subgroup_arithmetic = (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                              (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
  info_.is_lavapipe = p12.driverID == VK_DRIVER_ID_MESA_LLVMPIPE;
  info_.host_import = import_ext;
  info_.min_import_alignment = import_ext ? hostp.minImportedHostPointerAlignment : 4096;
  info_.timestamp_period_ns = p.limits.timestampPeriod;
  info_.max_storage_range = p.limits.maxStorageBufferRange;
  info_.max_texel_elements = p.limits.maxTexelBufferElements;
  info_.max_alloc_size = m3.maxMemoryAllocationSize;
  info_.storage_align = p.limits.minStorageBufferOffsetAlignment;
  info_.texel_align = p.limits.minTexelBufferOffsetAlignment;
  for (int i = 0; i < 3; ++i) info_.max_groups[i] = p.limits.maxComputeWorkGroupCount[i];
  info_.max_push_constants = p.limits.maxPushConstantsSize;
  info_.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
  if (!info_.subgroup_arithmetic)
    throw_error("[vulkan] device '{}' lacks subgroup arithmetic in compute shaders, which kiln's kernels need; "
                "choose another device with KILN_VULKAN_DEVICE", info_.name);

  vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
  for (uint32_t i = 0; i < mem_props_.memoryHeapCount; ++i)
    if (mem_props_.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info_.device_local_bytes = std::max<uint64_t>(info_.device_local_bytes, mem_props_.memoryHeaps[i].size);
}

void Context::create_device() {
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, qf.data());
  // Prefer a compute-only family (async compute on GPUs), else the first with compute.
  uint32_t pick = nq;
  for (uint32_t i = 0; i < nq; ++i)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) pick = i;
  for (uint32_t i = 0; i < nq && pick == nq; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) pick = i;
  if (pick == nq) throw_error("[vulkan] device '{}' has no compute queue", info_.name);
  queue_family_ = pick;
  info_.timestamp_valid_bits = qf[pick].timestampValidBits;
  info_.timestamps = qf[pick].timestampValidBits > 0;

  const bool v13 = info_.api_version >= VK_API_VERSION_1_3;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  f11.pNext = &f12;
  if (v13) f12.pNext = &f13;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f11;
  vkGetPhysicalDeviceFeatures2(physical_, &f2);

  // Enable only what kernels use (extra features can cost speed on some drivers).
  VkPhysicalDeviceVulkan11Features e11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  e11.pNext = &e12;
  e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
  e12.shaderFloat16 = f12.shaderFloat16;
  e12.shaderInt8 = f12.shaderInt8;
  e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
  e12.hostQueryReset = f12.hostQueryReset;
  // Kernels assume one workgroup == one subgroup of the reported size. Drivers may otherwise pick
  // another width for compute (Intel SIMD8/16/32, AMD wave32/64), so pin it where Vulkan 1.3 allows.
  VkPhysicalDeviceVulkan13Features e13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  if (v13 && f13.subgroupSizeControl && f13.computeFullSubgroups) {
    VkPhysicalDeviceVulkan13Properties p13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &p13;
    vkGetPhysicalDeviceProperties2(physical_, &p2);
    if ((p13.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) && p13.minSubgroupSize <= info_.subgroup_size &&
        info_.subgroup_size <= p13.maxSubgroupSize) {
      e13.subgroupSizeControl = VK_TRUE;
      e13.computeFullSubgroups = VK_TRUE;
      e12.pNext = &e13;
      info_.pin_subgroup = true;
    }
  }
  if (!info_.pin_subgroup && info_.vendor_id != 0x10de && !info_.is_lavapipe)
    log::warn("[vulkan] cannot pin the subgroup size on '{}' (no Vulkan 1.3 subgroupSizeControl); kernels assume "
              "{}-wide subgroups",
              info_.name, info_.subgroup_size);
  VkPhysicalDeviceFeatures2 e2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  e2.pNext = &e11;
  e2.features.shaderInt16 = f2.features.shaderInt16;
  info_.shader_float16 = f12.shaderFloat16;
  info_.shader_int8 = f12.shaderInt8;
  info_.storage16 = f11.storageBuffer16BitAccess;
  info_.storage8 = f12.storageBuffer8BitAccess;

  std::vector<const char*> exts;
  if (info_.host_import) {
    exts.push_back(VK_KHR_EXTERNAL_MEMORY_EXTENSION_NAME);
    exts.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  }
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &e2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  check(vkCreateDevice(physical_, &dci, nullptr, &device_), "vkCreateDevice");
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  if (info_.host_import)
    get_host_pointer_props = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
        vkGetDeviceProcAddr(device_, "vkGetMemoryHostPointerPropertiesEXT"));
  if (!get_host_pointer_props) info_.host_import = false;
  log::info("[vulkan] device: {} ({}, Vulkan {}.{}, subgroup {}{})", info_.name, info_.type_name(),
            VK_API_VERSION_MAJOR(info_.api_version), VK_API_VERSION_MINOR(info_.api_version), info_.subgroup_size,
            validation_enabled() ? ", validation on" : "");
}

}  // namespace kiln::vk
