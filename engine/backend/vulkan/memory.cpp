#include "backend/vulkan/memory.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::vk {

namespace {

constexpr uint64_t kAlign = 256;  // >= every device's storage/texel offset alignment we have seen
constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

std::string mib(uint64_t b) {
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
}

uint32_t texel_bytes(VkFormat f) {
  switch (f) {
    case VK_FORMAT_R32_SFLOAT:
    case VK_FORMAT_R32_UINT:
    case VK_FORMAT_R8G8B8A8_UINT:
      return 4;
    case VK_FORMAT_R32G32_UINT:
    case VK_FORMAT_R16G16B16A16_SFLOAT:
      return 8;
    case VK_FORMAT_R32G32B32A32_SFLOAT:
    case VK_FORMAT_R32G32B32A32_UINT:
      return 16;
    default:
      return 0;
  }
}

}  // namespace

Allocator::Allocator(Context& ctx) : ctx_(ctx) {
  const DeviceInfo& d = ctx.info();
  discrete_ = d.type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  if (const char* r = std::getenv("KILN_VULKAN_REBAR"); r && *r && *r != '0') prefer_rebar_ = true;
  uint64_t max_alloc = d.max_alloc_size ? d.max_alloc_size : (1ull << 30);
  // A CPU device's memory (lavapipe) is host memory from malloc: 32 MiB blocks keep a small graph's
  // footprint small. LeakSanitizer scans every live block at exit, and two 256 MiB blocks cost each
  // Vulkan test process 2.7 s of page faults and scanning under the ASan stage (0.7 s in all now).
  const uint64_t block = d.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 32ull << 20 : 256ull << 20;
  block_size_ = std::min<uint64_t>(block, max_alloc);
  dedicated_threshold_ = block_size_ / 4;
  heap_ = d.device_local_bytes;
  limit_ = heap_;
  if (const char* env = std::getenv("KILN_VULKAN_MEMORY_LIMIT"); env && *env) limit_ = std::strtoull(env, nullptr, 10);
  const auto& mp = ctx.memory_properties();
  uint32_t t = find_type(~0u, MemoryKind::device);
  device_mapped_ = mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  // KILN_VULKAN_STAGING=1: behave as on a discrete GPU (device memory not mapped, uploads and
  // downloads through staging copies) so UMA/lavapipe machines test that path too.
  // Weights are used in place from host memory only where the device reads host memory at memory
  // speed (UMA: integrated GPUs, lavapipe). A discrete GPU would read them over PCIe every step,
  // and on an H200 failed imports of file-backed pages (VK_ERROR_OUT_OF_DEVICE_MEMORY) were
  // followed by the next plain allocation failing too. KILN_VULKAN_IMPORT=0|1 overrides.
  import_off_ = discrete_;
  if (const char* im = std::getenv("KILN_VULKAN_IMPORT"); im && *im) import_off_ = *im == '0';
  if (const char* st = std::getenv("KILN_VULKAN_STAGING"); st && *st && *st != '0') no_map_device_ = true;
}

Allocator::~Allocator() {
  VkDevice dev = ctx_.device();
  for (auto& [key, vs] : views_)
    for (View& v : vs) vkDestroyBufferView(dev, v.view, nullptr);
  for (Block& b : blocks_) {
    if (b.buffer) vkDestroyBuffer(dev, b.buffer, nullptr);
    if (b.memory) vkFreeMemory(dev, b.memory, nullptr);
  }
}

uint32_t Allocator::find_type(uint32_t bits, MemoryKind kind) const {
  const auto& mp = ctx_.memory_properties();
  auto score = [&](VkMemoryPropertyFlags f) -> int {
    if (kind == MemoryKind::device) {
      if (!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) return 1;
      const bool mappable = (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
      // UMA (integrated GPUs, lavapipe): device-local and mappable is best, no staging copies.
      // Discrete GPUs: plain device-local; the ReBAR window (device-local and mappable) copied at
      // 848 GB/s on an H100 against ~3000 for its VRAM (KILN_VULKAN_REBAR=1 prefers it).
      if (discrete_ && !prefer_rebar_) return mappable ? 3 : 4;
      return mappable ? 4 : 3;
    }
    if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) || !(f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) return 0;
    return (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 3 : 2;
  };
  int best = 0;
  uint32_t pick = UINT32_MAX;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    if (!(bits & (1u << i))) continue;
    int s = score(mp.memoryTypes[i].propertyFlags);
    if (s > best) best = s, pick = i;
  }
  if (pick == UINT32_MAX)
    throw_error("[vulkan] device '{}' has no suitable {} memory type", ctx_.info().name,
                kind == MemoryKind::device ? "device" : "host-visible");
  return pick;
}

