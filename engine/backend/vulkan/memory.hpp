// Device memory: small and medium buffers are sub-allocated from large blocks (one VkBuffer per
// block, so a tensor is a (buffer, offset, size) triple); large ones get a dedicated allocation;
// read-only mapped files can be imported zero-copy with VK_EXT_external_memory_host. Every buffer
// carries STORAGE + UNIFORM_TEXEL + TRANSFER usage so kernels can read it either way.
// Out of memory is a HostError saying how much was asked and how much is free, never a crash.
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/vulkan/context.hpp"

namespace kiln::vk {

enum class MemoryKind {
  device,  ///< DEVICE_LOCAL (also host-visible on UMA devices such as lavapipe)
  host,    ///< HOST_VISIBLE | HOST_COHERENT (staging, readback)
};

struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;        ///< into buffer
  uint64_t size = 0;          ///< bytes usable (requested size rounded up to 16)
  uint8_t* mapped = nullptr;  ///< host pointer to offset, or null when not host-visible
  int32_t block = -1;         ///< block index; -1: dedicated or imported
  VkDeviceMemory dedicated = VK_NULL_HANDLE;
  MemoryKind kind = MemoryKind::device;
  bool imported = false;  ///< host memory imported zero-copy (not counted in used)
  explicit operator bool() const { return buffer != VK_NULL_HANDLE; }
};

struct MemoryStats {
  uint64_t used = 0;      ///< bytes handed out (sub-allocations + dedicated), imported excluded
  uint64_t reserved = 0;  ///< bytes held from the driver
  uint64_t imported = 0;  ///< bytes of host memory imported zero-copy
  uint64_t limit = 0;     ///< accounting limit (heap size or KILN_VULKAN_MEMORY_LIMIT)
};

class Allocator {
 public:
  explicit Allocator(Context& ctx);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /** Throws HostError "[vulkan] out of device memory: asked N, free M ..." when it cannot. */
  Allocation allocate(uint64_t bytes, MemoryKind kind = MemoryKind::device);
  void release(Allocation& a);
  /** Imports [ptr, ptr+bytes) (page-aligned, e.g. a read-only mmap) as device memory; returns an
   *  empty Allocation when the device cannot (no extension, misaligned, no compatible type). */
  Allocation import_host(const void* ptr, uint64_t bytes);  // never on discrete GPUs (see the constructor)
  /** A texel-buffer view of the allocation from byte `base` (a multiple of 256) to its end, capped
   *  at maxTexelBufferElements, in `format` (cached; destroyed with the allocation). */
  VkBufferView view(const Allocation& a, uint64_t base, VkFormat format);
  bool format_supported(VkFormat format);

  MemoryStats stats() const;
  /** Lowers the accounting limit (tests, KILN_VULKAN_MEMORY_LIMIT); 0 restores the heap size. */
  void set_limit(uint64_t bytes);
  bool device_is_host_visible() const { return device_mapped_ && !no_map_device_; }

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    uint8_t* mapped = nullptr;
    uint64_t size = 0;
    MemoryKind kind = MemoryKind::device;
    std::map<uint64_t, uint64_t> free;  ///< offset -> size, coalesced
  };
  uint32_t find_type(uint32_t bits, MemoryKind kind) const;
  VkBuffer make_buffer(uint64_t bytes, bool external = false) const;
  VkDeviceMemory allocate_memory(uint64_t bytes, uint32_t type, const void* next, uint64_t asked);
  [[noreturn]] void oom(uint64_t asked, const char* why) const;
  void destroy_views(VkBuffer buffer, uint64_t offset);

  Context& ctx_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;
  uint64_t block_size_ = 0, dedicated_threshold_ = 0;
  uint64_t used_ = 0, reserved_ = 0, imported_ = 0, limit_ = 0, heap_ = 0;
  bool device_mapped_ = false, no_map_device_ = false;
  std::atomic<bool> import_off_{false};  // host imports refused (discrete GPU, env, or a failed try)
  bool discrete_ = false, prefer_rebar_ = false;  // memory type choice (find_type)
  struct View {
    uint64_t base;
    VkFormat format;
    VkBufferView view;
  };
  std::map<std::pair<VkBuffer, uint64_t>, std::vector<View>> views_;  ///< by (buffer, allocation offset)
  std::map<VkFormat, bool> format_ok_;
};

}  // namespace kiln::vk