VkBuffer Allocator::make_buffer(uint64_t bytes, bool external) const {
  VkExternalMemoryBufferCreateInfo ext{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.pNext = external ? &ext : nullptr;
  bi.size = bytes;
  bi.usage = kUsage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer b = VK_NULL_HANDLE;
  check(vkCreateBuffer(ctx_.device(), &bi, nullptr, &b), "vkCreateBuffer");
  return b;
}

void Allocator::oom(uint64_t asked, const char* why) const {
  uint64_t free = limit_ > used_ ? limit_ - used_ : 0;
  throw_error(
      "[vulkan] out of device memory on '{}': asked {}, free {} (used {} of {}){}{}; use a smaller model, "
      "fewer sequences or a smaller cache.memory",
      ctx_.info().name, mib(asked), mib(free), mib(used_), mib(limit_), *why ? ": " : "", why);
}

VkDeviceMemory Allocator::allocate_memory(uint64_t bytes, uint32_t type, const void* next, uint64_t asked) {
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.pNext = next;
  ai.allocationSize = bytes;
  ai.memoryTypeIndex = type;
  VkDeviceMemory m = VK_NULL_HANDLE;
  VkResult r = vkAllocateMemory(ctx_.device(), &ai, nullptr, &m);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) oom(asked, result_name(r));
  check(r, "vkAllocateMemory");
  return m;
}

Allocation Allocator::allocate(uint64_t bytes, MemoryKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  // +32: quantized-block kernels fetch whole 16-byte texels around a block, up to 2 past the
  // tensor's last byte; the slack keeps those reads inside the allocation.
  uint64_t size = align_up(std::max<uint64_t>(bytes, 16), 16) + 32;
  uint64_t max_alloc = ctx_.info().max_alloc_size ? ctx_.info().max_alloc_size : UINT64_MAX;
  if (size > max_alloc)
    throw_error(
        "[vulkan] a single buffer of {} asked on '{}' exceeds the device's largest allocation {}; split the "
        "tensor (e.g. by row blocks)",
        mib(size), ctx_.info().name, mib(max_alloc));
  if (kind == MemoryKind::device && limit_ && used_ + size > limit_) oom(size, "");

  Allocation a;
  a.kind = kind;
  a.size = size;
  if (size >= dedicated_threshold_) {
    a.buffer = make_buffer(size);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(ctx_.device(), a.buffer, &req);
    uint32_t type = find_type(req.memoryTypeBits, kind);
    VkMemoryDedicatedAllocateInfo ded{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
    ded.buffer = a.buffer;
    try {
      a.dedicated = allocate_memory(req.size, type, &ded, size);
    } catch (...) {
      vkDestroyBuffer(ctx_.device(), a.buffer, nullptr);
      throw;
    }
    check(vkBindBufferMemory(ctx_.device(), a.buffer, a.dedicated, 0), "vkBindBufferMemory");
    if ((ctx_.memory_properties().memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        !(no_map_device_ && kind == MemoryKind::device)) {
      void* p = nullptr;
      check(vkMapMemory(ctx_.device(), a.dedicated, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
      a.mapped = static_cast<uint8_t*>(p);
    }
    if (kind == MemoryKind::device) used_ += size;
    reserved_ += req.size;
    return a;
  }

  uint64_t need = align_up(size, kAlign);
  for (size_t bi = 0;; ++bi) {
    if (bi == blocks_.size()) {
      Block b;
      b.kind = kind;
      b.size = block_size_;
      b.buffer = make_buffer(b.size);
      VkMemoryRequirements req;
      vkGetBufferMemoryRequirements(ctx_.device(), b.buffer, &req);
      uint32_t type = find_type(req.memoryTypeBits, kind);
      try {
        b.memory = allocate_memory(req.size, type, nullptr, size);
      } catch (...) {
        vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
        throw;
      }
      check(vkBindBufferMemory(ctx_.device(), b.buffer, b.memory, 0), "vkBindBufferMemory");
      if ((ctx_.memory_properties().memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
          !(no_map_device_ && kind == MemoryKind::device)) {
        void* p = nullptr;
        check(vkMapMemory(ctx_.device(), b.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
        b.mapped = static_cast<uint8_t*>(p);
      }
      b.free[0] = b.size;
      reserved_ += req.size;
      blocks_.push_back(std::move(b));
    }
    Block& b = blocks_[bi];
    if (b.kind != kind || !b.buffer) continue;
    for (auto it = b.free.begin(); it != b.free.end(); ++it) {
      if (it->second < need) continue;
      uint64_t off = it->first, left = it->second - need;
      b.free.erase(it);
      if (left) b.free[off + need] = left;
      a.buffer = b.buffer;
      a.offset = off;
      a.block = static_cast<int32_t>(bi);
      a.mapped = b.mapped ? b.mapped + off : nullptr;
      if (kind == MemoryKind::device) used_ += need;
      a.size = size;
      return a;
    }
  }
}

void Allocator::destroy_views(VkBuffer buffer, uint64_t offset) {
  auto it = views_.find({buffer, offset});
  if (it == views_.end()) return;
  for (View& v : it->second) vkDestroyBufferView(ctx_.device(), v.view, nullptr);
  views_.erase(it);
}

void Allocator::release(Allocation& a) {
  if (!a) return;
  std::lock_guard<std::mutex> lock(mu_);
  destroy_views(a.buffer, a.offset);
  if (a.block < 0) {
    vkDestroyBuffer(ctx_.device(), a.buffer, nullptr);
    vkFreeMemory(ctx_.device(), a.dedicated, nullptr);
    if (a.imported)
      imported_ -= a.size;
    else if (a.kind == MemoryKind::device)
      used_ -= a.size;
    a = Allocation{};
    return;
  }
  Block& b = blocks_[static_cast<size_t>(a.block)];
  uint64_t need = align_up(a.size, kAlign);
  auto [it, ok] = b.free.emplace(a.offset, need);
  (void)ok;
  // Coalesce with neighbours.
  if (auto next = std::next(it); next != b.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b.free.erase(next);
  }
  if (it != b.free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b.free.erase(it);
    }
  }
  if (a.kind == MemoryKind::device) used_ -= need;
  a = Allocation{};
}

Allocation Allocator::import_host(const void* ptr, uint64_t bytes) {
  const DeviceInfo& d = ctx_.info();
  uint64_t align = d.min_import_alignment;
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (!d.host_import || import_off_ || addr % align || bytes == 0) return {};
  uint64_t size = align_up(bytes, align);
  VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  if (ctx_.get_host_pointer_props(ctx_.device(), VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, ptr, &hp) !=
          VK_SUCCESS ||
      hp.memoryTypeBits == 0)
    return {};
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a;
  a.buffer = make_buffer(size, true);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx_.device(), a.buffer, &req);
  uint32_t bits = hp.memoryTypeBits & req.memoryTypeBits;
  if (!bits) {
    vkDestroyBuffer(ctx_.device(), a.buffer, nullptr);
    return {};
  }
  uint32_t type = 0;
  while (!(bits & (1u << type))) ++type;
  VkImportMemoryHostPointerInfoEXT imp{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
  imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  imp.pHostPointer = const_cast<void*>(ptr);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.pNext = &imp;
  ai.allocationSize = size;
  ai.memoryTypeIndex = type;
  VkDeviceMemory m = VK_NULL_HANDLE;
  if (VkResult r = vkAllocateMemory(ctx_.device(), &ai, nullptr, &m); r != VK_SUCCESS) {
    // One refusal stops further tries: the driver refuses the rest the same way, and on NVIDIA a
    // refused import was seen to make the next plain allocation fail as well.
    log::debug("[vulkan] importing {} of host memory failed ({}); weights are copied from now on", mib(size),
               result_name(r));
    import_off_ = true;
    vkDestroyBuffer(ctx_.device(), a.buffer, nullptr);
    return {};
  }
  check(vkBindBufferMemory(ctx_.device(), a.buffer, m, 0), "vkBindBufferMemory");
  // Imported memory is freed like a dedicated allocation but not counted against the limit.
  a.dedicated = m;
  a.imported = true;
  a.size = size;
  a.mapped = static_cast<uint8_t*>(const_cast<void*>(ptr));
  imported_ += size;
  return a;
}

VkBufferView Allocator::view(const Allocation& a, uint64_t base, VkFormat format) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& vs = views_[{a.buffer, a.offset}];
  for (View& v : vs)
    if (v.base == base && v.format == format) return v.view;
  uint32_t tb = texel_bytes(format);
  if (!tb) throw_error("[vulkan] internal: no texel size for format {}", static_cast<int>(format));
  if (base >= a.size) throw_error("[vulkan] internal: view base {} beyond a {}-byte allocation", base, a.size);
  uint64_t texels = std::min<uint64_t>((a.size - base) / tb, ctx_.info().max_texel_elements);
  if (texels == 0) texels = 1;
  VkBufferViewCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
  ci.buffer = a.buffer;
  ci.format = format;
  ci.offset = a.offset + base;
  ci.range = texels * tb;
  VkBufferView v = VK_NULL_HANDLE;
  check(vkCreateBufferView(ctx_.device(), &ci, nullptr, &v), "vkCreateBufferView");
  vs.push_back({base, format, v});
  return v;
}

bool Allocator::format_supported(VkFormat format) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = format_ok_.find(format);
  if (it != format_ok_.end()) return it->second;
  VkFormatProperties fp;
  vkGetPhysicalDeviceFormatProperties(ctx_.physical(), format, &fp);
  bool ok = fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT;
  format_ok_[format] = ok;
  return ok;
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {used_, reserved_, imported_, limit_};
}

void Allocator::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes ? bytes : heap_;
}

}  // namespace kiln::vk
